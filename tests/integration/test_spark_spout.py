"""SparkSpout against a real broker and acker, Spark in local mode (docs/design.md section 7, 7.1, 8).

One SparkSession for the module, ``local[2,3]``: two cores, and a failed task is retried (local
mode ignores ``spark.task.maxFailures``). The task-retry test arms a failpoint in the JVM output
path: a write task dies after handing rows to Spark's Kafka sink (SinkFailpoint).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F
from spark_helpers import (
    acked_downstream,
    acker_running,
    acking_downstream,
    bolt_running,
    downstream_bolt,
    outcomes,
    outputs_by_root,
    source_of,
    spark_topology,
    started,
    tag_with_source,
)

from reliable_kafka import Tracking, codec
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.offsets import committed_offsets, lag
from reliable_kafka.spark import SparkOptions, spark_session
from reliable_kafka.spark.derive import (
    EDGE_TAG,
    ROOT_TAG,
    derive_edge,
    derive_root,
    edge_column,
    id_sql,
    root_column,
)
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.spark

FAILPOINT_OUTPUTS = 40


FAILPOINT_PROPERTY = "rk.test.spark.sink.failpoint"


class SinkFailpoint:
    """Arms a write task of the JVM output path to die after handing FAILPOINT_OUTPUTS rows to
    Spark's Kafka sink, once: the first task to reach that row clears a JVM system property
    (local mode: tasks run in the driver's JVM) and raises; Spark retries the task."""

    def __init__(self, spark) -> None:
        self.system = spark.sparkContext._jvm.java.lang.System

    def arm(self) -> None:
        self.system.setProperty(FAILPOINT_PROPERTY, "armed")

    def fired(self) -> bool:
        return self.system.getProperty(FAILPOINT_PROPERTY) is None


@pytest.fixture
def failpoint(spark, monkeypatch):
    from reliable_kafka.spark import writer

    original, original_jvm = writer.sink_rows, writer.output_rows_jvm

    def failing(rows, row_id):  # after the persisted rows: the sink has the rows before this one
        index = row_id.bitwiseAND(F.lit((1 << 33) - 1))  # the row's place in its partition
        cleared = F.call_function(
            "java_method", F.lit("java.lang.System"), F.lit("clearProperty"), F.lit(FAILPOINT_PROPERTY)
        )
        # once: the property's value the first time, then the text "null" (one call per row reached)
        fire = (index == FAILPOINT_OUTPUTS) & (cleared != "null")
        return rows.withColumn(
            "value",
            F.when(fire, F.raise_error(F.lit("failpoint: a task dies after writing"))).otherwise(F.col("value")),
        )

    # the SQL path's rows carry their row id; the Java functions' path reads it inside rk_output_header,
    # so the failpoint counts the partition's rows itself (the same place: nothing filters in between)
    monkeypatch.setattr(writer, "sink_rows", lambda rows: original(failing(rows, F.col(writer.ROW_ID))))
    monkeypatch.setattr(  # java_method is nondeterministic: such a plan is built anew each batch (batch_plans)
        writer, "output_rows_jvm", lambda rows, salt: original_jvm(failing(rows, F.monotonically_increasing_id()), salt)
    )
    point = SinkFailpoint(spark)
    yield point
    point.system.clearProperty(FAILPOINT_PROPERTY)


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-spout", master="local[2,3]")
    yield session
    session.stop()


def placed_records(bootstrap: str, topic: str, count: int) -> list[tuple[int, int]]:
    return produce_values(
        bootstrap, topic, [f"rec-{i}".encode() for i in range(count)], keys=[f"k{i}".encode() for i in range(count)]
    )


def test_ids_derived_by_spark_match_the_python_port(spark):
    rows = [("orders", 0, 0, 1), ("orders", 7, 123_456_789_012, 3), ("ü-topic", 2, 5, 1)]
    df = spark.createDataFrame(rows, "topic string, partition int, offset long, attempt int")
    salt = -4_242_424_242_424_242
    got = df.select(root_column(salt).alias("root"), edge_column(salt).alias("edge")).collect()
    assert [(r.root, r.edge) for r in got] == [(derive_root(salt, *row), derive_edge(salt, *row)) for row in rows]
    # a stream batch's first attempts: the ids with the attempt as a literal (one input projection)
    first = df.selectExpr(
        f"{id_sql(salt, ROOT_TAG, attempt='1')} AS root", f"{id_sql(salt, EDGE_TAG, attempt='1')} AS edge"
    )
    expected = [(derive_root(salt, t, p, o, 1), derive_edge(salt, t, p, o, 1)) for t, p, o, _ in rows]
    assert [(r.root, r.edge) for r in first.collect()] == expected


def test_commits_only_completed_trees_and_redelivers_downstream_failures(spark, kafka_bootstrap, tmp_path):
    """3000 records; the downstream fails the first attempt of every 25th: the group commit
    reaches the end only when all trees completed, and never passes a record whose output the
    downstream has not handled (sampled throughout the run), with max_pending below a batch."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-commit", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 3000)

    def fails_first(partition: int, offset: int) -> bool:
        return offset % 25 == 7

    samples = []
    with acked_downstream(kafka_bootstrap, flow.topology, flow.output, fail_first=fails_first) as log:
        spout = flow.spout(
            transform=tag_with_source,
            options=SparkOptions(max_offsets_per_trigger=800, commit_interval_ms=300),
            tracking=Tracking(max_pending=300, message_timeout_ms=10_000, backoff=Backoff(initial_ms=200)),
        )
        with started(spout):

            def sample_then_check(job) -> bool:
                committed = committed_offsets(kafka_bootstrap, flow.group, flow.source)
                samples.append((committed, log.snapshot_ok()))  # handled-before-commit, read after it
                return job.caught_up()

            assert spout.run_until(sample_then_check, timeout=240, poll_interval=0.5), spout.progress()
            progress = spout.progress()

    assert lag(kafka_bootstrap, flow.group, flow.source) == 0
    passed_unhandled = [
        (partition, offset)
        for committed, handled in samples
        for partition, point in committed.items()
        for offset in range(max(point, 0))
        if (partition, offset) not in handled
    ]
    assert not passed_unhandled, f"commit passed records the downstream never handled: {passed_unhandled[:5]}"
    assert len(samples) > 3
    failed_first = {(p, o) for p, o in placed if fails_first(p, o)}
    assert set(log.failed) == failed_first
    assert all(max(log.ok[key]) >= 2 for key in failed_first), "failed records were not redelivered"
    assert set(log.ok) == set(placed), "some records never reached the downstream"
    assert progress["tracker"]["redelivered"] >= len(failed_first)
    assert progress["tracker"]["completed"] >= len(placed)
    # whether a micro-batch had to wait for max_pending depends on how fast the downstream
    # completes trees against how fast Spark plans batches: timing, so it is printed, not asserted
    print(f"micro-batches held back by max_pending: {progress['throttled']}")


def test_task_retry_never_completes_a_tree_early(spark, kafka_bootstrap, tmp_path, failpoint):
    """A writing task dies after handing 40 outputs to the sink and Spark retries it. The dead
    attempt's outputs carry the same child edges as the retry's: acking both copies cancels them,
    so those roots must time out, not complete; and
    roots whose outputs the downstream withholds (never acks) must not complete either."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-retry", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 400)
    failpoint.arm()

    def withheld(offset: int, attempt: int) -> bool:
        return attempt == 1 and offset % 10 == 3

    handled = set()

    def handle(tuple_, collector) -> None:
        partition, offset, attempt, _ = source_of(tuple_.value)
        if withheld(offset, attempt):
            return  # neither acked nor failed: its tree may only time out
        handled.add((partition, offset))
        collector.ack(tuple_)

    downstream = downstream_bolt(kafka_bootstrap, flow.topology, flow.output, handle)
    with acker_running(kafka_bootstrap, flow.topology, timeout_ms=6_000), bolt_running(downstream):
        spout = flow.spout(
            transform=tag_with_source,
            tracking=Tracking(message_timeout_ms=6_000, backoff=Backoff(initial_ms=100)),
        )
        with started(spout):
            assert spout.run_until(lambda job: job.caught_up(), timeout=180), spout.progress()

    assert failpoint.fired(), "the failpoint never fired: no task died after writing"
    decided = outcomes(kafka_bootstrap, flow.topology)
    by_root = outputs_by_root(kafka_bootstrap, flow.output)
    dead_attempt_roots = [root for root, outs in by_root.items() if len(outs) != len(set(outs))]
    withheld_roots = [root for root, outs in by_root.items() if any(withheld(o, a) for _, o, a, _ in outs)]
    assert dead_attempt_roots, "no record has outputs from two task attempts"
    assert withheld_roots
    early = [root for root in dead_attempt_roots + withheld_roots if OutcomeKind.COMPLETED in decided.get(root, [])]
    assert not early, f"{len(early)} roots completed although some of their outputs were never acked"
    assert all(OutcomeKind.TIMED_OUT in decided.get(root, []) for root in withheld_roots)
    assert sum(OutcomeKind.COMPLETED in kinds for kinds in decided.values()) >= len(placed) - len(withheld_roots)
    assert handled == set(placed)
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0


