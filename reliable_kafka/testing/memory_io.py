"""Small sources, sinks and a stepping loop for unit tests of topologies on :class:`MemoryKafka`.

- :class:`ListSource` writes given records to a topic (values, ``(key, value)`` pairs, or dicts
  with ``key``/``value``/``headers``/``partition``/``timestamp``);
- :class:`TopicSink` collects what a topic holds, as a ``read_committed`` consumer sees it;
- :func:`step_until` polls components (spouts, bolts, acker workers) in turn, in one thread,
  until a condition holds, and fails with the components' counters when it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from confluent_kafka import Message

from reliable_kafka.errors import ReliableKafkaError
from reliable_kafka.testing.memory_broker import MemoryKafka
from reliable_kafka.validation import require_instance, require_int, require_str

__all__ = ["ListSource", "TopicSink", "step_until", "NotReached"]


class NotReached(ReliableKafkaError, AssertionError):
    """:func:`step_until` ran out of rounds; the message holds every component's counters."""


class ListSource:
    """Writes records to ``topic`` of a :class:`MemoryKafka` (created with ``partitions`` if missing).

    ``send(records)`` produces and delivers them at once; each record is a value (bytes or str), a
    ``(key, value)`` pair, or a dict with any of ``key``, ``value``, ``headers``, ``partition``,
    ``timestamp`` (ms). Records without a partition are spread by key (CRC32), or round-robin.
    """

    def __init__(self, kafka: MemoryKafka, topic: str, records: Iterable[Any] = (), *, partitions: int = 1) -> None:
        require_instance("ListSource", "kafka", kafka, MemoryKafka, optional=False)
        require_str("ListSource", "topic", topic)
        require_instance("ListSource", "records", records, Iterable, optional=False)
        require_int("ListSource", "partitions", partitions, minimum=1)
        self.kafka = kafka
        self.topic = topic
        if topic not in kafka.topics:
            kafka.create_topic(topic, partitions)
        self._producer = kafka.producer({"bootstrap.servers": "memory"})
        self.sent = 0
        self.send(records)

    def send(self, records: Iterable[Any]) -> int:
        count = 0
        for record in records:
            if isinstance(record, dict):
                fields = dict(record)
            elif isinstance(record, tuple):
                fields = {"key": record[0], "value": record[1]}
            else:
                fields = {"value": record}
            self._producer.produce(
                self.topic,
                fields.get("value"),
                key=fields.get("key"),
                partition=fields.get("partition", -1),
                headers=fields.get("headers"),
                timestamp=fields.get("timestamp", 0),
            )
            count += 1
        remaining = self._producer.flush(0)
        if remaining:
            raise ReliableKafkaError(f"ListSource({self.topic}): {remaining} records not delivered")
        self.sent += count
        return count


class TopicSink:
    """What ``topic`` holds, as a ``read_committed`` reader sees it (aborted transactions hidden)."""

    def __init__(self, kafka: MemoryKafka, topic: str) -> None:
        require_instance("TopicSink", "kafka", kafka, MemoryKafka, optional=False)
        require_str("TopicSink", "topic", topic)
        self.kafka = kafka
        self.topic = topic

    def messages(self) -> list[Message]:
        """Every visible record, partition by partition in offset order ([] while the topic is missing)."""
        if self.topic not in self.kafka.topics:
            return []
        return self.kafka.messages(self.topic)

    def values(self) -> list[bytes | None]:
        return [message.value() for message in self.messages()]

    def keys(self) -> list[bytes | None]:
        return [message.key() for message in self.messages()]

    def __len__(self) -> int:
        return len(self.messages())


class Steppable(Protocol):
    """A spout, bolt or acker worker: one round of its loop per call."""

    def poll_once(self, timeout: float, /) -> None: ...


def step_until(
    condition: Callable[[], bool],
    *components: Steppable,
    max_rounds: int = 1000,
    between: Callable[[int], None] | None = None,
) -> int:
    """Call ``poll_once(0)`` on each component in turn until ``condition()`` holds; returns the rounds.

    ``between(round)`` runs after each round (advance a clock, inject a fault). Raises
    :class:`NotReached` with each component's ``stats`` after ``max_rounds`` rounds.
    """
    for round_ in range(max_rounds):
        if condition():
            return round_
        for component in components:
            component.poll_once(0)
        if between is not None:
            between(round_)
    if condition():
        return max_rounds
    counters = "; ".join(f"{getattr(c, 'name', type(c).__name__)}: {getattr(c, 'stats', '?')}" for c in components)
    raise NotReached(
        f"step_until: {getattr(condition, '__name__', 'condition')} did not hold after {max_rounds} rounds; {counters}"
    )
