"""Bad input is never fatal: counted, logged with coordinates, copied to quarantine; good data flows."""

from __future__ import annotations

import numpy as np
from confluent_kafka import Producer

from reliable_kafka import AckerWorker, Bolt, LocalCluster, Loop, Spout, Tracking, codec
from reliable_kafka.core.ids import new_id, partition_for_root
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.ack_sender import MAX_ENTRIES_PER_RECORD
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, lag
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics


def _send(bootstrap: str, topic: str, values: list[tuple[int, bytes]], headers=None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, value in values:
        producer.produce(topic, value, partition=partition, headers=headers)
    assert producer.flush(30) == 0


def _outcomes(bootstrap: str, topics: TopologyTopics) -> dict[int, int]:
    decided = {}
    for message in read_topic(bootstrap, topics.outcomes):
        batch = codec.decode_outcomes(message.value())
        decided.update(zip(batch.roots.tolist(), batch.kinds.tolist()))
    return decided


def _parked(bootstrap: str, topic: str) -> list[tuple[bytes, codec.ParkedRecord]]:
    return [
        (m.value(), codec.decode_parked(dict(m.headers())[codec.PARKED_HEADER])) for m in read_topic(bootstrap, topic)
    ]


def test_acker_quarantines_every_kind_of_bad_ack_record_and_keeps_folding(kafka_bootstrap):
    topics = TopologyTopics(unique_name("bad-acks"), ackers=1)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    spout, root, edge = new_id(), new_id(), new_id()
    good_init = codec.encode_ack_batch(spout, [EventKind.INIT], [root], [edge])
    garbage = b"\x01this is not avro at all"
    wrong_version = b"\x09" + good_init[1:]
    mixed = codec.encode_ack_batch(7, [EventKind.ACK, 9, EventKind.ACK], [0, root, root], [5, 5, edge])
    # the smallest limit allowed is what senders pack into one record: one entry over it
    n = MAX_ENTRIES_PER_RECORD + 1
    oversized = codec.encode_ack_batch(7, np.ones(n, np.uint8), np.arange(1, n + 1), np.zeros(n, np.int64))
    _send(kafka_bootstrap, topics.acks, [(0, good_init), (0, garbage), (0, wrong_version), (0, oversized), (0, mixed)])
    worker = AckerWorker(
        topology=topics.topology,
        connection=kafka_bootstrap,
        loop=Loop(commit_interval_ms=100),
        max_entries_per_record=MAX_ENTRIES_PER_RECORD,
    )
    with LocalCluster(worker) as cluster:
        cluster.wait_until(
            lambda: worker.stats.records == 5 and worker.stats.completed == 1,
            timeout=60,
            what="acker folded around the bad records",
            progress=lambda: str(worker.stats),
        )
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, worker.group_id, topics.acks) == {0: 5},
            timeout=30,
            what="acker committed past the bad records",
        )
    assert _outcomes(kafka_bootstrap, topics) == {root: OutcomeKind.COMPLETED}
    parked = _parked(kafka_bootstrap, topics.quarantine)
    assert [value for value, _ in parked] == [garbage, wrong_version, oversized, mixed]
    reasons = [p.reason for _, p in parked]
    assert "ack_batch" in reasons[0] and f"{topics.acks}[0]@1" in reasons[0]
    assert "unknown format version 9" in reasons[1]
    assert "max_entries_per_record" in reasons[2]
    assert "2 of 3 entries invalid" in reasons[3]
    assert [(p.source_topic, p.source_partition, p.source_offset) for _, p in parked] == [
        (topics.acks, 0, 1),
        (topics.acks, 0, 2),
        (topics.acks, 0, 3),
        (topics.acks, 0, 4),
    ]
    assert worker.stats.quarantined == 4 and worker.stats.invalid_entries == 2


