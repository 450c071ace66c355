"""Reading in-flight records again by offset on a real broker, where librdkafka hides transaction
markers and aborted records: what such an offset holds is told by the consumer's position."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from reliable_kafka import AckerWorker, LocalCluster, Loop, Spout, Tracking
from reliable_kafka.client_log import with_log
from reliable_kafka.core.spout_state import encode_spout_state
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.ops import dlq
from reliable_kafka.spout.reread import NOT_A_RECORD, SourceRereader
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics


def _transaction(bootstrap: str, topic: str, values: list[bytes], *, commit: bool = True) -> None:
    """``values`` written to partition 0 in one transaction, then its commit (or abort) marker."""
    producer = Producer(with_log({"bootstrap.servers": bootstrap, "transactional.id": unique_name("writer")}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def _rereader(bootstrap: str, records: dict, gone: list) -> SourceRereader:
    return SourceRereader(
        component="spout-1",
        bootstrap_servers=bootstrap,
        group_id=unique_name("refetch"),
        kafka_config={},
        records=records,
        to_record=lambda message: message.value(),
        gone=lambda key, offset, why: gone.append((offset, why)),
    )


def test_markers_and_aborted_records_at_the_end_of_the_log_are_no_records(kafka_bootstrap):
    """A committed transaction (0-2, its marker at 3), then an aborted one (4-5, its marker at 6),
    nothing after: before, a re-read of the last data record with the marker after it waited for a
    record past the marker and raised RereadFailed after 20 s."""
    topic = unique_name("reread-marker")
    create_topics(kafka_bootstrap, {topic: 1})
    _transaction(kafka_bootstrap, topic, [b"r0", b"r1", b"r2"])
    key = (topic, 0)
    records: dict = {}
    gone: list = []
    reread = _rereader(kafka_bootstrap, records, gone)
    reread([(key, 2), (key, 3)])  # the last data record and the commit marker, the end of the log
    assert records == {(key, 2): b"r2"} and gone == [(3, NOT_A_RECORD)]
    _transaction(kafka_bootstrap, topic, [b"x4", b"x5"], commit=False)
    assert end_offsets(kafka_bootstrap, topic) == {0: 7}
    reread([(key, 4), (key, 5), (key, 6)])  # aborted records and the abort marker, the end of the log
    assert gone[1:] == [(4, NOT_A_RECORD), (5, NOT_A_RECORD), (6, NOT_A_RECORD)]
    reread([(key, 0), (key, 1)])  # below where the earlier reads stopped: read, not taken for passed
    assert records == {(key, 0): b"r0", (key, 1): b"r1", (key, 2): b"r2"} and len(gone) == 4


def test_a_transactional_spout_dead_letters_around_a_marker_at_the_end_and_commits_past_it(kafka_bootstrap):
    """The source was written by a transactional producer (0-4, the commit marker at 5, nothing
    after). A predecessor left 0-5 failed at their last attempt: 0-4 are dead-lettered as copies,
    the marker is done (neither a dead letter nor a record lost to retention) and the commit
    passes it. Before, every round failed to read the marker again and aborted."""
    topology = unique_name("reread-spout")
    source, group = f"{topology}-source", f"{topology}-spout"
    create_topics(kafka_bootstrap, {source: 1, f"{topology}-stage": 1})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=1))
    _transaction(kafka_bootstrap, source, [str(i).encode() for i in range(5)])
    assert end_offsets(kafka_bootstrap, source) == {0: 6}
    metadata, _ = encode_spout_state(
        0, [], emitted_upto=6, outcome_position=0, attempts=dict.fromkeys(range(6), 6), failed=range(6)
    )
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(source, 0, 0, metadata)], asynchronous=False)
    committer.close()
    on = {"topology": topology, "connection": kafka_bootstrap}
    acker = AckerWorker(**on, tracking=Tracking(ackers=1), name="acker")
    spout = Spout(
        **on,
        name="spout",
        source_topics=source,
        group_id=group,
        emit_to=f"{topology}-stage",
        transactional=True,
        tracking=Tracking(max_retries=5, backoff=Backoff(initial_ms=20, max_ms=200)),
        loop=Loop(commit_interval_ms=100),
    )
    with LocalCluster(acker, spout) as cluster:
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, source).get(0) == 6,
            timeout=120,
            what="the dead letters written and the commit past the marker",
            progress=lambda: str(spout.stats),
        )
    letters = dlq.read_dead_letters(kafka_bootstrap, topology)
    assert [(d.source, d.value) for d in letters] == [((source, 0, o), str(o).encode()) for o in range(5)]
    assert spout.stats.dead_lettered == 5 and spout.stats.expired_in_flight == 0
