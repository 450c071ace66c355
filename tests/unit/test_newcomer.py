"""A newcomer's first steps: the CLI's version, the demo without Spark, the demo's intended
failures in one line each, the fixtures without pytest, retries that outlast a short outage, and
a bench that leaves tracked files alone."""

from __future__ import annotations

import importlib.util
import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import reliable_kafka
from reliable_kafka import Backoff, demo
from reliable_kafka.cli import main
from reliable_kafka.errors import MissingExtraError

REPO = Path(__file__).parents[2]


def test_the_cli_prints_its_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"reliable-kafka {reliable_kafka.__version__}"


@pytest.fixture
def without_pyspark(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))


def test_the_demo_picks_the_python_engine_without_pyspark_and_says_why(without_pyspark):
    engine, note = demo.choose_engine(None)
    assert engine == "python" and note is not None and "reliable-kafka[spark]" in note


def test_the_demo_picks_spark_when_it_is_installed():
    assert demo.choose_engine(None) == ("spark", None)  # the suite installs the [spark] extra
    assert demo.choose_engine("python") == ("python", None)


def test_the_spark_demo_without_pyspark_fails_before_starting_anything(without_pyspark, monkeypatch, capsys):
    def no_broker(bootstrap):
        raise AssertionError("the demo started a broker")

    monkeypatch.setattr(demo, "_kafka", no_broker)
    assert main(["demo", "--engine", "spark"]) == 1
    assert "pip install 'reliable-kafka[spark]'" in capsys.readouterr().err


def _logged(*errors: BaseException, shown: int = 5) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("reliable_kafka.bolt.runner")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with demo.intended_failures_in_one_line(shown):
            for error in errors:
                try:
                    raise error
                except BaseException as exc:
                    logger.error("bolt-1: handler count raised on %s (attempt %d)", "words[0]@7", 1, exc_info=exc)
    finally:
        root.removeHandler(handler)
    return out.getvalue()


def test_the_demos_intended_failures_take_one_line_each_and_other_errors_keep_their_traceback():
    intended = _logged(demo.SimulatedFailure("simulated failure in the count bolt"))
    assert intended.splitlines() == [
        "bolt-1: handler count raised on words[0]@7 (attempt 1) (simulated failure in the count bolt)"
    ]
    real = _logged(KeyError("a real bug"))
    assert "Traceback (most recent call last)" in real and len(real.splitlines()) > 3


def test_the_demo_logs_its_first_intended_failures_only_and_every_real_error():
    errors = [demo.SimulatedFailure("simulated") for _ in range(40)] + [KeyError("a real bug")]
    lines = _logged(*errors, shown=5).splitlines()
    simulated = [line for line in lines if "(simulated)" in line]
    assert len(simulated) == 5 and "further simulated failures are not logged" in simulated[-1]
    assert "Traceback (most recent call last):" in lines and "KeyError: 'a real bug'" in lines


def test_the_fixtures_without_pytest_name_the_testing_extra():
    program = (
        "import sys\nsys.modules['pytest'] = None  # as if not installed\nimport reliable_kafka.testing.fixtures\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "MissingExtraError" in done.stderr and "pip install 'reliable-kafka[testing]'" in done.stderr
    assert issubclass(MissingExtraError, ImportError)


def test_the_default_backoff_rides_out_half_a_minute_of_outage():
    backoff = Backoff()
    waits = [backoff.delay_ms(attempt) for attempt in range(1, 6)]  # max_retries=5: five waits
    assert waits == [1000, 2000, 4000, 8000, 16000]
    assert sum(waits) >= 30_000
    assert backoff.delay_ms(100) == 60_000, "capped"


def _bench_pipeline():
    spec = importlib.util.spec_from_file_location("bench_pipeline", REPO / "bench" / "bench_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_pipeline"] = module
    spec.loader.exec_module(module)
    return module


def test_the_pipeline_bench_writes_its_plot_to_a_run_folder_unless_told():
    bench = _bench_pipeline()
    path = bench.plot_path(None, now=0)
    assert path == Path("bench/runs/19700101T000000Z/pipeline-latency.png")
    assert bench.plot_path(Path("docs/img/pipeline-latency.png")) == Path("docs/img/pipeline-latency.png")
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(path)], cwd=REPO, capture_output=True, timeout=60
    ).returncode
    assert ignored == 0, "bench/runs/ is gitignored"


def test_a_bad_command_line_value_is_the_constructors_config_error_in_one_line(capsys):
    code = main(["acker", "--topology", "t", "--bootstrap-servers", "127.0.0.1:1", "--ackers", "0"])
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        "reliable-kafka: error: AckerWorker: tracking.ackers must be an int >= 1 or None, got 0 (int)"
    )