def test_bolt_quarantines_records_whose_anchors_header_is_invalid(kafka_bootstrap):
    topology = unique_name("bad-anchors")
    source = f"{topology}-in"
    create_topics(kafka_bootstrap, {source: 1})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology))
    _send(kafka_bootstrap, source, [(0, b"bad")], headers=[(codec.ANCHORS_HEADER, b"\x01\x99")])
    _send(
        kafka_bootstrap, source, [(0, b"zero-root")], headers=[(codec.ANCHORS_HEADER, codec.encode_anchors([(0, 1)]))]
    )
    _send(kafka_bootstrap, source, [(0, b"untracked")])
    _send(kafka_bootstrap, source, [(0, b"tracked")], headers=[(codec.ANCHORS_HEADER, codec.encode_anchors({5: 6}))])
    seen = []
    bolt = Bolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=source,
        group_id=f"{topology}-bolt",
        handler=lambda t, c: (seen.append((t.value, t.tracked)), c.ack(t)),
    )
    with LocalCluster(bolt) as cluster:
        cluster.wait_until(lambda: len(seen) == 2, timeout=60, what="the good records reached the handler")
    assert seen == [(b"untracked", False), (b"tracked", True)]
    parked = _parked(kafka_bootstrap, TopologyTopics(topology).quarantine)
    assert [value for value, _ in parked] == [b"bad", b"zero-root"]
    assert parked[1][1].source_offset == 1 and "root id 0" in parked[1][1].reason
    assert bolt.stats.quarantined == 2


def test_spout_ignores_outcomes_for_unknown_roots_and_quarantines_undecodable_ones(kafka_bootstrap):
    topology = unique_name("bad-outcomes")
    source, out = f"{topology}-src", f"{topology}-out"
    create_topics(kafka_bootstrap, {source: 1, out: 1})
    topics = TopologyTopics(topology)
    spout = Spout(
        topology=topology, connection=kafka_bootstrap, source_topics=source, group_id=f"{topology}-spout", emit_to=out
    )
    acker = AckerWorker(topology=topology, connection=kafka_bootstrap)
    sink = Bolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=out,
        group_id=f"{topology}-sink",
        handler=lambda t, c: c.ack(t),
    )
    with LocalCluster(acker, spout, sink) as cluster:
        # outcomes nobody asked for: an unknown root of this spout, and bytes that do not decode
        partition = partition_for_root(spout.task_id, 1)
        _send(
            kafka_bootstrap,
            topics.outcomes,
            [
                (partition, codec.encode_outcomes(spout.task_id, [new_id()], [OutcomeKind.FAILED])),
                (partition, b"\x01\xff\xff"),
            ],
        )
        produce_values(kafka_bootstrap, source, [b"one", b"two"])
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, f"{topology}-spout", source) == 0,
            timeout=60,
            what="the spout completed its records despite bad outcomes",
        )
        cluster.wait_until(
            lambda: spout.tracker.stats.ignored_outcomes >= 1, timeout=10, what="the unknown root was ignored"
        )
    assert spout.stats.completed == 2 and spout.stats.replayed == 0
    parked = _parked(kafka_bootstrap, topics.quarantine)
    assert [value for value, _ in parked] == [b"\x01\xff\xff"]


def test_spout_ignores_commit_metadata_that_is_not_its_own(kafka_bootstrap):
    from confluent_kafka import Consumer, TopicPartition

    topology = unique_name("foreign-meta")
    source, out = f"{topology}-src", f"{topology}-out"
    create_topics(kafka_bootstrap, {source: 1, out: 1})
    produce_values(kafka_bootstrap, source, [b"a", b"b", b"c"])
    group = f"{topology}-spout"
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(source, 0, 1, "some other tool's metadata")], asynchronous=False)
    committer.close()
    acker = AckerWorker(topology=topology, connection=kafka_bootstrap)
    spout = Spout(topology=topology, connection=kafka_bootstrap, source_topics=source, group_id=group, emit_to=out)
    sink = Bolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=out,
        group_id=f"{topology}-sink",
        handler=lambda t, c: c.ack(t),
    )
    with LocalCluster(acker, spout, sink) as cluster:
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, source) == {0: 3},
            timeout=60,
            what="the spout resumed from offset 1 and completed",
        )
    assert [m.value() for m in read_topic(kafka_bootstrap, out)] == [b"b", b"c"]


