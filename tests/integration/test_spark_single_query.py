"""A SparkSpout as one streaming query (``SparkOptions(single_query=True)`` and real-time mode)
against a real broker, acker and downstream bolt, Spark in local mode (docs/spark.md, "One
streaming query"). The ordering it relies on is proven in
``tests/unit/test_spark_single_query_protocol.py``; here the same checks as the foreachBatch
path's: the group commit never passes a record whose outputs the downstream has not handled,
failed trees are redelivered, a retried task completes nothing early, a restart loses nothing."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from spark_helpers import acked_downstream, source_of, spark_topology, started

from reliable_kafka import Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import ConfigError
from reliable_kafka.offsets import committed_offsets, lag
from reliable_kafka.spark import SparkOptions, spark_session
from reliable_kafka.spark.single_query import real_time_supported
from reliable_kafka.testing.records import produce_values, read_topic

pytestmark = pytest.mark.spark

FAILPOINT_PROPERTY = "rk.test.spark.single.failpoint"


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-single-query", master="local[2,3]")
    yield session
    session.stop()


def placed_records(bootstrap: str, topic: str, count: int) -> list[tuple[int, int]]:
    return produce_values(
        bootstrap, topic, [f"rec-{i}".encode() for i in range(count)], keys=[f"k{i}".encode() for i in range(count)]
    )


def three_words(df):
    """Three outputs per record (an explode: the shape of a word split), each tagged with its source."""
    tagged = df.select(
        "key",
        F.col("anchors"),
        F.concat_ws("|", *(F.col(c).cast("string") for c in ("value", "partition", "offset", "attempt"))).alias("tag"),
    )
    return tagged.select(
        "key", F.explode(F.array(*(F.concat(F.lit(f"{i}:"), "tag") for i in range(3)))).alias("value"), "anchors"
    )


def run_and_sample(spout, bootstrap, flow, log, *, timeout: float):
    """Run until caught up, sampling (committed offsets, what the downstream handled) throughout."""
    samples = []

    def sample_then_check(job) -> bool:
        committed = committed_offsets(bootstrap, flow.group, flow.source)
        samples.append((committed, log.snapshot_ok()))  # handled-before-commit, read after it
        return job.caught_up()

    assert spout.run_until(sample_then_check, timeout=timeout, poll_interval=0.5), spout.progress()
    return samples


def passed_unhandled(samples) -> list[tuple[int, int]]:
    return [
        (partition, offset)
        for committed, handled in samples
        for partition, point in committed.items()
        for offset in range(max(point, 0))
        if (partition, offset) not in handled
    ]


def test_single_query_commits_only_completed_trees_and_redelivers_failures(spark, kafka_bootstrap, tmp_path):
    """2000 records, three outputs each; the downstream fails the first attempt of every 25th:
    the commit never passes a record the downstream has not handled, failures are redelivered,
    every record reaches the downstream and the group ends at the end of the topic."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-single", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 2000)

    def fails_first(partition: int, offset: int) -> bool:
        return offset % 25 == 7

    with acked_downstream(kafka_bootstrap, flow.topology, flow.output, fail_first=fails_first) as log:
        spout = flow.spout(
            transform=three_words,
            options=SparkOptions(single_query=True, max_offsets_per_trigger=600, commit_interval_ms=300),
            tracking=Tracking(message_timeout_ms=10_000, backoff=Backoff(initial_ms=200)),
        )
        with started(spout):
            samples = run_and_sample(spout, kafka_bootstrap, flow, log, timeout=300)
            progress = spout.progress()

    assert lag(kafka_bootstrap, flow.group, flow.source) == 0
    assert not passed_unhandled(samples), (
        f"commit passed records the downstream never handled: {passed_unhandled(samples)[:5]}"
    )
    failed_first = {(p, o) for p, o in placed if fails_first(p, o)}
    assert set(log.failed) == failed_first
    assert all(max(log.ok[key]) >= 2 for key in failed_first), "failed records were not redelivered"
    assert set(log.ok) == set(placed), "some records never reached the downstream"
    assert progress["tracker"]["completed"] >= len(placed)
    assert progress["batches"] >= 1 and progress["inputs"] >= len(placed)


