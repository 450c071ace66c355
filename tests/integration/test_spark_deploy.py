"""Spark beyond a session made in the test process (docs/design.md section 7.3).

- ``reliable-kafka spark-submit`` runs an application under spark-submit with the connector added,
  and ``spark_session()`` keeps the master spark-submit was given; plain spark-submit without the
  connector gets a clear error instead of "Failed to find data source: kafka".
- Restart recovery reads the checkpoint through Hadoop's FileSystem API: a ``file://`` URI and a
  ``viewfs://`` location (a mount table onto a local directory) recover exactly like a local path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from spark_helpers import (
    acker_running,
    acking_downstream,
    bolt_running,
    downstream_bolt,
    new_topology,
    source_of,
    started,
    tag_with_source,
    topology_spout,
)

from reliable_kafka import Tracking
from reliable_kafka.offsets import lag
from reliable_kafka.spark import SparkOptions, spark_session
from reliable_kafka.spark.checkpoint import read_resume_point
from reliable_kafka.spark.session import spark_submit_command
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).with_name("spark_submit_script.py")
VIEWFS_MOUNT = "viewfs://rk-test/ckpt"


def submit(args: list[str], *, wrapper: bool) -> tuple[int, dict, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYSPARK_SUBMIT_ARGS", "MASTER", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
    }
    env["PYSPARK_PYTHON"] = sys.executable
    if wrapper:
        command = [sys.executable, "-m", "reliable_kafka", "spark-submit", *args]
    else:
        command = spark_submit_command(args, jars=[])[0:1] + args  # pyspark's spark-submit, nothing added
    done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, (json.loads(lines[-1]) if lines else {}), done.stderr[-3000:]


def test_spark_submit_wrapper_adds_the_connector_and_keeps_the_given_master(kafka_bootstrap):
    topic = unique_name("rk-submit")
    create_topics(kafka_bootstrap, {topic: 2})
    produce_values(kafka_bootstrap, topic, [f"r{i}".encode() for i in range(25)])
    code, result, stderr = submit(
        ["--master", "local[1]", "--driver-memory", "512m", str(SCRIPT), kafka_bootstrap, topic], wrapper=True
    )
    assert code == 0, stderr
    # local[1], not spark_session()'s default local[2]: the submitted master is kept; the wrapper
    # passed the Java functions' jar too
    one_pair = "0220" + "0000000000000001" + "0000000000000002"
    assert result == {"master": "local[1]", "driver_host": "127.0.0.1", "count": 25, "jvm_functions": one_pair}, stderr


def test_plain_spark_submit_without_the_connector_is_a_clear_error(kafka_bootstrap):
    code, result, stderr = submit(
        ["--master", "local[1]", "--driver-memory", "512m", str(SCRIPT), kafka_bootstrap, "unused"], wrapper=False
    )
    assert code == 3, stderr
    assert "reliable-kafka spark-submit" in result["error"]
    assert "spark-sql-kafka-0-10" in result["error"]


@pytest.fixture(scope="module")
def viewfs_target(tmp_path_factory):
    return tmp_path_factory.mktemp("viewfs-target")


@pytest.fixture(scope="module")
def spark(viewfs_target):
    # Hadoop's ViewFileSystem: a scheme that only Hadoop (not a local-path reader) can resolve.
    session = spark_session(
        "rk-test-spark-deploy",
        master="local[2]",
        extra_conf={"spark.hadoop.fs.viewfs.mounttable.rk-test.link./ckpt": f"file://{viewfs_target}"},
    )
    yield session
    session.stop()


@pytest.mark.parametrize("form", ["file-uri", "viewfs"])
def test_restart_recovers_through_hadoop_file_systems(spark, kafka_bootstrap, tmp_path, viewfs_target, form):
    """As test_spark_spout's restart test: run 1 reads all into the checkpoint but only even offsets
    are acked; run 2 gets no batch from Spark and must recover exactly the odd offsets, which it
    can only find by reading the checkpoint where Spark wrote it."""
    topology, source, output = new_topology(f"rk-spark-fs-{form}", kafka_bootstrap, partitions=1)
    placed = produce_values(kafka_bootstrap, source, [f"rec-{i}".encode() for i in range(120)])
    if form == "viewfs":
        checkpoint, local = f"{VIEWFS_MOUNT}/{topology}", viewfs_target / topology
    else:
        checkpoint, local = f"file://{tmp_path}/ckpt", tmp_path / "ckpt"
    group = f"{topology}.job"
    odds = [offset for _, offset in placed if offset % 2 == 1]

    def ack_evens(tuple_, collector) -> None:
        if source_of(tuple_.value)[1] % 2 == 0:
            collector.ack(tuple_)

    def new_run():  # both runs: the same checkpoint, AvailableNow
        return topology_spout(
            spark,
            kafka_bootstrap,
            topology,
            source,
            output,
            checkpoint,
            transform=tag_with_source,
            options=SparkOptions(available_now=True),
            tracking=Tracking(message_timeout_ms=60_000),
        )

    with acker_running(kafka_bootstrap, topology, timeout_ms=60_000):
        with bolt_running(downstream_bolt(kafka_bootstrap, topology, output, ack_evens)), started(new_run()) as first:
            assert first.run_until(
                lambda job: job.tracker.stats.completed == len(placed) - len(odds) and not job.query.isActive,
                timeout=180,
            ), first.progress()
        assert first.committed_offsets() == {(source, 0): 1}
        # Spark wrote the checkpoint where the location points; Hadoop reads it there.
        assert read_resume_point(local).offsets == {(source, 0): len(placed)}
        assert read_resume_point(checkpoint, spark=spark).offsets == {(source, 0): len(placed)}
        with acking_downstream(kafka_bootstrap, topology, output) as log, started(new_run()) as second:
            assert second.run_until(lambda job: job.caught_up(), timeout=180), second.progress()
            progress = second.progress()

    assert progress["batches"] == 0, "Spark re-read records although its checkpoint was committed"
    assert progress["recovered"] == len(odds), "the checkpoint was not found where Spark wrote it"
    assert set(log.ok) == {(0, offset) for offset in odds}
    assert lag(kafka_bootstrap, group, source) == 0
