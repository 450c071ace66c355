"""A SparkSpout on a real Spark standalone cluster on loopback (docs/design.md section 7.3, 8).

The suite starts a master and two workers (1 core, 1g each) with pyspark's own ``spark-class``;
the driver is ``spark_driver_script.py`` submitted with ``reliable-kafka spark-submit --master
spark://...``, so the master comes from spark-submit and the connector from the wrapper. Each test
runs the job until its group commit reaches the end of the topic, then checks that every record
produced an output. A UDF holds the task of one record (``--pause-on``) so that an executor, or a
worker with its executor, is killed while that task runs: mid-batch by construction, not by timing.
The worker-kill test runs last (the cluster then has one worker).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import cast

import pyspark
import pytest
from spark_helpers import acked_downstream, driver_args, source_of, wait_for

from reliable_kafka.offsets import lag
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
SCRIPT = Path(__file__).with_name("spark_driver_script.py")
RECORDS = 1200


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendant_running(pid: int, marker: str) -> int | None:
    """The deepest descendant of ``pid`` whose command line contains ``marker``, if one runs.

    spark-submit's shell and JVM carry the script's name too; the Python driver is their child.
    """
    found: list[tuple[int, int]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or marker not in _cmdline(int(entry.name)):
            continue
        depth, current = 0, _ppid(int(entry.name))
        while current and current > 1 and current != pid:
            depth, current = depth + 1, _ppid(current)
        if current == pid:
            found.append((depth, int(entry.name)))
    return max(found)[1] if found else None


def ancestor_running(pid: int, marker: str) -> int:
    """The nearest ancestor of ``pid`` whose command line contains ``marker``."""
    current = _ppid(pid)
    while current and current > 1:
        if marker in _cmdline(current):
            return current
        current = _ppid(current)
    raise AssertionError(f"no ancestor of {pid} runs {marker}")


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(root / "logs"),
            "SPARK_WORKER_DIR": str(root / "work"),
        }
        for key in ("PYSPARK_SUBMIT_ARGS", "MASTER", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
            self.env.pop(key, None)
        self.processes: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self.url = ""

    def _start(self, cls: str, args: list[str], log: Path) -> subprocess.Popen:
        process = subprocess.Popen(
            [str(SPARK_CLASS), cls, *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def start(self) -> None:
        master_log = self.root / "master.log"
        master = self._start(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            master_log,
        )

        def master_url() -> bool:
            found = re.search(r"Starting Spark master at (spark://\S+)", master_log.read_text(errors="replace"))
            self.url = found.group(1) if found else ""
            return bool(self.url) or master.poll() is not None

        wait_for(master_url, timeout=180, what=f"the Spark master to start (see {master_log})")
        assert master.poll() is None, master_log.read_text()[-3000:]
        for i in range(2):
            self.start_worker(i)
        wait_for(
            lambda: master_log.read_text(errors="replace").count("Registering worker") >= 2,
            timeout=180,
            what=f"two workers to register (see {master_log})",
        )

    def start_worker(self, i: int) -> None:
        (self.root / f"work-{i}").mkdir(exist_ok=True)
        self.workers.append(
            self._start(
                "org.apache.spark.deploy.worker.Worker",
                [
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(self.root / f"work-{i}"),
                    self.url,
                ],
                self.root / f"worker-{i}.log",
            )
        )

    def stop(self) -> None:
        # Executors are in their worker's process group (a killed worker's too): signal groups.
        for process in reversed(self.processes):
            self._signal_group(process, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                pass
            self._signal_group(process, signal.SIGKILL)
            process.wait(30)

    @staticmethod
    def _signal_group(process: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_job(cluster: Cluster, bootstrap: str, tmp_path: Path, *, kill: str | None = None) -> dict:
    """Run the tracked job on the cluster; ``kill``: "executor" or "worker", killed mid-batch."""
    topology = unique_name(f"rk-cluster-{kill or 'plain'}")
    source, output, group = f"{topology}.src", f"{topology}.out", f"{topology}.job"
    create_topics(bootstrap, {source: 2, output: 2})
    placed = produce_values(bootstrap, source, [f"rec-{i}".encode() for i in range(RECORDS)])
    marker = tmp_path / "paused"
    args = driver_args(
        bootstrap,
        topology,
        source,
        output,
        group,
        f"file://{tmp_path / 'ckpt'}",
        max_offsets_per_trigger=200,
        message_timeout_ms=30000,
    )
    if kill:
        args += ["--pause-on", f"rec-{RECORDS // 2}", "--pause-file", str(marker)]
    submit = [
        sys.executable,
        "-m",
        "reliable_kafka",
        "spark-submit",
        "--master",
        cluster.url,
        "--driver-memory",
        "512m",
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.executor.cores=1",
        "--conf",
        "spark.cores.max=2",
        "--conf",
        f"spark.local.dir={tmp_path}",
        str(SCRIPT),
        *args,
    ]
    env = {**cluster.env, "PYSPARK_PYTHON": sys.executable}
    log_path = tmp_path / "driver.log"
    killed = None
    with acked_downstream(bootstrap, topology, output, timeout_ms=30_000):
        driver = subprocess.Popen(
            submit,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=open(log_path, "ab"),
            start_new_session=True,
        )
        try:
            if kill:
                wait_for(
                    lambda: marker.exists() or driver.poll() is not None,
                    timeout=300,
                    what=f"the task of rec-{RECORDS // 2} to start (see {log_path})",
                )
                assert driver.poll() is None, f"driver exited early; see {log_path}"
                python_worker = int(marker.read_text())
                executor = ancestor_running(python_worker, "CoarseGrainedExecutorBackend")
                killed = executor if kill == "executor" else ancestor_running(executor, "deploy.worker.Worker")
                os.kill(killed, signal.SIGKILL)
                wait_for(
                    lambda: not _alive(executor),
                    timeout=120,
                    what=f"executor {executor} to die with the {kill} {killed}",
                )
                (marker.parent / (marker.name + ".release")).touch()
            wait_for(
                lambda: lag(bootstrap, group, source) == 0 or driver.poll() is not None,
                timeout=420,  # below the test's own timeout, so that this message and the log path show
                what=f"the job to commit to the end of the topic (see {log_path})",
            )
            assert driver.poll() is None, f"driver exited early; see {log_path}"
            # SIGTERM the Python driver only: its stdout passes through spark-submit's JVM, which
            # must outlive it (signalling the whole group lost the final line when the JVM went first).
            python_driver = descendant_running(driver.pid, SCRIPT.name)
            assert python_driver is not None, f"no Python driver under spark-submit; see {log_path}"
            os.kill(python_driver, signal.SIGTERM)
            out, _ = driver.communicate(timeout=180)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(30)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    outputs = read_topic(bootstrap, output)
    produced = {(p, o) for p, o, _, _ in (source_of(cast(bytes, m.value())) for m in outputs)}
    missing = set(placed) - produced
    assert not missing, f"{len(missing)} records never produced an output, e.g. {sorted(missing)[:5]}"
    assert lag(bootstrap, group, source) == 0
    assert lines and lines[0].get("master") == cluster.url, f"not run on the cluster: {lines[:1]}; see {log_path}"
    return {"killed": killed, "final": lines[-1], "driver_log": log_path}


def test_tracked_job_end_to_end_on_a_standalone_cluster(cluster, kafka_bootstrap, tmp_path):
    result = run_job(cluster, kafka_bootstrap, tmp_path)
    assert result["final"].get("stopped"), result
    assert "Registering app rk-kill-test-driver" in (cluster.root / "master.log").read_text(errors="replace")


def test_executor_killed_mid_batch_loses_nothing(cluster, kafka_bootstrap, tmp_path):
    result = run_job(cluster, kafka_bootstrap, tmp_path, kill="executor")
    assert result["killed"] is not None


def test_worker_killed_mid_batch_loses_nothing(cluster, kafka_bootstrap, tmp_path):
    result = run_job(cluster, kafka_bootstrap, tmp_path, kill="worker")
    assert result["killed"] is not None