def _trees(spout: int, count: int) -> tuple[list[int], bytes, bytes]:
    """``count`` one-edge trees: the roots, an INIT record and the record that acks them all."""
    roots = [new_id() for _ in range(count)]
    edges = [new_id() for _ in range(count)]
    init = codec.encode_ack_batch(spout, [EventKind.INIT] * count, roots, edges)
    ack = codec.encode_ack_batch(new_id(), [EventKind.ACK] * count, roots, edges)
    return roots, init, ack


def test_acker_parks_a_reference_to_records_too_large_to_copy_and_every_good_tree_completes(kafka_bootstrap):
    # Both records fit the broker compressed but not the acker's producer uncompressed (1 MB).
    topics = TopologyTopics(unique_name("unparkable"), ackers=1)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    spout = new_id()
    before, init_before, ack_before = _trees(spout, 200)
    after, init_after, ack_after = _trees(spout, 200)
    does_not_decode = codec.encode_ack_batch(7, [], [], []) + bytes(1_500_000)  # trailing bytes
    entries = 150_000  # valid, but over max_entries_per_record (100,000)
    too_many = codec.encode_ack_batch(
        7, np.full(entries, EventKind.ACK, np.uint8), np.arange(1, entries + 1), np.zeros(entries, np.int64)
    )
    _send(kafka_bootstrap, topics.acks, [(0, init_before), (0, ack_before)])
    big = Producer({"bootstrap.servers": kafka_bootstrap, "compression.type": "gzip", "message.max.bytes": 10_000_000})
    for value in (does_not_decode, too_many):
        big.produce(topics.acks, value, partition=0)
    assert big.flush(30) == 0
    _send(kafka_bootstrap, topics.acks, [(0, init_after), (0, ack_after)])
    worker = AckerWorker(topology=topics.topology, connection=kafka_bootstrap, loop=Loop(commit_interval_ms=100))
    with LocalCluster(worker) as cluster:
        cluster.wait_until(
            lambda: worker.stats.completed == 400,
            timeout=120,
            what="every good tree completed",
            progress=lambda: str(worker.stats),
        )
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, worker.group_id, topics.acks) == {0: 6},
            timeout=30,
            what="acker committed past the parked records",
        )
        cluster.check()  # still running
    assert _outcomes(kafka_bootstrap, topics) == {root: OutcomeKind.COMPLETED for root in before + after}
    assert worker.stats.quarantined == 2
    parked = list(read_topic(kafka_bootstrap, topics.quarantine))
    assert len(parked) == 2
    for message, offset, size in zip(parked, (2, 3), (len(does_not_decode), len(too_many))):
        header = codec.decode_parked(dict(message.headers())[codec.PARKED_HEADER])
        assert message.value() is None and message.key() is None
        assert header.value_omitted and header.original_bytes == size
        assert (header.source_topic, header.source_partition, header.source_offset) == (topics.acks, 0, offset)
        assert "value omitted" in header.reason and f"{topics.acks}[0]@{offset}" in header.reason
    assert "max_entries_per_record" in codec.decode_parked(dict(parked[1].headers())[codec.PARKED_HEADER]).reason


