"""What a spout's handler sees: the :class:`SourceRecord` it is given and the :class:`SpoutCollector`
it emits with; the spout's counters. :mod:`reliable_kafka.spout.spout` runs them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from confluent_kafka import Message

from reliable_kafka.core.anchors import Anchored, spout_root
from reliable_kafka.core.ids import new_id

if TYPE_CHECKING:
    from reliable_kafka.spout.shell import SpoutShell

__all__ = ["SourceRecord", "SpoutStats", "SpoutCollector", "forward_to", "with_attempt"]

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class SourceRecord:
    """A record read from a source topic, as the spout's handler sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp_ms: int
    attempt: int = 1

    @property
    def coordinates(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass
class SpoutStats:
    read: int = 0
    emitted: int = 0
    completed: int = 0
    replayed: int = 0
    dead_lettered: int = 0
    handler_errors: int = 0
    output_delivery_errors: int = 0
    metadata_truncated: int = 0
    skipped_done: int = 0
    expired_in_flight: int = 0  # deleted by retention before a redelivery could read it
    paused: bool = False
    committed: dict[TopicPartitionKey, int] = field(default_factory=dict)


class SpoutCollector:
    """What a spout handler emits with: every tuple is anchored to the current record's root."""

    def __init__(self, spout: SpoutShell) -> None:
        self._spout = spout
        self._root: int | None = None
        self._parent: Anchored | None = None

    def _begin(self, root: int | None) -> None:
        self._root = root
        self._parent = spout_root(root) if root is not None else None

    def emit(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Send a tuple of the current tree to ``topic`` (tracked when the spout tracks)."""
        parent = self._parent
        if parent is None:
            self._spout._produce_output(topic, value, key, headers, partition, {})
            return
        # anchor_child([parent]) for the one parent a spout tuple has, without its loop
        edge = new_id()
        parent.ack_val ^= edge
        self._spout._produce_in_tree(
            topic, value, key, headers, partition, cast(int, self._root), edge
        )  # set with the parent

    def emit_unanchored(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Send a record that belongs to no tree (not tracked, never replayed)."""
        self._spout._produce_output(topic, value, key, headers, partition, {})


def forward_to(topic: str) -> Callable[[SourceRecord, SpoutCollector], None]:
    """The default handler: emit the source record unchanged (key, value, headers) to ``topic``."""

    def forward(record: SourceRecord, collector: SpoutCollector) -> None:
        collector.emit(topic, record.value, key=record.key, headers=record.headers)

    forward.__name__ = f"forward_to({topic})"
    return forward


def source_record(message: Message) -> SourceRecord:
    """The consumed ``message`` as the handler's :class:`SourceRecord` (its first attempt)."""
    # Speed: the frozen dataclass's __init__ (a setattr a field) takes 3x as long (./rk bench spout_path, HookedSpout)
    timestamp = message.timestamp()
    record = object.__new__(SourceRecord)
    record.__dict__.update(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers=list(message.headers() or []),
        timestamp_ms=timestamp[1] if timestamp else -1,
        attempt=1,
    )
    return record


def source_record_of(kept: object) -> SourceRecord:
    """What the spout kept with a tracked offset as its :class:`SourceRecord`: the consumed message
    (the default handler's batch path keeps it) made into one, or the record itself."""
    return kept if type(kept) is SourceRecord else source_record(cast(Message, kept))


def with_attempt(record: SourceRecord, attempt: int) -> SourceRecord:
    """``record`` again, as its ``attempt``-th delivery (a redelivery)."""
    return SourceRecord(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        record.headers,
        record.timestamp_ms,
        attempt,
    )
