"""Where a consumer group stands on a topic: committed offsets against the topic's end.

Used by the demo's verified summary, the fault harness and the tests ("committed = end of topic").
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from reliable_kafka.client_log import with_log

__all__ = ["end_offsets", "committed_offsets", "lag"]


def _consumer(bootstrap_servers: str, group_id: str) -> Consumer:
    return Consumer(with_log({"bootstrap.servers": bootstrap_servers, "group.id": group_id,
                              "enable.auto.commit": False}))


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