def test_single_query_task_retry_completes_nothing_early(spark, kafka_bootstrap, tmp_path):
    """A task dies after handing 40 rows to the sink (once; Spark retries it): every record still
    completes only after its outputs were handled, the retried outputs are tracked, none lost."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-single-retry", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 400)
    system = spark.sparkContext._jvm.java.lang.System
    system.setProperty(FAILPOINT_PROPERTY, "armed")

    def dies_once(df):  # record 0@100 fails its task once: the rows before it are in the sink already
        cleared = F.call_function(
            "java_method", F.lit("java.lang.System"), F.lit("clearProperty"), F.lit(FAILPOINT_PROPERTY)
        )
        fire = (F.col("partition") == 0) & (F.col("offset") == 100) & (cleared != "null")
        failing = F.when(fire, F.raise_error(F.lit("failpoint: a task dies after writing"))).otherwise(F.col("value"))
        return three_words(df.withColumn("value", failing.cast("binary")))

    try:
        with acked_downstream(kafka_bootstrap, flow.topology, flow.output) as log:
            spout = flow.spout(
                transform=dies_once,
                options=SparkOptions(single_query=True, commit_interval_ms=300),
                tracking=Tracking(message_timeout_ms=10_000, backoff=Backoff(initial_ms=200)),
            )
            with started(spout):
                samples = run_and_sample(spout, kafka_bootstrap, flow, log, timeout=300)
        assert system.getProperty(FAILPOINT_PROPERTY) is None, "the failpoint never fired"
    finally:
        system.clearProperty(FAILPOINT_PROPERTY)
    assert not passed_unhandled(samples)
    assert set(log.ok) == set(placed)
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0


def test_single_query_restart_loses_nothing(spark, kafka_bootstrap, tmp_path):
    """Stopped without draining (trees in flight, batches committed by Spark but not registered),
    then restarted on the same checkpoint: every record reaches the downstream and completes."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-single-restart", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 1500)
    options = SparkOptions(single_query=True, max_offsets_per_trigger=300, commit_interval_ms=300)
    tracking = Tracking(message_timeout_ms=10_000, backoff=Backoff(initial_ms=200))
    with acked_downstream(kafka_bootstrap, flow.topology, flow.output, delay_s=0.002) as log:
        first = flow.spout(transform=three_words, options=options, tracking=tracking)
        with started(first):
            assert first.run_until(lambda job: job.stats.batches >= 2, timeout=240), first.progress()
        second = flow.spout(transform=three_words, options=options, tracking=tracking)
        with started(second):
            samples = run_and_sample(second, kafka_bootstrap, flow, log, timeout=300)
    assert not passed_unhandled(samples)
    assert set(log.ok) == set(placed), "records lost across the restart"
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0


def test_single_query_refuses_a_transform_that_is_not_row_wise(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-single-agg", tmp_path)

    def count_values(df):
        from reliable_kafka.spark import merge_anchors

        return df.groupBy("value").agg(F.count("*").cast("string").alias("count"), merge_anchors().alias("anchors"))

    from spark_helpers import acker_running

    with acker_running(kafka_bootstrap, flow.topology):
        spout = flow.spout(transform=count_values, options=SparkOptions(single_query=True))
        with pytest.raises(ConfigError, match="not row-wise.*Aggregate"):
            spout.start()


@pytest.mark.skipif(not real_time_supported(), reason="this Spark has no real-time mode (4.1+)")
def test_real_time_mode_tracks_every_record(spark, kafka_bootstrap, tmp_path):
    """Real-time mode (batches of 10 s): trees complete as records arrive; at each batch's end the
    driver registers them; the commit never passes an unhandled record and reaches the end."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-single-rt", tmp_path)
    with acked_downstream(kafka_bootstrap, flow.topology, flow.output) as log:
        spout = flow.spout(
            transform=three_words,
            options=SparkOptions(real_time="10 seconds", commit_interval_ms=300),
            tracking=Tracking(message_timeout_ms=30_000, backoff=Backoff(initial_ms=200)),
        )
        with started(spout):
            # in real-time mode on every supported Spark (4.1: set through the JVM's Trigger.RealTime)
            assert "RealTimeTrigger" in spout.query._jsq.streamingQuery().trigger().toString()
            placed = placed_records(kafka_bootstrap, flow.source, 600)
            samples = run_and_sample(spout, kafka_bootstrap, flow, log, timeout=300)
    assert not passed_unhandled(samples)
    assert set(log.ok) == set(placed)
    outputs = read_topic(kafka_bootstrap, flow.output)
    assert len(outputs) >= 3 * len(placed)
    assert {source_of(record.value())[:2] for record in outputs} >= set(placed)
