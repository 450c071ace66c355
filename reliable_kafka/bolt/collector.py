"""What a bolt's handler sees: the :class:`Tuple` it is given and the collector it emits, acks and
fails with (docs/design.md sections 2 and 6); :mod:`reliable_kafka.bolt.runner` runs them."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Message

from reliable_kafka import codec
from reliable_kafka.core.anchors import Anchored, anchor_child, fail_roots
from reliable_kafka.core.ids import new_id, take_pooled_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import ArgumentError, OutputRefused
from reliable_kafka.kafka.produce import ConsumedHeaders, Header, produce_headers
from reliable_kafka.validation import refused_outputs

if TYPE_CHECKING:
    from reliable_kafka.bolt.runner import Bolt

__all__ = ["Tuple", "TupleBatch", "BoltCollector", "BoltStats", "consumed_tuple"]

_ANCHORS = codec.ANCHORS_HEADER
# a whole one-pair v2 value (version 2, length byte 32, root, edge) in one struct call, as encode_one_anchor
_ONE_V2_PAIR = struct.Struct(">BBqq")
_pack_one, _unpack_one = _ONE_V2_PAIR.pack, _ONE_V2_PAIR.unpack


class Tuple(Anchored):
    """A record of a data topic as a bolt sees it; ``tracked`` when it carries ``rk-anchors``.

    A tuple is its own :class:`Anchored` (its ``anchors`` and ``ack_val``): one object per received
    record instead of two (``anchored`` returns the tuple itself, as it returned the pair before).
    Its ``anchors`` are the trees it was received in: read them, never replace them (the loop and a
    basic bolt's emit use the one root they read). A tuple in one tree keeps its root and edge and
    makes its ``anchors`` dict the first time it is read (a basic bolt's emit and ack never read
    it), and so does an untracked one (its empty dict). ``timestamp_ms`` is read from the consumed
    record when asked for (few handlers do).
    """

    # _one_root, _edge: the root and edge of the tuple's one tree (root 0: in none or several), so
    # that a basic bolt's emit and ack need no anchors dict; _anchors: the dict (None until read
    # when _one_root is set, and for an untracked tuple of the loop: {} then; with _one_root 0 it
    # is otherwise always set); _record: the consumed message, whose
    # timestamp() timestamp_ms reads (None: _timestamp_ms is it); _settled: set once acked or failed
    # through a collector (unset until then, read as False: no store per tuple in the loop)
    __slots__ = (
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "_timestamp_ms",
        "_one_root",
        "_edge",
        "_anchors",
        "_record",
        "_settled",
    )
    _one_root: int
    _edge: int
    _anchors: dict[int, int] | None
    _settled: bool
    _record: Any

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: ConsumedHeaders,
        timestamp_ms: int,
        anchors: dict[int, int] | Anchored,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers  # the record's headers without rk-anchors
        self._timestamp_ms = timestamp_ms
        self._record = None
        if type(anchors) is dict:  # the runner's: root -> edge, as decoded
            self.anchors = anchors
            self.ack_val = 0
        else:  # an Anchored (the signature before tuples were their own)
            self.anchors = anchors.anchors  # type: ignore[union-attr]
            self.ack_val = anchors.ack_val  # type: ignore[union-attr]

    @property  # Anchored's slot, made on demand here
    def anchors(self) -> dict[int, int]:
        """The trees the tuple was received in: root -> edge ({}: untracked)."""
        anchors = self._anchors
        if anchors is None:  # one tree, read from its one-pair value, or untracked: the dict is made once, now
            root = self._one_root
            anchors = self._anchors = {root: self._edge} if root else {}
        return anchors

    @anchors.setter
    def anchors(self, anchors: dict[int, int]) -> None:
        self._anchors = anchors
        self._one_root, self._edge = next(iter(anchors.items())) if len(anchors) == 1 else (0, 0)

    @property
    def tracked(self) -> bool:
        """False for a tuple that carries no anchors (its tree, if any, is not tracked)."""
        return self._one_root != 0 or bool(self.anchors)

    @property
    def timestamp_ms(self) -> int:
        """The record's timestamp, ms since the epoch (-1: it has none)."""
        record = self._record
        if record is None:
            return self._timestamp_ms
        timestamp = record.timestamp()
        return timestamp[1] if timestamp else -1

    @property
    def anchored(self) -> Anchored:
        """The tuple's tracking state: the tuple itself."""
        return self

    @property
    def roots(self) -> list[int]:
        return list(self.anchors)

    @property
    def coordinates(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def __repr__(self) -> str:
        return f"Tuple({self.coordinates}, key={self.key!r}, tracked={self.tracked})"


def consumed_tuple(
    message: Message,
    topic: str,
    partition: int,
    offset: int,
    headers: ConsumedHeaders,
    anchors: dict[int, int] | None,
    root: int,
    edge: int,
) -> Tuple:
    """The bolt loop's tuple of a consumed ``message`` (its coordinates and its headers without
    rk-anchors read by the caller): ``anchors`` as decoded, or None for a tuple in one tree
    (``root``, ``edge``) or none (root 0), whose dict is made only if read."""
    # Speed: Tuple(...) makes the anchors dict a one-tree tuple's ack never reads (./rk bench bolt_overhead: 1.4-1.6x)
    tuple_ = object.__new__(Tuple)
    tuple_.topic, tuple_.partition, tuple_.offset = topic, partition, offset
    tuple_.key, tuple_.value, tuple_.headers = message.key(), message.value(), headers
    tuple_._anchors, tuple_._one_root, tuple_._edge = anchors, root, edge
    tuple_.ack_val = 0
    tuple_._record = message  # its timestamp is read only if asked for
    return tuple_


class TupleBatch:
    """A consumed batch as a basic bolt's ``batch_handler`` sees it: its records in columns, made
    when asked for, and its tuples one by one only where a handler needs them.

    ``keys()`` and ``values()`` are lists (one per call: keep them), in the order consumed, records
    that were quarantined left out. ``batch[i]`` (and iterating) gives record i as a :class:`Tuple`,
    the one to name in ``collector.emit(..., anchors=batch[i])``; the same object each time.
    """

    __slots__ = ("_messages", "_anchors", "_headers", "_roots", "_pairs", "_tuples")

    def __init__(
        self,
        messages: list[Message],
        anchors: list[dict[int, int] | None],
        headers: list[ConsumedHeaders],
        roots: list[int],
        pairs: list[bytes | None] | None = None,
    ) -> None:
        self._messages = messages  # consumed messages (key(), value(), topic(), ...)
        # per message: root -> edge, as decoded (None: one tree, its pair in pairs; or, root 0, untracked)
        self._anchors = anchors
        self._headers = headers  # per message: its headers without rk-anchors
        self._roots = roots  # per message: the root of its one tree, else 0
        self._pairs = pairs  # per message: its one-pair v2 value when it is in one tree, else None
        self._tuples: dict[int, Tuple] = {}  # made on demand; the runner reads their ack vals

    def __len__(self) -> int:
        return len(self._messages)

    def keys(self) -> list[bytes | None]:
        return [message.key() for message in self._messages]

    def values(self) -> list[bytes | None]:
        return [message.value() for message in self._messages]

    def __getitem__(self, index: int) -> Tuple:
        tuples = self._tuples
        if index < 0:
            index += len(self._messages)
        tuple_ = tuples.get(index)
        if tuple_ is None:
            message = self._messages[index]  # IndexError past the end
            anchors, root = self._anchors[index], self._roots[index]
            # one tree: its edge read from its one-pair value (root 0: untracked)
            if anchors is None:
                edge = _unpack_one(self._pairs[index])[3] if root else 0  # type: ignore[index, arg-type]  # root: its pair
            else:
                edge = next(iter(anchors.values())) if root else 0
            tuple_ = tuples[index] = consumed_tuple(
                message,
                message.topic(),  # type: ignore[arg-type]  # a consumed record's coordinates are set
                message.partition(),  # type: ignore[arg-type]
                message.offset(),  # type: ignore[arg-type]
                self._headers[index],
                anchors,
                root,
                edge,
            )
        return tuple_

    def __iter__(self) -> Iterator[Tuple]:
        return (self[index] for index in range(len(self._messages)))

    def __repr__(self) -> str:
        return f"TupleBatch({len(self._messages)} tuples)"


@dataclass
class BoltStats:
    """A bolt's counters. Each received tuple ends in exactly one of ``acked``, ``failed`` and
    ``quarantined``, or, for a parallel bolt's calls abandoned on revoke or close, ``abandoned``
    (their partitions' next owner reads them again); ``handler_errors`` counts raising calls (each
    also in ``failed``, unless the handler had acked or failed its tuple itself), ``untracked``
    the received tuples without anchors. ``metadata_truncated``: commits whose done-above offsets
    did not all fit in the commit metadata (parallel bolts)."""

    received: int = 0
    untracked: int = 0
    emitted: int = 0
    acked: int = 0
    failed: int = 0
    handler_errors: int = 0
    quarantined: int = 0
    delivery_errors: int = 0
    transactions: int = 0
    aborted_transactions: int = 0
    abandoned: int = 0
    metadata_truncated: int = 0


def _child_anchors(anchors: Tuple | Sequence[Tuple] | None) -> dict[int, int]:
    """The new child's anchors (updating its parents' ack vals), as ``anchor_child``."""
    if anchors is None:
        return {}
    if isinstance(anchors, Tuple):  # the common case: anchor_child([anchored]) without its loop
        parent = anchors
        if not parent.anchors:
            return {}
        edge = new_id()
        parent.ack_val ^= edge
        return dict.fromkeys(parent.anchors, edge)
    return anchor_child(anchors)


class BoltCollector:
    """Emits tuples and acks, fails or resets the timeout of inputs; entries are packed per batch."""

    current: Tuple | None = None  # the tuple whose handler runs (a basic bolt anchors outputs to it)

    def __init__(self, bolt: Bolt) -> None:
        self._bolt = bolt
        # a basic bolt's one-tree and untracked emits note their topic here, one append; the runner
        # counts them into ``stats.emitted`` and ``output_topics`` after each batch (Bolt._count_emits)
        self._emitted_to: list[str] = []
        self._note_emit = self._emitted_to.append
        # a first emit to a topic is checked (_first_emit_to): not a source, not a topology topic
        self._refused = refused_outputs(bolt.topics, bolt.source_topics)
        self._outputs: set[str] = set()

    def _first_emit_to(self, topic: str) -> None:
        why = self._refused.get(topic)
        if why is not None:
            raise OutputRefused(component=self._bolt.name, topic=topic, why=why)
        self._outputs.add(topic)

    def emit(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        anchors: Tuple | Sequence[Tuple] | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
    ) -> None:
        """Send a record to ``topic``, anchored to ``anchors`` (one tuple or several; None: unanchored)."""
        if topic not in self._outputs:
            self._first_emit_to(topic)
        self._bolt._produce(topic, value, key, headers, partition, _child_anchors(anchors))

    def ack(self, tuple_: Tuple) -> None:
        if getattr(tuple_, "_settled", False):
            return  # acked or failed before: its entries went then, and it is counted once
        tuple_._settled = True
        acks = self._bolt._acks
        assert acks is not None  # made by start()
        if root := tuple_._one_root:  # one tree: its entry without the anchors dict
            acks.add(EventKind.ACK, root, tuple_._edge ^ tuple_.ack_val)
        elif tuple_.anchors:
            add, ack_val = acks.add, tuple_.ack_val
            for root, edge in tuple_.anchors.items():  # ack_entries(tuple_)
                add(EventKind.ACK, root, edge ^ ack_val)
        self._bolt.stats.acked += 1

    def fail(
        self, tuple_: Tuple, reason: str | None = None, error: BaseException | None = None, retry: bool = True
    ) -> None:
        """Fail ``tuple_``'s trees; ``reason``/``error`` go to ``<topology>.failures`` (only on
        failure), ``retry=False`` asks the spout to dead-letter the source record at once."""
        if getattr(tuple_, "_settled", False):
            return  # acked or failed before: counted once
        tuple_._settled = True
        if tuple_.tracked:
            self._bolt._record_failure(tuple_, reason, error, retry)
        for root in fail_roots(tuple_):
            assert self._bolt._acks is not None  # made by start()
            self._bolt._acks.add(EventKind.FAIL, root)
        self._bolt.stats.failed += 1

    def reset_timeout(self, tuple_: Tuple) -> None:
        """Push the deadline of ``tuple_``'s trees (for long work on one tuple)."""
        for root in tuple_.anchors:
            assert self._bolt._acks is not None  # made by start()
            self._bolt._acks.add(EventKind.RESET_TIMEOUT, root)


class BasicCollector(BoltCollector):
    """A basic bolt's collector: outputs are anchored to the current input unless told otherwise."""

    def emit(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        anchors: Tuple | Sequence[Tuple] | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
    ) -> None:
        # BoltCollector.emit, inlined: this runs once per output tuple
        if topic not in self._outputs:
            self._first_emit_to(topic)
        current = self.current
        parent = current if anchors is None else anchors  # one input: the current tuple, or the one named
        if headers is None and type(parent) is Tuple:
            root = parent._one_root
            if root:  # the common case: one tree, no headers of the user's
                try:
                    edge = take_pooled_id()
                except IndexError:
                    edge = new_id()  # refills the pool
                parent.ack_val ^= edge
                # the produce call inline: a Python call fewer per emitted tuple
                producer = self._bolt._producer
                headers = [(_ANCHORS, _pack_one(2, 32, root, edge))]  # encode_one_anchor(root, edge)
                try:
                    producer.produce(  # type: ignore[union-attr]  # made by start()
                        topic, value, key, -1 if partition is None else partition, None, None, 0, headers
                    )
                except (BufferError, KafkaException):  # queue full, or the producer failed
                    produce_headers(producer, topic, value, key, partition, headers)  # type: ignore[arg-type]
                self._note_emit(topic)  # counted after the batch
                return
            # an untracked input (not in one tree, so its dict is set: read without the property):
            # an untracked child, no header (produced inline)
            if not parent._anchors:
                producer = self._bolt._producer
                try:
                    producer.produce(topic, value, key, -1 if partition is None else partition)  # type: ignore[union-attr]
                except (BufferError, KafkaException):  # queue full, or the producer failed
                    produce_headers(producer, topic, value, key, partition, None)  # type: ignore[arg-type]
                self._note_emit(topic)  # counted after the batch
                return
        if anchors is None and current is None and self._bolt.batch_handler is not None:
            raise ArgumentError(
                f"{self._bolt.name}: a batch_handler's emit names its inputs: emit(..., anchors=batch[i]) "
                f"(to {topic!r}; there is no current tuple to anchor to)"
            )
        self._bolt._produce(
            topic, value, key, headers, partition, _child_anchors(self.current if anchors is None else anchors)
        )
