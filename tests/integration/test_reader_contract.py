"""The acker worker reads ack records as the wire contract says (docs/design.md, "Wire formats"):
record keys are not read, an empty batch is a valid record, trailing bytes make a record bad."""

from __future__ import annotations

from confluent_kafka import Producer

from reliable_kafka import AckerWorker, LocalCluster, Loop, codec
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets
from reliable_kafka.testing.records import read_topic
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics


def test_keys_are_not_read_empty_batches_are_valid_and_trailing_bytes_are_bad(kafka_bootstrap):
    topics = TopologyTopics(unique_name("contract"), ackers=1)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    spout, root, edge, trailing_root = new_id(), new_id(), new_id(), new_id()
    init = codec.encode_ack_batch(spout, [EventKind.INIT], [root], [edge])
    ack = codec.encode_ack_batch(new_id(), [EventKind.ACK], [root], [edge])
    empty = codec.encode_ack_batch(new_id(), [], [], [])
    trailing = codec.encode_ack_batch(spout, [EventKind.INIT], [trailing_root], [edge]) + b"\x00"
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for key, value in [(b"\xff not a key anyone reads", init), (None, empty), (b"", trailing), (b"another key", ack)]:
        producer.produce(topics.acks, value, key=key, partition=0)
    assert producer.flush(30) == 0
    worker = AckerWorker(topology=topics.topology, connection=kafka_bootstrap, loop=Loop(commit_interval_ms=100))
    with LocalCluster(worker) as cluster:
        cluster.wait_until(
            lambda: worker.stats.records == 4 and worker.stats.completed == 1,
            timeout=60,
            what="acker read the four records",
            progress=lambda: str(worker.stats),
        )
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, worker.group_id, topics.acks) == {0: 4},
            timeout=30,
            what="acker committed past all four records",
        )
    decided = {}
    for message in read_topic(kafka_bootstrap, topics.outcomes):
        batch = codec.decode_outcomes(message.value())
        decided.update(zip(batch.roots.tolist(), batch.kinds.tolist()))
    assert decided == {root: OutcomeKind.COMPLETED}  # keys ignored; the empty batch changed nothing
    parked = [
        (m.value(), codec.decode_parked(dict(m.headers())[codec.PARKED_HEADER]))
        for m in read_topic(kafka_bootstrap, topics.quarantine)
    ]
    assert [value for value, _ in parked] == [trailing]  # the empty batch was not quarantined
    assert "1 trailing bytes" in parked[0][1].reason and parked[0][1].source_offset == 2
    assert worker.stats.quarantined == 1 and worker.stats.invalid_entries == 0