def test_record_that_always_fails_is_dead_lettered_and_does_not_stall_the_commit(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-dlq", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 200)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    poison = []
    producer.produce(
        flow.source,
        b"poison",
        key=b"bad-key",
        headers=[("origin", b"test")],
        partition=1,
        on_delivery=lambda err, msg: poison.append((msg.partition(), msg.offset())),
    )
    producer.flush(30)
    del producer
    placed += placed_records(kafka_bootstrap, flow.source, 100)

    def tag_and_fail_poison(df):
        return tag_with_source(df).withColumn("rk_fail", F.split("value", r"\|").getItem(0) == "poison")

    # a timeout that holds under load: no good record may time out three times (dead-lettered),
    # and the poison's trees must fail, not time out, however slow a batch is
    with acked_downstream(kafka_bootstrap, flow.topology, flow.output, timeout_ms=60_000) as log:
        spout = flow.spout(
            transform=tag_and_fail_poison,
            tracking=Tracking(max_retries=2, message_timeout_ms=60_000, backoff=Backoff(initial_ms=100)),
        )
        with started(spout):
            assert spout.run_until(timeout=180), spout.progress()  # until idle: nothing in flight
            assert spout.caught_up()
            progress = spout.progress()

    dead = read_topic(kafka_bootstrap, TopologyTopics(flow.topology).dlq)
    assert len(dead) == 1
    record = dead[0]
    headers = dict(record.headers())
    parked = codec.decode_parked(headers[codec.PARKED_HEADER])
    assert (record.key(), record.value(), headers["origin"]) == (b"bad-key", b"poison", b"test")
    assert (parked.source_topic, parked.source_partition, parked.source_offset) == (flow.source, *poison[0])
    assert parked.attempts == 3 and parked.reason == "FAILED"
    assert progress["dead_lettered"] == 1
    assert set(log.ok) == set(placed), "every other record reached the downstream"
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0


def test_restart_processes_again_what_spark_will_not_reread_minus_what_is_done(spark, kafka_bootstrap, tmp_path):
    """Run 1 (AvailableNow) reads everything into Spark's checkpoint, but the downstream acks only
    even offsets: the group commit stops at offset 1 with the evens above it in its metadata. Run
    2 on the same checkpoint gets no batch from Spark; it must process exactly the odd offsets."""
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-restart", tmp_path, partitions=1)
    placed = placed_records(kafka_bootstrap, flow.source, 300)
    evens = [offset for _, offset in placed if offset % 2 == 0]
    odds = [offset for _, offset in placed if offset % 2 == 1]

    def ack_evens(tuple_, collector) -> None:
        _, offset, _, _ = source_of(tuple_.value)
        if offset % 2 == 0:
            collector.ack(tuple_)

    def new_run():  # both runs: the same checkpoint, AvailableNow
        return flow.spout(
            transform=tag_with_source,
            options=SparkOptions(available_now=True),
            tracking=Tracking(message_timeout_ms=60_000),
        )

    with acker_running(kafka_bootstrap, flow.topology, timeout_ms=60_000):
        with (
            bolt_running(downstream_bolt(kafka_bootstrap, flow.topology, flow.output, ack_evens)),
            started(new_run()) as first,
        ):
            assert first.run_until(
                lambda job: job.tracker.stats.completed == len(evens) and not job.query.isActive, timeout=120
            ), first.progress()
        assert first.committed_offsets() == {(flow.source, 0): 1}
        with acking_downstream(kafka_bootstrap, flow.topology, flow.output) as log, started(new_run()) as second:
            assert second.run_until(lambda job: job.caught_up(), timeout=120), second.progress()
            progress = second.progress()

    assert progress["recovered"] == len(odds)
    assert progress["batches"] == 0, "Spark re-read records although its checkpoint was committed"
    assert set(log.ok) == {(0, offset) for offset in odds}
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0


def fail_first_attempt_of_rec_13(df):
    """Fails the whole write job of the batch that holds ``rec-13`` on its first attempt."""
    poisoned = (F.col("attempt") == 1) & (F.col("value").cast("string") == "rec-13")
    value = F.when(poisoned, F.raise_error(F.lit("transform fails on purpose"))).otherwise(F.col("value"))
    return tag_with_source(df.withColumn("value", value))


def test_failed_batch_fails_its_roots_and_the_stream_goes_on(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-batchfail", tmp_path)
    placed = placed_records(kafka_bootstrap, flow.source, 300)
    with acked_downstream(kafka_bootstrap, flow.topology, flow.output) as log:
        spout = flow.spout(
            transform=fail_first_attempt_of_rec_13,
            options=SparkOptions(max_offsets_per_trigger=100),
            tracking=Tracking(message_timeout_ms=10_000, backoff=Backoff(initial_ms=100)),
        )
        with started(spout):
            assert spout.run_until(lambda job: job.caught_up(), timeout=180), spout.progress()
            progress = spout.progress()

    rec_13 = placed[13]
    assert progress["failed_batches"] == 1
    # its redelivery may itself time out under load and be redelivered again (at-least-once)
    assert log.ok[rec_13] and min(log.ok[rec_13]) >= 2, "rec-13 was written only by its redeliveries"
    assert set(log.ok) == set(placed)
    assert lag(kafka_bootstrap, flow.group, flow.source) == 0


def test_failed_batch_stops_the_query_when_told_to(spark, kafka_bootstrap, tmp_path):
    flow = spark_topology(spark, kafka_bootstrap, "rk-spark-batchstop", tmp_path)
    placed_records(kafka_bootstrap, flow.source, 50)
    with acker_running(kafka_bootstrap, flow.topology):
        spout = flow.spout(
            transform=fail_first_attempt_of_rec_13,
            options=SparkOptions(on_batch_error="stop"),
            tracking=Tracking(message_timeout_ms=10_000),
        )
        with started(spout), pytest.raises(Exception, match="transform fails on purpose"):
            spout.run_until(lambda job: False, timeout=120)
    assert all(offset <= 0 for offset in committed_offsets(kafka_bootstrap, flow.group, flow.source).values()), (
        "the commit moved past records of the failed batch"
    )