def test_acker_quarantines_entries_whose_root_belongs_to_another_partition_and_folds_the_rest(kafka_bootstrap):
    topics = TopologyTopics(unique_name("wrong-partition"), ackers=3)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    spout = new_id()
    ours = [r for r in (new_id() for _ in range(200)) if partition_for_root(r, 3) == 0][:2]
    elsewhere = [r for r in (new_id() for _ in range(200)) if partition_for_root(r, 3) == 1][:2]
    ours.append(-1)  # unsigned 2**64 - 1 is in partition 0 (signed, -1 mod 3 would be 2)
    roots = ours + elsewhere
    edges = [new_id() for _ in roots]
    record = codec.encode_ack_batch(
        spout, [EventKind.INIT] * len(roots) + [EventKind.ACK] * len(roots), roots + roots, edges + edges
    )
    _send(kafka_bootstrap, topics.acks, [(0, record)])
    worker = AckerWorker(topology=topics.topology, connection=kafka_bootstrap, tracking=Tracking(ackers=3))
    with LocalCluster(worker) as cluster:
        cluster.wait_until(
            lambda: worker.stats.completed == len(ours),
            timeout=60,
            what="the valid trees completed",
            progress=lambda: str(worker.stats),
        )
        cluster.wait_until(
            lambda: len(list(read_topic(kafka_bootstrap, topics.quarantine))) == 1,
            timeout=30,
            what="the record was quarantined",
        )
    assert _outcomes(kafka_bootstrap, topics) == {root: OutcomeKind.COMPLETED for root in ours}
    assert worker.stats.invalid_entries == 2 * len(elsewhere) and worker.stats.quarantined == 1
    [(value, parked)] = _parked(kafka_bootstrap, topics.quarantine)
    assert value == record and parked.source_offset == 0
    assert "4 of 10 entries invalid" in parked.reason and "another of the 3 ack partitions" in parked.reason


def test_acker_counts_roots_that_expire_without_their_init(kafka_bootstrap):
    topics = TopologyTopics(unique_name("ownerless"), ackers=1)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    orphans = [new_id() for _ in range(3)]
    _send(
        kafka_bootstrap,
        topics.acks,
        [(0, codec.encode_ack_batch(new_id(), [EventKind.ACK] * 3, orphans, [new_id() for _ in orphans]))],
    )
    worker = AckerWorker(
        topology=topics.topology, connection=kafka_bootstrap, tracking=Tracking(message_timeout_ms=1000)
    )
    with LocalCluster(worker) as cluster:
        cluster.wait_until(
            lambda: worker.stats.expired_ownerless == 3,
            timeout=60,
            what="the INIT-less roots expired and were counted",
            progress=lambda: str(worker.stats),
        )
    assert worker.stats.timed_out == 0 and worker.stats.pending == 0


def test_park_writes_a_reference_when_the_producer_or_the_broker_refuses_the_copy(kafka_bootstrap):
    from reliable_kafka.kafka.clients import new_producer
    from reliable_kafka.kafka.parking import park

    loose, strict = unique_name("park-loose"), unique_name("park-strict")
    create_topics(kafka_bootstrap, {loose: 1})
    create_topics(kafka_bootstrap, {strict: 1}, config={"max.message.bytes": "20000"})
    producer = new_producer(kafka_bootstrap)
    delivered = []
    cases = [
        (loose, bytes(1_500_000)),  # over the producer's message.max.bytes: produce refuses it
        (strict, bytes(50_000)),  # over the topic's max.message.bytes: the broker refuses it
        (strict, b"small"),
    ]  # copied as it is
    for offset, (topic, value) in enumerate(cases):
        park(
            producer,
            topic,
            key=b"k",
            value=value,
            headers=[("h", b"v")],
            parked=codec.ParkedRecord(
                reason="test", attempts=3, source_topic="src", source_partition=0, source_offset=offset
            ),
            on_delivery=lambda error, message: delivered.append(error),
        )
        assert producer.flush(30) == 0  # one batch each: the broker refuses a whole batch as too large
    assert delivered == [None, None, None]
    parked = [
        (m, codec.decode_parked(dict(m.headers())[codec.PARKED_HEADER]))
        for topic in (loose, strict)
        for m in read_topic(kafka_bootstrap, topic)
    ]
    parked.sort(key=lambda pair: pair[1].source_offset)  # a reference follows the copies queued after it
    assert [(m.value(), p.value_omitted, p.original_bytes, p.source_offset) for m, p in parked] == [
        (None, True, 1_500_000 + 3, 0),
        (None, True, 50_000 + 3, 1),
        (b"small", False, 5 + 3, 2),
    ]
    assert "value omitted" in parked[0][1].reason and "src[0]@0" in parked[0][1].reason
    assert parked[2][0].key() == b"k" and dict(parked[2][0].headers())["h"] == b"v"
