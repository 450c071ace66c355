"""A record Kafka deleted while a Spark spout held it in flight leaves a dead-letter reference (its
coordinates, attempts, no value) in the topology's DLQ, and the commit passes it only then. Real
broker (records deleted with AdminClient.delete_records), acker and downstream bolt; Spark local."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from spark_helpers import DownstreamLog, acker_running, bolt_running, source_of, wait_for

from reliable_kafka import Tracking
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.kafka.admin import admin_client
from reliable_kafka.offsets import committed_offsets
from reliable_kafka.ops import dlq
from reliable_kafka.spark import SparkSpout, spark_session
from reliable_kafka.spout.roots import GONE_REASON
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = pytest.mark.spark

DELETED = 3  # offsets 0-2 fail downstream on every attempt, until Kafka deletes them


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-spout-deleted", master="local[2]")
    yield session
    session.stop()


def _tagged(df):
    """``value|partition|offset|attempt``: what the downstream bolt reads."""
    from pyspark.sql import functions as F

    fields = [F.col("value").cast("string"), *(F.col(c).cast("string") for c in ("partition", "offset", "attempt"))]
    return df.select("key", F.concat_ws("|", *fields).alias("value"), "anchors")


def test_records_deleted_while_their_redelivery_waits_leave_references_and_nothing_else_is_lost(
    spark, kafka_bootstrap, tmp_path
):
    topology = unique_name("rk-spark-deleted")
    source, output, group = f"{topology}.src", f"{topology}.out", f"{topology}.job"
    create_topics(kafka_bootstrap, {source: 1, output: 1})
    produce_values(kafka_bootstrap, source, [f"v{i}".encode() for i in range(10)])
    log = DownstreamLog()

    def handle(tuple_, collector) -> None:
        partition, offset, attempt, _ = source_of(tuple_.value)
        with log.lock:
            if offset < DELETED:  # fails every attempt: only the deletion ends it
                log.failed[(partition, offset)] += 1
                raise RuntimeError("downstream fails this tuple on purpose")
            log.ok[(partition, offset)].add(attempt)

    bolt = BasicBolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=output,
        group_id=f"{output}.downstream",
        handler=handle,
    )
    with acker_running(kafka_bootstrap, topology, ackers=1, timeout_ms=60_000), bolt_running(bolt):
        spout = SparkSpout(
            spark,
            topology=topology,
            connection=kafka_bootstrap,
            source_topics=source,
            group_id=group,
            checkpoint_dir=str(tmp_path / "ckpt"),
            transform=_tagged,
            output_topic=output,
            tracking=Tracking(max_retries=20, message_timeout_ms=60_000, backoff=Backoff(initial_ms=500, max_ms=2000)),
        )
        spout.start()
        try:
            wait_for(
                lambda: len(log.failed) == DELETED, timeout=180, what=f"the downstream failing offsets 0-{DELETED - 1}"
            )
            admin = admin_client(kafka_bootstrap)  # held while its futures resolve
            for future in admin.delete_records([TopicPartition(source, 0, DELETED)]).values():
                assert future.result(timeout=30).low_watermark == DELETED
            assert spout.run_until(
                lambda job: committed_offsets(kafka_bootstrap, group, source).get(0) == 10 and job.idle(), timeout=240
            ), spout.progress()
            progress = spout.progress()
        finally:
            spout.stop()
    letters = dlq.read_dead_letters(kafka_bootstrap, topology)
    assert [(d.key, d.value, d.source, d.parked.reason, d.parked.component) for d in letters] == [
        (None, None, (source, 0, offset), GONE_REASON, spout.name) for offset in range(DELETED)
    ]
    assert all(d.parked.original_bytes == -1 and d.parked.value_omitted for d in letters)
    assert all(d.parked.attempts >= 1 and d.reference is not None for d in letters)
    assert log.snapshot_ok() == {(0, offset) for offset in range(DELETED, 10)}, "nothing else lost"
    assert progress["lost_to_retention"] == DELETED and progress["dead_lettered"] == 0
