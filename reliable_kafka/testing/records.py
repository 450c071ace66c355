"""Writing and reading whole topics in tests and the demo (bounded, with clear failures)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from reliable_kafka.client_log import with_log
from reliable_kafka.errors import DeliveryError, ReliableKafkaError, WaitTimeoutError
from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.offsets import end_offsets

__all__ = ["produce_values", "read_topic"]


def produce_values(
    bootstrap_servers: str,
    topic: str,
    values: Iterable[bytes],
    *,
    keys: Iterable[bytes | None] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Write ``values`` (with ``keys``) and return each record's (partition, offset), in order."""
    producer = Producer(with_log({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "linger.ms": 5}))
    values = list(values)
    keys = list(keys) if keys is not None else [None] * len(values)
    placed: list[tuple[int, int] | None] = [None] * len(values)
    errors: list[KafkaError] = []

    def delivered(index: int) -> Callable[[KafkaError | None, Message], None]:
        def callback(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(error)
            else:
                placed[index] = coordinates(message)[1:]

        return callback

    for index, (key, value) in enumerate(zip(keys, values)):
        while True:
            try:
                producer.produce(topic, value, key=key, on_delivery=delivered(index))
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(timeout)
    if remaining or errors:
        raise DeliveryError(f"{remaining} records to {topic} not flushed, delivery errors: {errors[:3]}", topic=topic)
    return placed  # type: ignore[return-value]


def read_topic(
    bootstrap_servers: str, topic: str, *, timeout: float = 60.0, committed_only: bool = True
) -> list[Message]:
    """Every record of ``topic`` up to its current end (all partitions), read with a fresh consumer."""
    ends = end_offsets(bootstrap_servers, topic)
    consumer = Consumer(
        with_log(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "reliable-kafka-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        records: list[Message] = []
        positions = {p: 0 for p in ends}
        deadline = time.monotonic() + timeout
        while any(positions[p] < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise WaitTimeoutError(f"reading {topic}: reached {positions}, end is {ends}")
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise ReliableKafkaError(f"reading {topic}: {error}")
                    continue
                records.append(message)
                partition, offset = message.partition(), message.offset()
                if partition is not None and offset is not None:  # always, on a record
                    positions[partition] = offset + 1
            if committed_only:  # transaction markers take offsets too: stop at the last stable offset
                for p, end in ends.items():
                    position = consumer.position([TopicPartition(topic, p)])[0].offset
                    if position >= end:
                        positions[p] = end
        return records
    finally:
        consumer.close()
