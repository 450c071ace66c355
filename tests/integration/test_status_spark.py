"""Status snapshots from a Spark spout's driver (the demo's word-count job) on a real broker."""

from __future__ import annotations

import time

import pytest

from reliable_kafka import BasicBolt, LocalCluster, Tracking
from reliable_kafka.acker import AckerWorker
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.ops.status import build_report, read_snapshots
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.spark


def test_a_spark_spout_reports_from_its_driver(kafka_bootstrap):
    from reliable_kafka.spark.demo_job import SparkWordCount

    topology = unique_name("st-spark")
    sentences, words = f"{topology}-sentences", f"{topology}-words"
    create_topics(kafka_bootstrap, {sentences: 2, words: 2})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=1))
    # keyed, so that both partitions hold records (a keyless burst may all go to one, and the empty
    # partition then has no commit to wait for)
    keys = [b"%d" % i for i in range(200)]
    placed = produce_values(kafka_bootstrap, sentences, [b"the cow jumped over the moon"] * 200, keys=keys)
    assert {partition for partition, _ in placed} == {0, 1}
    on = {"topology": topology, "connection": kafka_bootstrap}
    acker = AckerWorker(**on, tracking=Tracking(ackers=1))
    counter = BasicBolt(**on, source_topics=words, group_id=f"{topology}-count", handler=lambda t, c: None)
    job = SparkWordCount(kafka_bootstrap, topology, sentences, words)
    job.job.status_interval_s = 1.0
    job.job.metrics_port = 0
    with LocalCluster(acker, counter):
        job.start()
        try:
            deadline = time.monotonic() + 300
            while committed_offsets(kafka_bootstrap, job.group_id, sentences) != end_offsets(
                kafka_bootstrap, sentences
            ):
                job.job.raise_if_failed()
                assert time.monotonic() < deadline, f"Spark job did not finish: {job.job.progress()}"
                time.sleep(1)
            report = build_report(kafka_bootstrap, topology)
            spark_row = next(c for c in report["components"] if c["kind"] == "spark-spout")
            assert spark_row["name"] == job.job.name and spark_row["state"] == "running"
            assert spark_row["verdict"] != "DOWN" and spark_row["metrics_port"] == job.job.metrics_port > 0
            assert {p["partition"] for p in report["partitions"] if p["group"] == job.group_id} == {0, 1}
        finally:
            job.stop()
    snapshot = read_snapshots(kafka_bootstrap, topology)[job.job.name]
    assert snapshot["state"] == "stopped"
    assert snapshot["counters"]["completed"] == job.job.tracker.stats.completed == 200
    assert snapshot["latency"]["count"] == 200
    assert snapshot["outputs"] == [words] and snapshot["inputs"] == [sentences]


def test_a_spark_spout_started_before_its_broker_serves_its_metrics_port_while_it_waits(tmp_path):
    """``SparkJob.start`` waits for its cluster as the workers do (``ops.waiting.wait_serving``):
    its metrics port says so meanwhile, and ``stop()`` from another thread ends the wait."""
    import json
    import socket
    import threading

    from prometheus_client.parser import text_string_to_metric_families

    from reliable_kafka.errors import StateError
    from reliable_kafka.spark import SparkSpout, spark_session
    from reliable_kafka.testing.endpoints import http_get

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there
    topology = unique_name("st-spark-wait")
    job = SparkSpout(
        spark_session("rk-test-spark-waiting"),
        topology=topology,
        connection=bootstrap,
        source_topics=f"{topology}-in",
        group_id=f"{topology}-spark",
        checkpoint_dir=str(tmp_path / "checkpoint"),
        transform=lambda df: df,
        output_topic=f"{topology}-out",
    )
    job.metrics_port = 0
    errors: list[BaseException] = []

    def start() -> None:
        try:
            job.start()
        except BaseException as exc:  # the test's to judge
            errors.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not job.metrics_port:
            assert time.monotonic() < deadline and not errors, errors
            time.sleep(0.2)
        status, body = http_get(job.metrics_port, "/readyz")
        (reason,) = json.loads(body)["reasons"]
        assert status == 503 and f"waiting for Kafka at {bootstrap}" in reason, body
        assert http_get(job.metrics_port, "/healthz")[0] == 200
        families = {
            f.name: f for f in text_string_to_metric_families(http_get(job.metrics_port, "/metrics")[1].decode())
        }
        assert [s.value for s in families["rk_component_waiting_for_kafka"].samples] == [1.0]
        assert families["rk_component_info"].samples[0].labels["kind"] == "spark-spout"
    finally:
        job.stop()
        thread.join(60)
    assert not thread.is_alive()
    [error] = errors
    assert isinstance(error, StateError) and "stopped while waiting" in str(error)
