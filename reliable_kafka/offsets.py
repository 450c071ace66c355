"""Where a consumer group stands on a topic: committed offsets against the topic's end.

Used by the demo's verified summary, the fault harness and the tests ("committed = end of topic"),
and by ``reliable-kafka lag``: :func:`true_lag` subtracts the records a spout recorded done above
its commit point (in the commit metadata), which Kafka's own group tool counts as lag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from reliable_kafka.client_log import with_log
from reliable_kafka.core.commit_metadata import decode_done_ranges
from reliable_kafka.errors import DecodeError

__all__ = ["end_offsets", "committed_offsets", "lag", "PartitionLag", "true_lag"]


def _consumer(bootstrap_servers: str, group_id: str) -> Consumer:
    return Consumer(
        with_log({"bootstrap.servers": bootstrap_servers, "group.id": group_id, "enable.auto.commit": False})
    )


def _partitions(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if described is None or described.error is not None:
        return []
    return sorted(described.partitions)


def end_offsets(bootstrap_servers: str, topic: str, *, timeout: float = 10.0) -> dict[int, int]:
    """partition -> high watermark (the offset the next record will get)."""
    consumer = _consumer(bootstrap_servers, "reliable-kafka-offsets")
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)[1]
            for p in _partitions(consumer, topic, timeout)
        }
    finally:
        consumer.close()


def committed_offsets(bootstrap_servers: str, group_id: str, topic: str, *, timeout: float = 10.0) -> dict[int, int]:
    """partition -> offset committed by ``group_id`` (-1001 when nothing was committed)."""
    consumer = _consumer(bootstrap_servers, group_id)
    try:
        partitions = [TopicPartition(topic, p) for p in _partitions(consumer, topic, timeout)]
        return {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=timeout)} if partitions else {}
    finally:
        consumer.close()


def lag(bootstrap_servers: str, group_id: str, topic: str) -> int:
    """Records between the group's committed offsets and the end of ``topic``."""
    ends = end_offsets(bootstrap_servers, topic)
    committed = committed_offsets(bootstrap_servers, group_id, topic)
    return sum(end - max(committed.get(p, 0), 0) for p, end in ends.items())


@dataclass(frozen=True)
class PartitionLag:
    """One partition's lag as a spout's group sees it.

    ``committed``: the group's commit point (None: nothing committed; counted from the start of
    the log, ``start``). ``done_above``: records above it recorded done in the commit metadata
    (None: metadata present but not reliable-kafka's, see ``note``). ``kafka_lag`` is what
    ``kafka-consumer-groups.sh --describe`` shows; ``lag`` the records not yet done.
    """

    partition: int
    start: int
    end: int
    committed: int | None
    done_above: int | None
    note: str = ""

    @property
    def kafka_lag(self) -> int:
        return self.end - (self.start if self.committed is None else max(self.committed, self.start))

    @property
    def lag(self) -> int:
        return self.kafka_lag - (self.done_above or 0)


def true_lag(
    bootstrap_servers: str,
    group_id: str,
    topic: str,
    *,
    kafka_config: dict[str, Any] | None = None,
    timeout: float = 10.0,
) -> list[PartitionLag]:
    """Per partition of ``topic``: ``group_id``'s commit point, the records done above it (from
    the commit metadata) and what is left. Reads only; joins no group."""
    config = {
        **(kafka_config or {}),
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "enable.auto.commit": False,
    }
    consumer = Consumer(with_log(config))
    try:
        partitions = [TopicPartition(topic, p) for p in _partitions(consumer, topic, timeout)]
        committed = consumer.committed(partitions, timeout=timeout) if partitions else []
        result = []
        for tp in committed:
            start, end = consumer.get_watermark_offsets(
                TopicPartition(topic, tp.partition), timeout=timeout, cached=False
            )
            point = tp.offset if tp.offset >= 0 else None
            done: int | None = 0
            note = ""
            if point is not None:
                try:
                    done = sum(len(run) for run in decode_done_ranges(point, tp.metadata))
                except DecodeError as error:
                    done, note = None, str(error)
            result.append(
                PartitionLag(partition=tp.partition, start=start, end=end, committed=point, done_above=done, note=note)
            )
        return result
    finally:
        consumer.close()
