"""The JVM output path (reliable_kafka.spark.writer.write_in_jvm) as SparkBolt and any writer use
it: outputs through Spark's own Kafka sink with the children's XOR folded into the inputs' final
acks, rows failed with ``rk_fail`` found in the same write, a user's session left alone, and no
``Observation`` left registered by a failed write. Real broker, Spark in local mode, no acker: the
tests read the ack topic itself."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F
from spark_helpers import started, topology_bolt, wait_for

from reliable_kafka import codec
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.ops.failures import decode_failure
from reliable_kafka.spark import SparkBolt, SparkOptions, merge_anchors, spark_session
from reliable_kafka.spark.writer import V1_SOURCES, write_in_jvm
from reliable_kafka.testing.records import read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-jvm-write")
    yield session
    session.stop()


def ack_entries(bootstrap: str, topology: str, sender: int) -> dict[int, list[tuple[EventKind, int]]]:
    """root -> the (kind, val) entries ``sender`` sent, in the ack topic's order (one partition)."""
    entries: dict[int, list[tuple[EventKind, int]]] = defaultdict(list)
    for message in read_topic(bootstrap, TopologyTopics(topology).acks):
        batch = codec.decode_ack_batch(message.value())
        if batch.sender == sender:
            for kind, root, val in zip(batch.kinds.tolist(), batch.roots.tolist(), batch.vals.tolist()):
                entries[root].append((EventKind(kind), val))
    return entries


