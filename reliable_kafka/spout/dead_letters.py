"""The dead-letter path of :class:`~reliable_kafka.spout.roots.RootOwner`: the guard, the writes to
``<topology>.dlq`` and their confirmation (docs/design.md section 5 and 9).

Dead letters take three steps, so that each spout confirms them its own way: :meth:`act` binds a
record for the DLQ (the guard counts it), :meth:`write_dead_letters` parks it, and
:meth:`dead_letters_delivered` counts it done once the spout knows the write reached the broker
(a flush). Until then the record stays pending: never committed past. A transactional spout marks it
done before its commit instead (:meth:`settle_dead_letters`): the write and the commit past it are
one transaction.
A record bound for the DLQ that Kafka deleted meanwhile (retention, ``delete_records``) is parked as
a reference (:meth:`gone`): its coordinates, attempts and reason, no value; confirmed the same way.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any, cast

from reliable_kafka.codec import ParkedRecord
from reliable_kafka.config import DEAD_LETTER_RATIO, DEAD_LETTER_WINDOW
from reliable_kafka.core.clock import Clock
from reliable_kafka.core.tracker import InFlightTracker, OutcomeAction
from reliable_kafka.errors import DeadLetterGuardTripped
from reliable_kafka.kafka.parking import park, park_reference
from reliable_kafka.ops.failures import Attempt, attempt_headers
from reliable_kafka.spout.reread import DELETED
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

    from reliable_kafka.spout.records import SourceRecord

__all__ = [
    "DeadLetters",
    "POISON_PILL",
    "GONE_REASON",
    "DEAD_LETTER_RATIO",
    "DEAD_LETTER_WINDOW",
]

log = logging.getLogger("reliable_kafka.spout.roots")  # the owner's logger, as before the split

POISON_PILL = "POISON_PILL"  # the dead-letter reason of a record a component failed with retry=False
GONE_REASON = "deleted from Kafka (retention) while in flight"  # the reason of a dead-letter reference
TopicPartitionKey = tuple[str, int]
RecordKey = tuple[TopicPartitionKey, int]


# The dead-letter guard's defaults live with the rest of Tracking's (reliable_kafka.config).


class DeadLetters:
    """The dead-letter methods of :class:`~reliable_kafka.spout.roots.RootOwner` (its base), over
    the owner's state, which ``RootOwner.__init__`` sets."""

    component: str
    topics: TopologyTopics
    tracker: InFlightTracker
    stats: Any  # RootStats, or a spout's own stats object with its fields
    records: MutableMapping[RecordKey, object]
    producer: Producer | None
    reread: Callable[[list[RecordKey]], None] | None
    max_dead_letter_ratio: float | None
    dead_letter_window: int
    guard_tripped: DeadLetterGuardTripped | None
    _clock: Clock
    _lock: Any
    _reason_with_attempts: bool
    _attempts: dict[RecordKey, list[Attempt]]
    _bound: list[OutcomeAction]
    _unconfirmed: list[DeadLetterWrite]
    _gone: set[RecordKey]
    _dead_letter_marks: deque[int]
    _dead_letters_bound: int

    def raise_if_guard_tripped(self) -> None:
        if self.guard_tripped is not None:
            raise self.guard_tripped

    def _dead_letter_allowed(self) -> bool:
        """The guard, counted only when a record is bound for the DLQ (no cost on the happy path):
        False, and tripped, when this one would make more than ``max_dead_letter_ratio`` of the last
        ``dead_letter_window`` settled records (completed or dead-lettered). A record refused here
        stays pending: uncommitted, read again when the spout restarts."""
        if self.guard_tripped is not None:
            return False
        self._dead_letters_bound += 1
        settled = self.tracker.stats.completed + self._dead_letters_bound
        marks = self._dead_letter_marks
        marks.append(settled)
        while marks[0] <= settled - self.dead_letter_window:
            marks.popleft()
        ratio = cast(float, self.max_dead_letter_ratio)  # only called when a ratio is set
        if len(marks) <= ratio * self.dead_letter_window:
            return True
        self.guard_tripped = DeadLetterGuardTripped(
            f"{self.component}: {len(marks)} of the last {self.dead_letter_window} settled records were bound for "
            f"{self.topics.dlq} (max_dead_letter_ratio={self.max_dead_letter_ratio}); stopped so that a bad "
            f"deploy does not divert the stream. See why with `reliable-kafka dlq list --topology "
            f"{self.topics.topology} --bootstrap-servers ...`, fix the cause and restart the spout (records not "
            f"dead-lettered are read again), then `dlq replay` what should not have been parked",
            component=self.component,
            dead_letters=len(marks),
            window=self.dead_letter_window,
        )
        return False

    @property
    def dead_letters_waiting(self) -> bool:
        """True while a record is bound for the DLQ and not confirmed written."""
        return bool(self._bound or self._unconfirmed)

    def bound_for_dead_letters(self) -> list[RecordKey]:
        return [(action.tp, action.offset) for action in self._bound]

    def write_dead_letters(self) -> int:
        """Park every record bound for the DLQ; returns how many were written (not confirmed).

        Records not held are read again first (``reread``); if that raises, nothing is taken off
        the queue and the caller tries again later.
        """
        with self._lock:
            if not self._bound:
                return 0
            held = self.records.keys() | self._gone  # a record deleted by Kafka is not read again
            missing = [key for key in self.bound_for_dead_letters() if key not in held]
        if missing and self.reread is not None:
            self.reread(missing)
        with self._lock:
            bound, self._bound = self._bound, []
            written = 0
            for action in bound:
                record = self.records.get((action.tp, action.offset))
                if record is not None:
                    self._park(cast("SourceRecord", record), action)  # held records are source records
                elif (action.tp, action.offset) in self._gone:
                    self._park_reference(action)
                else:  # revoked meanwhile, or no record at that offset (a transaction marker: done)
                    continue
                written += 1
            return written

    def gone(self, key: TopicPartitionKey, offset: int, why: str) -> None:
        """A ``SourceRereader``'s ``gone`` for a spout whose dead letters go through this owner: a
        record bound for the DLQ is no longer in Kafka. One Kafka deleted (``why`` is ``DELETED``)
        is parked as a reference by :meth:`write_dead_letters` and done once that is delivered; an
        offset that holds no record (a transaction marker) is done at once, without a dead letter."""
        with self._lock:
            if why == DELETED:
                self._gone.add((key, offset))
                return
            log.info("%s: %s[%s]@%s %s; done, nothing to dead-letter", self.component, *key, offset, why)
            self.tracker.done_immediately(key, offset)

    def dead_letter_gone(self, key: TopicPartitionKey, offset: int) -> bool:
        """A record waiting for its redelivery that Kafka deleted (the shell read it again and did
        not find it below the low watermark): bound for the DLQ as a reference, which passes no
        guard (it diverts nothing). False when ``offset`` is not waiting for a redelivery."""
        with self._lock:
            action = self.tracker.give_up(key, offset, GONE_REASON)
            if action is None:
                return False
            self._gone.add((key, offset))
            self._bound.append(action)
            return True

    def _park_reference(self, action: OutcomeAction) -> None:
        """Park a reference to a record Kafka deleted while in flight (:func:`park_reference`)."""
        write = DeadLetterWrite(None, action)

        def failed(error: KafkaError | None, message: Message, write: DeadLetterWrite = write) -> None:
            if error is not None:
                log.error("%s: reference to %s[%s]@%s not written (%s); retrying", self.component, *write.key, error)
                write.failed = True

        log.error(
            "%s: %s[%s]@%s was deleted from Kafka while in flight, after %d attempt(s); parked a reference in %s",
            self.component,
            *write.key,
            action.attempt,
            self.topics.dlq,
        )
        park_reference(
            cast("Producer", self.producer),
            self.topics.dlq,
            parked=ParkedRecord(
                reason=GONE_REASON,
                attempts=action.attempt,
                source_topic=action.tp[0],
                source_partition=action.tp[1],
                source_offset=action.offset,
                component=self.component,
                parked_at_ms=int(self._clock.time() * 1000),
            ),
            headers=self.history_headers(action.tp, action.offset),
            on_delivery=failed,
        )
        self._unconfirmed.append(write)

    def history_headers(self, key: TopicPartitionKey, offset: int) -> list[tuple[str, bytes]]:
        """``rk-attempts`` and ``rk-reason`` of the record at ``key``@``offset``: its attempts seen here."""
        return attempt_headers(self._attempts.get((key, offset), []))

    def _park(self, record: SourceRecord, action: OutcomeAction) -> None:
        write = DeadLetterWrite(record, action)

        def failed(error: KafkaError | None, message: Message, write: DeadLetterWrite = write) -> None:
            if error is not None:
                log.error(
                    "%s: dead letter for %s[%s]@%s not written (%s); retrying",
                    self.component,
                    record.topic,
                    record.partition,
                    record.offset,
                    error,
                )
                write.failed = True

        reason = f"{action.reason} after {action.attempt} attempts" if self._reason_with_attempts else action.reason
        why = self.history_headers(action.tp, action.offset)
        log.warning(
            "%s: %s[%s]@%s %s; parked in %s",
            self.component,
            record.topic,
            record.partition,
            record.offset,
            reason,
            self.topics.dlq,
        )
        park(
            cast("Producer", self.producer),
            self.topics.dlq,
            key=record.key,
            value=record.value,
            headers=list(record.headers or []) + why,
            parked=ParkedRecord(
                reason=reason,
                attempts=action.attempt,
                source_topic=record.topic,
                source_partition=record.partition,
                source_offset=record.offset,
                source_timestamp_ms=record.timestamp_ms,
                component=self.component,
                parked_at_ms=int(self._clock.time() * 1000),
            ),
            on_delivery=failed,
        )
        self._unconfirmed.append(write)

    def confirm_dead_letters(self, timeout: float) -> bool:
        """Count dead letters done once the producer has delivered everything sent before them.

        Delivery reports may be for failures only (``ERRORS_ONLY``): a flush that leaves nothing
        queued means every earlier write was delivered or reported failed. Dead letters are rare,
        so the flush costs nothing on the hot path; until it succeeds they stay pending.
        """
        if not self._unconfirmed or cast("Producer", self.producer).flush(timeout) > 0:
            return not self._unconfirmed
        self.dead_letters_delivered()
        return True

    def settle_dead_letters(self) -> None:
        """For a spout whose dead letters and commit are one transaction: the records of the dead
        letters written count as done now, so that the commit computed next passes them in that
        same transaction (committed after it, a crash between the two would park them again). An
        abort drops both: the spout rebuilds its tracker from the last commit. They are counted by
        :meth:`dead_letters_delivered` once the transaction committed."""
        with self._lock:
            for write in self._unconfirmed:
                if not write.failed:  # a failed write fails the transaction's commit too
                    self.tracker.dead_lettered(write.action.tp, write.action.offset)

    def dead_letters_delivered(self) -> None:
        """Everything written so far reached the broker (flushed, or its transaction committed);
        writes reported failed are bound again."""
        with self._lock:
            writes, self._unconfirmed = self._unconfirmed, []
            confirmed = 0
            for write in writes:
                if write.failed:
                    self._bound.append(write.action)
                    continue
                key = (write.action.tp, write.action.offset)
                if write.record is None:  # a reference: the record was gone
                    self._gone.discard(key)
                    self.stats.expired_in_flight += 1
                else:
                    self.stats.dead_lettered += 1
                confirmed += 1
                self.tracker.dead_lettered(*key)
                self.records.pop(key, None)
                self._attempts.pop(key, None)

    def drop_dead_letters(self) -> None:
        """Their writes were aborted (a transaction): the spout rebuilds its state from the last commit."""
        with self._lock:
            self._bound, self._unconfirmed = [], []
            self._gone.clear()


class DeadLetterWrite:
    __slots__ = ("record", "action", "failed")

    def __init__(self, record: SourceRecord | None, action: OutcomeAction) -> None:
        self.record, self.action, self.failed = record, action, False  # record None: a reference

    @property
    def key(self) -> tuple[str, int, int]:
        return (*self.action.tp, self.action.offset)
