"""What the library relies on from Kafka, as checks that run against any :class:`KafkaClients`.

The same check bodies run against a real broker (tests/integration) and against
:class:`~reliable_kafka.testing.MemoryKafka` (tests/unit): where the in-memory Kafka differs from
Kafka in a way the library depends on, one of them fails. Each check takes the clients, a
bootstrap address and a unique name prefix for its topics, and raises AssertionError on a
difference. Waits are bounded (a real broker answers asynchronously); nothing is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from reliable_kafka.kafka.factory import KafkaClients

__all__ = [
    "CHECKS",
    "check_commit_metadata_round_trip",
    "check_read_committed_hides_aborted",
    "check_headers_round_trip",
    "check_timestamps",
    "check_offsets_commit_with_the_transaction",
    "check_position_passes_a_commit_marker",
    "check_a_refused_record_fails_its_transaction",
    "check_a_fenced_static_member_fails_fatally",
]

WAIT_S = 30.0


def _topic(
    clients: KafkaClients, bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> str:
    admin = clients.admin({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))]
    ).values():
        future.result(timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while True:  # a real broker may need a moment to elect the new partitions' leader
        described = admin.list_topics(name, timeout=WAIT_S).topics.get(name)
        if (
            described is not None
            and described.error is None
            and described.partitions
            and all(p.leader >= 0 for p in described.partitions.values())
        ):
            return name
        assert time.monotonic() < deadline, f"topic {name} has no leader after {WAIT_S:.0f}s"
        time.sleep(0.1)


# The clients' consumers and producers are confluent-kafka's or the in-memory Kafka's stand-ins
# (KafkaClients returns Any): the checks use what both have.
def _consumer(clients: KafkaClients, bootstrap: str, group: str, **config: Any) -> Any:
    return clients.consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
    )


def _read(consumer: Any, topic: str, count: int, *, partition: int = 0) -> list[Any]:
    """Exactly the first ``count`` records of the partition (bounded wait), then any that follow at once."""
    consumer.assign([TopicPartition(topic, partition, 0)])
    messages: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(messages) < count and time.monotonic() < deadline:
        messages.extend(m for m in consumer.consume(count - len(messages), 0.5) if m.error() is None)
    assert len(messages) >= count, f"{topic}: read {len(messages)} of {count} records within {WAIT_S:.0f}s"
    return messages


def _produced(producer: Any) -> None:
    assert producer.flush(WAIT_S) == 0, f"records not delivered within {WAIT_S:.0f}s"


def check_commit_metadata_round_trip(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """A commit's offset and metadata come back from ``committed``, also to another consumer."""
    topic = _topic(clients, bootstrap, f"{name}-meta", partitions=2)
    writer = _consumer(clients, bootstrap, f"{name}-group")
    metadata = "41,43+2|rkx:45,7"
    writer.commit(offsets=[TopicPartition(topic, 0, 40, metadata), TopicPartition(topic, 1, 3)], asynchronous=False)
    reader = _consumer(clients, bootstrap, f"{name}-group")
    found = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=WAIT_S)
    assert [(tp.offset, tp.metadata) for tp in found] == [(40, metadata), (3, None)], found
    other = _consumer(clients, bootstrap, f"{name}-other").committed([TopicPartition(topic, 0)], timeout=WAIT_S)
    assert [(tp.offset, tp.metadata) for tp in other] == [(-1001, None)], other
    for consumer in (writer, reader):
        consumer.close()