def bolt_topology(bootstrap: str, prefix: str, records: list[tuple[bytes, dict[int, int] | None]]) -> str:
    """A new topology (one acker partition) whose one-partition ``<topology>.in`` holds ``records``
    (value, anchors; None: untracked), and its empty ``<topology>.out``."""
    topology = unique_name(prefix)
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=1))
    create_topics(bootstrap, {f"{topology}.in": 1, f"{topology}.out": 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    for value, anchors in records:
        headers = [(codec.ANCHORS_HEADER, codec.encode_anchors(anchors))] if anchors else None
        producer.produce(f"{topology}.in", value, headers=headers)
    assert producer.flush(30) == 0
    return topology


def available_now_bolt(spark, bootstrap: str, topology: str, checkpoint, transform) -> SparkBolt:
    """A SparkBolt from ``<topology>.in`` to ``<topology>.out`` that reads what is there (AvailableNow)."""
    return topology_bolt(
        spark,
        bootstrap,
        topology,
        source=f"{topology}.in",
        output=f"{topology}.out",
        group_id=f"{topology}.bolt",
        checkpoint=checkpoint,
        transform=transform,
        options=SparkOptions(available_now=True),
    )


def test_a_spark_bolt_writes_in_the_jvm_and_folds_its_children_into_the_final_acks(spark, kafka_bootstrap, tmp_path):
    """One input per tree: the output's child edge comes back in the input's single ACK
    (edge ^ child), sent by the driver; a row failed with ``rk_fail`` writes its reason and FAILs
    its root before that root's final ack; an untracked input's output carries no anchors."""
    (fine_root, fine_edge), (broken_root, broken_edge) = (new_id(), new_id()), (new_id(), new_id())
    records = [(b"fine", {fine_root: fine_edge}), (b"broken", {broken_root: broken_edge}), (b"plain", None)]
    topology = bolt_topology(kafka_bootstrap, "rk-spark-bolt-jvm", records)

    def upper(df):
        return df.select(
            F.upper(F.col("value").cast("string")).alias("value"),
            "anchors",
            (F.col("value").cast("string") == "broken").alias("rk_fail"),
            F.lit("no such customer").alias("rk_fail_reason"),
        )

    with started(available_now_bolt(spark, kafka_bootstrap, topology, tmp_path / "ckpt", upper)) as bolt:
        assert bolt.run_until(timeout=180), "the bolt did not finish its AvailableNow batch"
    assert (bolt.stats.outputs, bolt.stats.failed_rows, bolt.failed) == (2, 1, 0)

    written = {m.value(): dict(m.headers() or []) for m in read_topic(kafka_bootstrap, f"{topology}.out")}
    assert set(written) == {b"FINE", b"PLAIN"}
    assert codec.ANCHORS_HEADER not in written[b"PLAIN"]
    [(root, child)] = codec.decode_anchors(written[b"FINE"][codec.ANCHORS_HEADER]).items()
    assert root == fine_root and child not in (0, fine_edge)

    entries = ack_entries(kafka_bootstrap, topology, bolt.task_id)
    # the old Python writer sent the child's ACK from its task and the input's edge apart
    assert entries[fine_root] == [(EventKind.ACK, fine_edge ^ child)]
    assert entries[broken_root] == [(EventKind.FAIL, 0), (EventKind.ACK, broken_edge)]  # FAIL first
    [failure] = [decode_failure(m.value()) for m in read_topic(kafka_bootstrap, TopologyTopics(topology).failures)]
    assert failure is not None
    assert (failure.roots, failure.component, failure.task_id, failure.reason, failure.retry) == (
        [broken_root],
        bolt.name,
        bolt.task_id,
        "no such customer",
        True,
    )


def test_a_spark_bolt_batch_whose_transform_fails_fails_its_roots(spark, kafka_bootstrap, tmp_path):
    root, edge = new_id(), new_id()
    topology = bolt_topology(kafka_bootstrap, "rk-spark-bolt-fails", [(b"x", {root: edge})])

    def broken(df):
        raise ValueError("the transform fails")

    with started(available_now_bolt(spark, kafka_bootstrap, topology, tmp_path / "ckpt", broken)) as bolt:
        assert bolt.run_until(timeout=180), "the bolt did not finish its AvailableNow batch"
        wait_for(lambda: root in ack_entries(kafka_bootstrap, topology, bolt.task_id), timeout=60, what="the FAIL")
    assert (bolt.failed, bolt.acked, bolt.stats.failed_batches) == (1, 0, 1)
    assert ack_entries(kafka_bootstrap, topology, bolt.task_id)[root] == [(EventKind.FAIL, 0)]
    assert read_topic(kafka_bootstrap, f"{topology}.out") == []


def anchored_rows(spark, count: int):
    return spark.createDataFrame(
        [(f"v{i}", [(new_id(), new_id())]) for i in range(count)],
        "value string, anchors array<struct<root:long,edge:long>>",
    )


def test_outputs_without_anchors_are_written_untracked(spark, kafka_bootstrap):
    """An empty anchors array (an aggregation of untracked inputs) or none at all: written without
    ``rk-anchors`` beside a tracked row, not a failed batch (Spark's ANSI mode once failed it)."""
    topic = unique_name("rk-jvm-untracked")
    create_topics(kafka_bootstrap, {topic: 1})
    root, edge = new_id(), new_id()
    inputs = spark.createDataFrame(
        [("empty", []), ("none", None), ("tracked", [(root, edge)])],
        "value string, anchors array<struct<root:long,edge:long>>",
    )
    # an aggregation, as a bolt's word count: its result projection is where Spark hoisted anchors[0]
    rows = inputs.groupBy("value").agg(merge_anchors().alias("anchors"))
    written, roots, xors = write_in_jvm(
        rows, salt=new_id(), bootstrap_servers=kafka_bootstrap, topic=topic, options={}, metrics_timeout=60.0
    )
    assert written == 3 and roots.tolist() == [root]
    headers = {m.value(): dict(m.headers() or []) for m in read_topic(kafka_bootstrap, topic)}
    assert codec.ANCHORS_HEADER not in headers[b"empty"] and codec.ANCHORS_HEADER not in headers[b"none"]
    assert codec.decode_anchors(headers[b"tracked"][codec.ANCHORS_HEADER]) == {root: xors[0]}


def test_a_write_leaves_the_users_session_conf_alone(spark, kafka_bootstrap, monkeypatch):
    """The Kafka sink's V2 write is planned in a session of its own: a user's thread writing to
    Kafka at that moment keeps its V1 path, and two writers never race on the setting."""
    from pyspark.sql.readwriter import DataFrameWriter

    topic = unique_name("rk-jvm-write")
    create_topics(kafka_bootstrap, {topic: 1})
    before = spark.conf.get(V1_SOURCES)
    assert "kafka" in before
    seen: list[tuple[str, str]] = []  # (the user's setting, the writing session's) as save() starts
    save = DataFrameWriter.save

    def watched(self, *args, **kwargs):
        seen.append((spark.conf.get(V1_SOURCES), self._spark.conf.get(V1_SOURCES)))
        return save(self, *args, **kwargs)

    monkeypatch.setattr(DataFrameWriter, "save", watched)
    options = {"bootstrap_servers": kafka_bootstrap, "topic": topic, "options": {}, "metrics_timeout": 60.0}
    written, roots, _ = write_in_jvm(anchored_rows(spark, 5), salt=new_id(), **options)
    assert written == 5 and len(roots) == 5
    assert seen == [(before, before.replace("kafka,", ""))]

    errors: list[BaseException] = []

    def writes() -> None:
        try:
            for _ in range(3):
                assert write_in_jvm(anchored_rows(spark, 3), salt=new_id(), **options)[0] == 3
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writes) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    assert all(user == before for user, _ in seen) and spark.conf.get(V1_SOURCES) == before
    assert len(read_topic(kafka_bootstrap, topic)) == 5 + 2 * 3 * 3


def registered_observations(session) -> int:
    """Observations the session's ObservationManager still waits on (a private map, read by reflection)."""
    manager = session._jsparkSession.observationManager()
    field = manager.getClass().getDeclaredField("observations")
    field.setAccessible(True)
    return field.get(manager).size()


def test_failed_writes_leave_no_observation_registered(spark, kafka_bootstrap):
    """A write that fails before its query runs (here: an option the Kafka sink refuses while
    planning) must not leave its Observation waiting in the session for good."""
    session = spark.newSession()  # kafka off the V1 list already: the write runs in this session
    session.conf.set(V1_SOURCES, "parquet")
    topic = unique_name("rk-jvm-write-fails")
    create_topics(kafka_bootstrap, {topic: 1})
    baseline = registered_observations(session)
    listeners = len(session._jsparkSession.listenerManager().listListeners())
    for _ in range(5):
        with pytest.raises(Exception, match="includeHeaders|Boolean|boolean"):
            write_in_jvm(
                anchored_rows(session, 2),
                salt=new_id(),
                bootstrap_servers=kafka_bootstrap,
                topic=topic,
                options={"includeHeaders": "not-a-boolean"},
                metrics_timeout=30.0,
            )
    # Spark's listener bus removes an ended query's observations asynchronously
    wait_for(
        lambda: registered_observations(session) <= baseline,
        timeout=60,
        what=f"failed writes' observations to be released ({registered_observations(session)} left)",
    )
    assert len(session._jsparkSession.listenerManager().listListeners()) == listeners
    assert read_topic(kafka_bootstrap, topic) == []
