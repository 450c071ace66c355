"""A tracked SparkSpout with adaptive query execution on (``spark.sql.adaptive.enabled``, Spark's
own default; ``spark_session()`` turns it off for small machines): a transform with a shuffle,
whose write AQE re-plans, completes its trees and commits, stream batches and a redelivery batch
alike. Real broker and acker, Spark in local mode."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import functions as F
from spark_helpers import acker_running, bolt_running, spark_topology, started

from reliable_kafka import Tracking
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.spark import SparkOptions, merge_anchors, spark_session
from reliable_kafka.testing.records import produce_values

pytestmark = pytest.mark.spark

KEYS = 7


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-aqe", extra_conf={"spark.sql.adaptive.enabled": "true"})
    yield session
    session.stop()


def count_per_key(df):
    """A shuffle (AQE coalesces its partitions): one output per key, anchored to every record in it."""
    return df.groupBy("key").agg(
        F.count("*").cast("string").alias("value"),
        merge_anchors().alias("anchors"),
    )


def test_a_tracked_spout_with_aqe_completes_its_trees_and_commits(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-aqe", tmp_path)
    count = 600
    produce_values(
        kafka_bootstrap,
        flow.source,
        [f"rec-{i}".encode() for i in range(count)],
        keys=[f"k{i % KEYS}".encode() for i in range(count)],
    )
    counted: dict[str, int] = {}
    failed_once = threading.Event()

    def add(tuple_, collector) -> None:
        key = tuple_.key.decode()
        if key == "k3" and not failed_once.is_set():  # fails every root in that count: redelivered
            failed_once.set()
            raise RuntimeError("downstream fails this count once, on purpose")
        counted[key] = counted.get(key, 0) + int(tuple_.value)

    downstream = BasicBolt(
        topology=flow.topology,
        connection=kafka_bootstrap,
        source_topics=flow.output,
        group_id=f"{flow.topology}.downstream",
        handler=add,
    )
    with acker_running(kafka_bootstrap, flow.topology, timeout_ms=60_000), bolt_running(downstream):
        spout = flow.spout(
            transform=count_per_key,
            options=SparkOptions(max_offsets_per_trigger=200),
            tracking=Tracking(message_timeout_ms=60_000, backoff=Backoff(initial_ms=200)),
        )
        with started(spout):
            assert spout._sink_session.conf.get("spark.sql.adaptive.enabled") == "true", "the write runs with AQE"
            assert spout.run_until(lambda job: job.caught_up() and job.idle(), timeout=300), spout.progress()
            progress = spout.progress()

    assert failed_once.is_set() and progress["tracker"]["redelivered"] >= 1
    assert progress["failed_batches"] == 0 and progress["dead_lettered"] == 0
    assert set(counted) == {f"k{k}" for k in range(KEYS)}
    assert sum(counted.values()) >= count  # at-least-once: a replay only adds
    committed = committed_offsets(kafka_bootstrap, flow.group, flow.source)
    assert {p: max(o, 0) for p, o in committed.items()} == end_offsets(kafka_bootstrap, flow.source)
