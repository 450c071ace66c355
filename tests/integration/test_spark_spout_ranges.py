"""A Spark spout's stream batches registered from their offset ranges (reliable_kafka.spark.batch_roots)
and its start on a group coordinator that is not ready yet. Real broker and acker, Spark in local mode.

A transactional source has offsets that hold no record (commit and abort markers, aborted records
that read_committed skips): they get roots from their batch's range, complete by the final ack
alone and never hold the group commit back; after a failed batch they are redelivered, found
missing, and done without being counted as lost to retention."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from spark_helpers import acked_downstream, acker_running, spark_topology, started, tag_with_source

from reliable_kafka import Tracking
from reliable_kafka.offsets import end_offsets, lag
from reliable_kafka.spark import SparkOptions, SparkSpout, spark_session
from reliable_kafka.testing.topics import unique_name

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-spout-ranges", master="local[2]")
    yield session
    session.stop()


def _produce_transactions(bootstrap: str, topic: str) -> set[tuple[int, int]]:
    """Three committed transactions of 30 records and one aborted between them; returns the
    committed records' (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("rk-src-txn")})
    producer.init_transactions(30)
    placed: set[tuple[int, int]] = set()

    def delivered(error, message) -> None:
        if error is None and message.value().startswith(b"ok"):
            placed.add((message.partition(), message.offset()))

    for round_ in range(4):
        producer.begin_transaction()
        for i in range(30):
            prefix = "aborted" if round_ == 1 else "ok"
            producer.produce(topic, f"{prefix}-{round_}-{i}".encode(), partition=i % 2, on_delivery=delivered)
        producer.flush(30)
        if round_ == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    return placed


def test_a_transactional_source_completes_and_commits_past_its_markers(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-ranges", tmp_path)
    placed = _produce_transactions(kafka_bootstrap, flow.source)
    assert len(placed) == 90
    calls = []

    def fail_first_batch(df):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first batch fails on purpose: its roots are redelivered")
        return tag_with_source(df)

    with acked_downstream(kafka_bootstrap, flow.topology, flow.output) as log:
        spout = flow.spout(
            transform=fail_first_batch,
            options=SparkOptions(available_now=True, max_offsets_per_trigger=40, commit_interval_ms=200),
            tracking=Tracking(message_timeout_ms=20_000),
        )
        with started(spout):
            assert spout.run_until(lambda job: job.caught_up() and job.idle(), timeout=180), spout.progress()
            progress = spout.progress()

    ends = end_offsets(kafka_bootstrap, flow.source)
    assert sum(ends.values()) == 120 + 8, "4 transactions: 120 records and a marker per partition each"
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0
    assert set(log.ok) == placed, "every committed record reached the downstream, no aborted one"
    assert spout._batches.from_ranges >= 1, "no stream batch was registered from its offset range"
    assert progress["lost_to_retention"] == 0, "offsets that never held a record were counted as lost"
    assert progress["failed_batches"] == 1


class _CoordinatorNotReadyYet:
    """The group consumer of a fresh broker: committed() answers NOT_COORDINATOR a few times."""

    def __init__(self, consumer, failures: int) -> None:
        self._consumer = consumer
        self.failures = failures

    def committed(self, partitions, timeout=None):
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, "Broker: Not coordinator"))
        return self._consumer.committed(partitions, timeout=timeout)

    def __getattr__(self, name):
        return getattr(self._consumer, name)


def test_start_waits_for_a_group_coordinator_that_is_not_ready(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-coordinator", tmp_path, partitions=1)
    wrappers = []

    class Spout(SparkSpout):
        def _new_group_consumer(self):
            wrappers.append(_CoordinatorNotReadyYet(super()._new_group_consumer(), failures=3))
            return wrappers[-1]

    with acker_running(kafka_bootstrap, flow.topology):
        spout = flow.spout(
            spout_class=Spout,
            transform=tag_with_source,
            options=SparkOptions(available_now=True),
        )
        with started(spout):  # start() raised KafkaException(NOT_COORDINATOR) before
            assert spout.run_until(timeout=60), spout.progress()
    assert wrappers and wrappers[0].failures == 0
