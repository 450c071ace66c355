"""The wheel as a user gets it: built, installed WITHOUT extras into a fresh virtual environment,
then an acker worker (the console script) and a Python spout and bolt run from it against the
session broker. Nothing of this checkout is importable there (other working directory, no
PYTHONPATH), so the test sees exactly what `pip install reliable-kafka` ships."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = [pytest.mark.wheel, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

USER_PROGRAM = textwrap.dedent("""
    import json, sys, time
    import reliable_kafka
    from reliable_kafka import BasicBolt, LocalCluster, Spout
    from reliable_kafka.errors import MissingExtraError
    from reliable_kafka.offsets import committed_offsets, end_offsets, lag

    bootstrap, topology, source, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    report = {"module": reliable_kafka.__file__, "version": reliable_kafka.__version__}
    try:
        import reliable_kafka.spark
    except MissingExtraError as exc:
        report["spark_error"] = str(exc)
    seen = []
    on = {"topology": topology, "connection": bootstrap}
    with LocalCluster(
        Spout(**on, source_topics=source, group_id=f"{topology}-spout", emit_to=f"{topology}.out"),
        BasicBolt(**on, source_topics=f"{topology}.out", group_id=f"{topology}-bolt",
                  handler=lambda t, collector: seen.append(t.value)),
    ) as cluster:
        cluster.wait_until(lambda: lag(bootstrap, f"{topology}-spout", source) == 0,
                           timeout=180, what="every record done")
    report["seen"] = sorted(v.decode() for v in set(seen))
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source")
    # From a copy: an in-tree build leaves build/ in the checkout (and reuses what is stale there).
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "reliable_kafka", source / "reliable_kafka", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source)],
        check=True,
        timeout=600,
    )
    (built,) = out.glob("reliable_kafka-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "rk"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--constraint",
            str(REPO / "constraints.txt"),
            str(wheel),
        ],
        check=True,
        timeout=900,
    )
    return venv


def test_wheel_ships_schemas_license_and_no_test_hooks(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "reliable_kafka/py.typed" in names  # PEP 561: type checkers read the annotations
        schemas = {n.rsplit("/", 1)[-1] for n in names if n.startswith("reliable_kafka/schemas/")}
        assert schemas == {p.name for p in (REPO / "reliable_kafka" / "schemas").glob("*.avsc")}
        assert {"anchors.avsc", "anchors_v2.avsc", "ack_batch.avsc", "outcome_batch.avsc"} <= schemas
        assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        shipped = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    for optional in ("pyspark", "testcontainers", "pytest"):
        plain = [r for r in requires if optional in r and "extra ==" not in r]
        assert not plain, f"{optional} is a hard dependency: {plain}"
    assert "License-Expression: Apache-2.0" in metadata
    hooks = [n for n, text in shipped.items() if "FAILPOINT" in text.upper() or "RK_FAIL" in text]
    assert not hooks, f"test failpoints in the shipped code: {hooks}"


def test_installed_wheel_runs_acker_spout_and_bolt(fresh_venv, kafka_bootstrap, tmp_path):
    python, acker_cli = fresh_venv / "bin" / "python", fresh_venv / "bin" / "reliable-kafka"
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True
    ).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert not names & {"pyspark", "testcontainers", "pytest", "docker"}, sorted(names)

    topology, source = unique_name("rk-wheel"), unique_name("rk-wheel-src")
    create_topics(kafka_bootstrap, {source: 2})
    values = [f"record-{i}" for i in range(300)]
    produce_values(kafka_bootstrap, source, [v.encode() for v in values])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RK_SCHEMA_DIR", "VIRTUAL_ENV")}
    acker = subprocess.Popen(
        [str(acker_cli), "acker", "--topology", topology, "--bootstrap", kafka_bootstrap, "--ackers", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        program = tmp_path / "user_program.py"
        program.write_text(USER_PROGRAM)
        _wait_for_topic(kafka_bootstrap, f"{topology}.acks", acker)
        run = subprocess.run(
            [str(python), str(program), kafka_bootstrap, topology, source, str(len(values))],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
    finally:
        acker.terminate()
        acker_log, _ = acker.communicate(timeout=60)
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["module"].startswith(str(fresh_venv)), f"imported {report['module']}, not the wheel"
    assert "reliable-kafka[spark]" in report["spark_error"]
    assert report["seen"] == sorted(values)
    assert acker.returncode == 0, acker_log[-3000:]
    assert "stopped;" in acker_log, acker_log[-3000:]


def _wait_for_topic(bootstrap: str, topic: str, process: subprocess.Popen, timeout: float = 120) -> None:
    import time

    from reliable_kafka.kafka.admin import admin_client, partition_count

    admin = admin_client(bootstrap)
    deadline = time.monotonic() + timeout
    while partition_count(admin, topic) is None:
        if process.poll() is not None:
            raise AssertionError(f"the acker exited ({process.returncode}): {process.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the acker did not create {topic} within {timeout:.0f}s")
        time.sleep(0.5)
