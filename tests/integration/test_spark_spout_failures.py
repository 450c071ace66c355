"""A Spark spout acts on failures as the Python spouts do (one root-owning core): a poison row
(``rk_fail_retry`` false) is dead-lettered at once with its reason, a stream of failing rows trips
the dead-letter guard, and ``reliable-kafka trace`` finds a Spark spout's records through the root
index it writes. Real broker and acker, Spark in local mode."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F
from spark_helpers import acked_downstream, acker_running, source_tagged_value, spark_topology, started

from reliable_kafka import Tracking, codec
from reliable_kafka.cli import main
from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import DeadLetterGuardTripped
from reliable_kafka.offsets import committed_offsets, lag
from reliable_kafka.ops.failures import decode_attempts
from reliable_kafka.spark import spark_session
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-spout-failures", master="local[2]")
    yield session
    session.stop()


def _tagged(df):
    """``value|partition|offset|attempt`` (what the acking bolt reads), failing ``poison`` rows
    as poison pills: no retry."""
    return df.select(
        "key",
        source_tagged_value().alias("value"),
        "anchors",
        (F.col("value").cast("string") == "poison").alias("rk_fail"),
        F.lit("unparseable order").alias("rk_fail_reason"),
        F.lit(False).alias("rk_fail_retry"),
    )


def test_a_poison_row_is_dead_lettered_at_once_and_trace_shows_spark_records(spark, kafka_bootstrap, tmp_path, capsys):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-poison", tmp_path, partitions=1)
    placed = produce_values(kafka_bootstrap, flow.source, [b"good-0", b"poison", b"good-2"])
    with acked_downstream(kafka_bootstrap, flow.topology, flow.output, ackers=1, timeout_ms=60_000):
        spout = flow.spout(
            transform=_tagged,
            tracking=Tracking(max_retries=3, message_timeout_ms=60_000, backoff=Backoff(initial_ms=100)),
        )
        with started(spout):
            assert spout.run_until(timeout=180), spout.progress()
            progress = spout.progress()
    [dead] = read_topic(kafka_bootstrap, TopologyTopics(flow.topology).dlq)
    headers = dict(dead.headers())
    parked = codec.decode_parked(headers[codec.PARKED_HEADER])
    assert dead.value() == b"poison" and parked.source_offset == placed[1][1]
    assert parked.attempts == 1, "a poison pill is not retried (max_retries=3)"
    assert "POISON_PILL" in parked.reason and headers[REASON_HEADER] == b"unparseable order"
    assert [a.attempt for a in decode_attempts(headers[ATTEMPTS_HEADER])] == [1]
    assert progress["dead_lettered"] == 1 and progress["tracker"]["redelivered"] == 0
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0

    on = ["--topology", flow.topology, "--bootstrap-servers", kafka_bootstrap, "--json"]

    def traced(index):
        assert main(["trace", f"{flow.source}:{placed[index][0]}@{placed[index][1]}", *on]) == 0
        return json.loads(capsys.readouterr().out)

    good = traced(0)
    [attempt] = good["attempts"]
    assert attempt["spout_task_id"] == spout.task_id and attempt["outcome"]["kind"] == "COMPLETED"
    assert {"INIT", "ACK"} <= {e["kind"] for e in attempt["events"]} and not attempt["outstanding"]
    poison = traced(1)
    [attempt] = poison["attempts"]
    assert attempt["outcome"]["kind"] == "FAILED" and "FAIL" in [e["kind"] for e in attempt["events"]]
    assert [f["reason"] for f in attempt["failures"]] == ["unparseable order"]
    assert len(poison["dead_letters"]) == 1


def test_a_stream_of_failing_rows_trips_the_dead_letter_guard(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-guard", tmp_path, partitions=1)
    produce_values(kafka_bootstrap, flow.source, [f"bad-{i}".encode() for i in range(30)])

    def fail_every_row(df):
        return df.select("key", "value", "anchors", F.lit(True).alias("rk_fail"))

    with acker_running(kafka_bootstrap, flow.topology, ackers=1, timeout_ms=60_000):
        spout = flow.spout(
            transform=fail_every_row,
            tracking=Tracking(
                max_retries=0, message_timeout_ms=60_000, max_dead_letter_ratio=0.2, dead_letter_window=10
            ),
        )
        with started(spout), pytest.raises(DeadLetterGuardTripped) as caught:
            spout.run_until(lambda job: False, timeout=180)
    assert caught.value.window == 10 and caught.value.dead_letters == 3 and "dlq list" in str(caught.value)
    dead = read_topic(kafka_bootstrap, TopologyTopics(flow.topology).dlq)
    assert len(dead) == 2, "the guard refuses the dead letter that trips it, and every one after"
    assert committed_offsets(kafka_bootstrap, flow.group, flow.source).get(0, 0) < 30, "the rest stays uncommitted"
