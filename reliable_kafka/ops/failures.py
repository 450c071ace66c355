"""Why a tuple failed: failure records on ``<topology>.failures`` and the attempt history of a root.

Only failures pay for this: a component writes one JSON record when it fails a tuple
(``collector.fail(tuple, reason=..., error=...)`` or a basic bolt's exception), and a spout reads
the failures topic only after a FAILED outcome arrived, from a consumer it creates at the first
failure. The happy path sends and reads nothing more.

A failure record (UTF-8 JSON object, key = the first root as decimal text)::

    {"v": 1, "roots": [int64...], "component": str, "task_id": int64, "reason": str,
     "error_type": str|null, "error_message": str|null, "retry": bool,
     "tuple": {"topic": str, "partition": int, "offset": int}|null, "at_ms": int,
     "host": str|null, "pid": int|null, "frames": [str...]|null}

``frames`` are the innermost lines of the error's stack (:func:`reliable_kafka.ops.errors.frames_of`);
records written before they existed decode with None.

``retry: false`` marks a poison pill: the spout that owns a root dead-letters its record at once
instead of redelivering it. Dead letters carry the attempt history as the ``rk-attempts`` header
(a JSON list of :class:`Attempt`) and a one-line ``rk-reason`` header.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, overload

from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER
from reliable_kafka.core.clock import Clock
from reliable_kafka.errors import AuthorizationError, TopologyError
from reliable_kafka.ops.errors import frames_of

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message, Producer

    from reliable_kafka.kafka.factory import KafkaClients

__all__ = [
    "FAILURE_FORMAT",
    "FailureRecord",
    "TupleCoordinates",
    "Attempt",
    "FailureLog",
    "FailureIndex",
    "reason_of",
    "encode_failure",
    "decode_failure",
    "encode_attempts",
    "decode_attempts",
    "attempt_headers",
]

log = logging.getLogger(__name__)

FAILURE_FORMAT = 1
_MAX_TEXT = 1000  # a reason or error message longer than this is cut: records and headers stay small
_MAX_ATTEMPTS_HEADER = 16_000  # bytes; older attempts are dropped first, the count stays in rk-parked


def _now_ms(clock: Clock) -> int:
    return int(clock.time() * 1000)


@overload
def _cut(text: str) -> str: ...
@overload
def _cut(text: str | None) -> str | None: ...
def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def reason_of(reason: str | None, error: BaseException | None) -> str:
    """The reason to record: the given one, else the error's type and message, else ``"failed"``."""
    if reason:
        return _cut(reason)
    if error is not None:
        message = str(error)
        return _cut(f"{type(error).__name__}: {message}" if message else type(error).__name__)
    return "failed"


class TupleCoordinates(TypedDict):
    """Where a failed tuple was read: a failure record's ``tuple``."""

    topic: str
    partition: int | None
    offset: int | None


@dataclass(frozen=True)
class FailureRecord:
    """One component's report that it failed a tuple (of one or more trees)."""

    roots: list[int]
    component: str
    reason: str
    task_id: int = 0
    error_type: str | None = None
    error_message: str | None = None
    retry: bool = True
    tuple: TupleCoordinates | None = None  # where the failed tuple was read
    at_ms: int = -1
    host: str | None = None
    pid: int | None = None
    frames: list[str] | None = None  # the error's innermost stack frames

    @classmethod
    def of(
        cls,
        *,
        roots: Iterable[int],
        component: str,
        task_id: int = 0,
        reason: str | None = None,
        error: BaseException | None = None,
        retry: bool = True,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        clock: Clock = time,
    ) -> FailureRecord:
        coordinates: TupleCoordinates | None = (
            None if topic is None else {"topic": topic, "partition": partition, "offset": offset}
        )
        return cls(
            roots=[int(r) for r in roots],
            component=component,
            task_id=int(task_id),
            reason=reason_of(reason, error),
            error_type=type(error).__name__ if error is not None else None,
            error_message=_cut(str(error)) if error is not None else None,
            retry=bool(retry),
            tuple=coordinates,
            at_ms=_now_ms(clock),
            host=socket.gethostname(),
            pid=os.getpid(),
            frames=frames_of(error) if error is not None else None,
        )

    def summary(self) -> str:
        where = ""
        if self.tuple:
            where = f" at {self.tuple['topic']}[{self.tuple['partition']}]@{self.tuple['offset']}"
        return f"{self.component}: {self.reason}{where}{'' if self.retry else ' (no retry)'}"