def check_read_committed_hides_aborted(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """An aborted transaction's records are skipped by read_committed readers; markers take offsets."""
    topic = _topic(clients, bootstrap, f"{name}-txn")
    producer = clients.producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-txn"})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    _produced(producer)
    producer.abort_transaction(WAIT_S)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(WAIT_S)
    committed = _read(_consumer(clients, bootstrap, f"{name}-rc", **{"isolation.level": "read_committed"}), topic, 1)
    assert [(m.offset(), m.value()) for m in committed] == [(2, b"committed")], committed
    everything = _read(_consumer(clients, bootstrap, f"{name}-ru", **{"isolation.level": "read_uncommitted"}), topic, 2)
    assert [(m.offset(), m.value()) for m in everything] == [(0, b"aborted"), (2, b"committed")]
    watermarks = _consumer(clients, bootstrap, f"{name}-w").get_watermark_offsets(
        TopicPartition(topic, 0), timeout=WAIT_S, cached=False
    )
    assert watermarks == (0, 4), watermarks  # two records and two markers


def check_headers_round_trip(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """Headers come back in order, repeated keys and None values kept; no headers reads as None."""
    topic = _topic(clients, bootstrap, f"{name}-headers")
    producer = clients.producer({"bootstrap.servers": bootstrap})
    headers = [("rk-anchors", b"\x02\x00"), ("user", b"1"), ("user", b"2"), ("empty", None)]
    producer.produce(topic, b"with", key=b"k", headers=headers, partition=0)
    producer.produce(topic, b"without", partition=0)
    _produced(producer)
    first, second = _read(_consumer(clients, bootstrap, f"{name}-h"), topic, 2)
    assert (first.key(), first.value(), first.headers()) == (b"k", b"with", headers), first.headers()
    assert (second.key(), second.value(), second.headers()) == (None, b"without", None), second.headers()


def check_timestamps(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """CreateTime keeps the producer's timestamp; a LogAppendTime topic stamps records itself."""
    create_time = _topic(clients, bootstrap, f"{name}-create")
    append_time = _topic(clients, bootstrap, f"{name}-append", config={"message.timestamp.type": "LogAppendTime"})
    producer = clients.producer({"bootstrap.servers": bootstrap})
    stamp = int(time.time() * 1000) - 3_600_000
    producer.produce(create_time, b"x", timestamp=stamp, partition=0)
    producer.produce(append_time, b"y", timestamp=stamp, partition=0)
    _produced(producer)
    (created,) = _read(_consumer(clients, bootstrap, f"{name}-c"), create_time, 1)
    assert created.timestamp() == (TIMESTAMP_CREATE_TIME, stamp), created.timestamp()
    (appended,) = _read(_consumer(clients, bootstrap, f"{name}-a"), append_time, 1)
    kind, value = appended.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and value != stamp, appended.timestamp()


def check_offsets_commit_with_the_transaction(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """send_offsets_to_transaction: the group's offset and metadata appear only when it commits."""
    topic = _topic(clients, bootstrap, f"{name}-sot")
    group = f"{name}-sot-group"
    consumer = _consumer(clients, bootstrap, group)
    producer = clients.producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-sot"})
    producer.init_transactions(WAIT_S)
    for offset, commit in ((5, False), (7, True)):
        producer.begin_transaction()
        producer.produce(topic, b"out", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, offset, f"state {offset}")], consumer.consumer_group_metadata(), WAIT_S
        )
        if commit:
            producer.commit_transaction(WAIT_S)
        else:
            producer.abort_transaction(WAIT_S)
        found = consumer.committed([TopicPartition(topic, 0)], timeout=WAIT_S)[0]
        expected = (7, "state 7") if commit else (-1001, None)
        assert (found.offset, found.metadata) == expected, (offset, found)
    consumer.close()


def check_a_refused_record_fails_its_transaction(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """A record the broker refuses (over the topic's ``max.message.bytes``) fails its delivery report
    and makes ``commit_transaction`` raise an abortable error (librdkafka): none of the transaction's
    records and offsets appear. (librdkafka may fail the producer's next transaction too, with an
    epoch bump: the library's ``Transactions`` replaces a producer that fails twice in a row.)"""
    topic = _topic(clients, bootstrap, f"{name}-refused", config={"max.message.bytes": "2000"})
    group = f"{name}-refused-group"
    consumer = _consumer(clients, bootstrap, group)
    producer = clients.producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-refused"})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"small", partition=0)
    producer.produce(topic, b"x" * 10_000, partition=0, on_delivery=lambda error, _message: reports.append(error))
    producer.flush(WAIT_S)  # the refusal is known (reported) before the commit
    assert len(reports) == 1 and reports[0] is not None, reports
    refusal = None
    try:  # the library's Transactions.commit: either call may be the one that raises
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], consumer.consumer_group_metadata(), WAIT_S)
        producer.commit_transaction(WAIT_S)
    except KafkaException as exc:
        refusal = exc.args[0]
    assert refusal is not None, "the transaction committed although one of its records was refused"
    assert refusal.txn_requires_abort() and not refusal.fatal(), refusal
    producer.abort_transaction(WAIT_S)
    plain = clients.producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"after", partition=0)
    _produced(plain)
    reader = _consumer(clients, bootstrap, f"{name}-refused-r", **{"isolation.level": "read_committed"})
    assert [m.value() for m in _read(reader, topic, 1)] == [b"after"]
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=WAIT_S)[0]
    assert committed.offset < 0, f"the aborted transaction's offset {committed.offset} was committed"
    reader.close()
    consumer.close()