def encode_failure(record: FailureRecord) -> bytes:
    return json.dumps({"v": FAILURE_FORMAT, **asdict(record)}, separators=(",", ":")).encode()


def decode_failure(raw: bytes | None) -> FailureRecord | None:
    """The record, or None for bytes that are not a failure record (logged, never raised)."""
    try:
        datum = json.loads(raw)  # type: ignore[arg-type]  # None: a TypeError, logged below
        return FailureRecord(
            roots=[int(r) for r in datum["roots"]],
            component=str(datum["component"]),
            reason=str(datum["reason"]),
            task_id=int(datum.get("task_id", 0)),
            error_type=datum.get("error_type"),
            error_message=datum.get("error_message"),
            retry=bool(datum.get("retry", True)),
            tuple=datum.get("tuple"),
            at_ms=int(datum.get("at_ms", -1)),
            host=datum.get("host"),
            pid=datum.get("pid"),
            frames=datum.get("frames"),
        )
    except (TypeError, ValueError, KeyError) as exc:
        log.warning("not a failure record (%s): %r", exc, raw[:200] if raw else raw)
        return None


@dataclass
class Attempt:
    """One attempt of a source record: its root, how it ended, and the failures reported for it."""

    attempt: int
    root: int | None
    outcome: str  # FAILED, TIMED_OUT, backstop timeout, handler error
    at_ms: int
    failures: list[dict[str, Any]] = field(default_factory=list)  # FailureRecord fields

    def reasons(self) -> list[str]:
        return [f["reason"] for f in self.failures]

    @property
    def poison(self) -> bool:
        return any(not f.get("retry", True) for f in self.failures)


def encode_attempts(attempts: list[Attempt]) -> bytes:
    """The ``rk-attempts`` header: the newest attempts that fit in 16 kB."""
    kept = list(attempts)
    while True:
        raw = json.dumps([asdict(a) for a in kept], separators=(",", ":")).encode()
        if len(raw) <= _MAX_ATTEMPTS_HEADER or len(kept) <= 1:
            return raw
        kept = kept[1:]


def decode_attempts(raw: bytes | None) -> list[Attempt]:
    if not raw:
        return []
    try:
        return [Attempt(**item) for item in json.loads(raw)]
    except (TypeError, ValueError) as exc:
        log.warning("rk-attempts header does not decode (%s)", exc)
        return []


def attempt_headers(attempts: list[Attempt]) -> list[tuple[str, bytes]]:
    """``rk-attempts`` and ``rk-reason`` (the last attempt's first reason, else its outcome)."""
    if not attempts:
        return []
    last = attempts[-1]
    reason = last.failures[0]["reason"] if last.failures else last.outcome
    return [(ATTEMPTS_HEADER, encode_attempts(attempts)), (REASON_HEADER, reason.encode())]


class FailureLog:
    """Writes failure records with a component's producer (only called when something fails).

    A record that cannot be delivered is logged and dropped: it explains a failure, it is not the
    failure itself (the FAIL entry on the ack topic is what replays the tree).
    """

    def __init__(self, producer: Producer, *, topic: str, component: str, task_id: int) -> None:
        self.producer = producer
        self.topic = topic
        self.component = component
        self.task_id = task_id
        self.written = 0
        self.unflushed = False  # written since the component last flushed its producer

    def write(self, record: FailureRecord) -> None:
        key = str(record.roots[0]).encode() if record.roots else None
        try:
            self.producer.produce(self.topic, encode_failure(record), key=key, on_delivery=self._delivered)
            self.written += 1
            self.unflushed = True
        except BufferError:
            log.warning("%s: failure record for %s dropped: producer queue full", self.component, record.roots)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        from reliable_kafka.kafka.authorization import check_delivery

        check_delivery(error, message, self.producer)  # refused: a permission is missing; stop
        if error is not None:
            log.warning("%s: failure record not written to %s: %s", self.component, self.topic, error)