def check_position_passes_a_commit_marker(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """After the last record of a committed transaction, the position passes its marker."""
    topic = _topic(clients, bootstrap, f"{name}-marker")
    producer = clients.producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-marker"})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    producer.produce(topic, b"only", partition=0)
    producer.commit_transaction(WAIT_S)
    consumer = _consumer(clients, bootstrap, f"{name}-p", **{"isolation.level": "read_committed"})
    assert [m.offset() for m in _read(consumer, topic, 1)] == [0]
    deadline = time.monotonic() + WAIT_S
    position = consumer.position([TopicPartition(topic, 0)])[0].offset
    while position != 2 and time.monotonic() < deadline:  # the marker may come in a later fetch
        assert consumer.consume(1, 0.2) == []
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
    assert position == 2, f"position {position}, not past the commit marker at offset 1"
    consumer.close()


def check_a_fenced_static_member_fails_fatally(clients: KafkaClients, bootstrap: str, name: str) -> None:
    """A static member fenced by a newer one with its ``group.instance.id`` gets one ``_FATAL``
    error event, then reads nothing; its commits raise ``_FATAL``; close works; the newer one
    gets the partitions (what reliable_kafka.kafka.fatal relies on)."""
    topic = _topic(clients, bootstrap, f"{name}-static")
    static = {"group.instance.id": f"{name}-member", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    old = _consumer(clients, bootstrap, f"{name}-static", **static)
    old.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while not old.assignment() and time.monotonic() < deadline:
        old.consume(1, 0.2)
    assert old.assignment(), f"the first member got no partition within {WAIT_S:.0f}s"
    new = _consumer(clients, bootstrap, f"{name}-static", **static)
    new.subscribe([topic])
    errors: list[KafkaError] = []
    while not errors and time.monotonic() < deadline:
        new.consume(1, 0.1)
        errors = [m.error() for m in old.consume(10, 0.2) if m.error() is not None]
    assert [e.code() for e in errors] == [KafkaError._FATAL], errors
    assert old.consume(10, 0.5) == [], "a fenced consumer read on"
    refused = None
    try:
        old.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    except KafkaException as exc:
        refused = exc.args[0]
    assert refused is not None and refused.code() == KafkaError._FATAL, f"a fenced consumer's commit: {refused}"
    old.close()
    while not new.assignment() and time.monotonic() < deadline:
        new.consume(1, 0.2)
    assert new.assignment(), "the newer member got no partition"
    new.close()


CHECKS: dict[str, Callable[[KafkaClients, str, str], None]] = {
    "a_fenced_static_member_fails_fatally": check_a_fenced_static_member_fails_fatally,
    "position_passes_a_commit_marker": check_position_passes_a_commit_marker,
    "commit_metadata_round_trip": check_commit_metadata_round_trip,
    "read_committed_hides_aborted": check_read_committed_hides_aborted,
    "headers_round_trip": check_headers_round_trip,
    "timestamps": check_timestamps,
    "offsets_commit_with_the_transaction": check_offsets_commit_with_the_transaction,
    "a_refused_record_fails_its_transaction": check_a_refused_record_fails_its_transaction,
}