class FailureIndex:
    """A spout's view of ``<topology>.failures``: failure records by root, read on demand.

    No consumer exists until the first :meth:`take` (the first FAILED outcome); it then starts at
    the offsets of ``since_ms`` (the spout's start) and each ``take`` reads up to the end offsets
    of that moment. Records for roots not asked for are kept, newest ``max_roots`` only (they may
    belong to another spout, or arrive before their FAILED outcome).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str,
        group_id: str,
        kafka_config: dict[str, Any] | None = None,
        since_ms: int | None = None,
        max_roots: int = 50_000,
        clients: KafkaClients | None = None,
        clock: Clock = time,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.clients = clients  # a reliable_kafka.kafka.factory.KafkaClients, None: confluent-kafka
        self.topic = topic
        self.group_id = group_id
        self.kafka_config = kafka_config
        self._clock = clock
        self.since_ms = _now_ms(clock) if since_ms is None else since_ms
        self.max_roots = max_roots
        self._by_root: OrderedDict[int, list[FailureRecord]] = OrderedDict()
        self._consumer: Consumer | None = None
        self._next: dict[int, int] = {}
        self._caught_up = float("-inf")
        self._caught_up_round: int | None = None

    def take(self, roots: Collection[int], *, round_: int | None = None) -> dict[int, list[FailureRecord]]:
        """The failure records of ``roots`` (removed from the index); catches up first when one is
        missing, at most once per ``round_`` (the caller's batch of outcomes: bolts flush a failure
        record before they send its FAIL, so one catch-up after the outcome arrived finds it, and a
        storm of failures costs one round trip a batch). Without ``round_``, at most every 50 ms."""
        if round_ is not None:
            due = round_ != self._caught_up_round
        else:
            due = self._clock.monotonic() - self._caught_up > 0.05
        if any(root not in self._by_root for root in roots) and due:
            self._caught_up_round = round_
            try:
                self._catch_up()
            except Exception as exc:  # a missing topic or an away broker: the reason stays unknown
                if isinstance(exc, AuthorizationError):
                    raise  # a missing permission: the spout stops and says which (docs/design.md section 10)
                log.warning("failure records of %s not read: %s", self.topic, exc)
            self._caught_up = self._clock.monotonic()
        return {root: self._by_root.pop(root) for root in roots if root in self._by_root}

    def _open(self) -> Consumer:
        from confluent_kafka import TopicPartition

        from reliable_kafka.kafka.clients import new_consumer

        consumer = new_consumer(self.bootstrap_servers, self.group_id, self.kafka_config, clients=self.clients)
        metadata = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            consumer.close()
            raise TopologyError(
                f"failure records: topic {self.topic} does not exist; the topology's topics are "
                "created by its spouts and acker workers (or ensure_topics)"
            )
        wanted = [TopicPartition(self.topic, p, self.since_ms) for p in metadata.partitions]
        starts = consumer.offsets_for_times(wanted, timeout=10)
        positions = []
        for tp in starts:
            if tp.offset < 0:  # nothing written since since_ms: start at the end
                tp.offset = consumer.get_watermark_offsets(TopicPartition(self.topic, tp.partition), timeout=10)[1]
            positions.append(TopicPartition(self.topic, tp.partition, tp.offset))
        consumer.assign(positions)
        self._next = {tp.partition: tp.offset for tp in positions}
        self._consumer = consumer
        return consumer

    def _catch_up(self, timeout: float = 5.0) -> None:
        from confluent_kafka import TopicPartition

        from reliable_kafka.kafka.authorization import check_consumed
        from reliable_kafka.polling import consume_batch

        consumer = self._consumer or self._open()
        ends: dict[int, int] = {}
        for partition in self._next:
            ends[partition] = consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=timeout, cached=False
            )[1]
        deadline = self._clock.monotonic() + timeout
        while any(self._next[p] < end for p, end in ends.items()) and self._clock.monotonic() < deadline:
            # what is fetched already, else the first record to arrive: the spout's loop waits
            # here, so never for a batch to fill (consume(500, 0.2) held it 0.2 s a FAILED outcome,
            # and the records behind it were read in clumps)
            for message in consume_batch(consumer, 500, 0.02):
                read_from, offset = message.partition(), message.offset()
                if message.error() is not None:
                    check_consumed(message, consumer)
                if message.error() is not None or read_from is None or offset is None:
                    continue
                self._next[read_from] = offset + 1
                record = decode_failure(message.value())
                if record is not None:
                    for root in record.roots:
                        self._by_root.setdefault(root, []).append(record)
                        self._by_root.move_to_end(root)
            while len(self._by_root) > self.max_roots:
                self._by_root.popitem(last=False)
            # a transaction marker (failure records of transactional bolts) takes the last offset
            # and is never a message: the consumer's position passes it
            for tp in consumer.position([TopicPartition(self.topic, p) for p in self._next]):
                if tp.offset > self._next[tp.partition]:
                    self._next[tp.partition] = tp.offset

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
