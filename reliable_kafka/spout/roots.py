"""The roots a spout owns: the one core that the Python, transactional and Spark spouts compose.

A spout reads source records and commits; everything between is the same for all three and lives
here (DESIGN 5 and 9): the in-flight tracker, the outcome listener, acting on outcomes (done,
redeliver, dead-letter), why an attempt failed (``reliable_kafka.ops.failures``), the dead-letter
writes and their guard, the root index that ``reliable-kafka trace`` reads, and the commit point
with its metadata. A spout tells :class:`RootOwner` only what differs: how a record it no longer
holds is read again (``reread``) and how commit metadata is written (``encode_metadata``).

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

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, cast

from confluent_kafka import TopicPartition

from reliable_kafka.codec import ParkedRecord
from reliable_kafka.core.clock import Clock
from reliable_kafka.core.commit_metadata import decode_done_above, encode_done_above
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import ActionKind, InFlightTracker, OutcomeAction
from reliable_kafka.errors import ConfigError, DeadLetterGuardTripped, DecodeError
from reliable_kafka.kafka.outcomes import OutcomeListener
from reliable_kafka.kafka.parking import Quarantine, park, park_reference
from reliable_kafka.ops.failures import Attempt, FailureIndex, FailureRecord, attempt_headers
from reliable_kafka.ops.trace import RootIndex
from reliable_kafka.spout.reread import DELETED
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = ["RootOwner", "RootStats", "POISON_PILL", "GONE_REASON", "check_guard_config"]

log = logging.getLogger(__name__)
_DONE = ActionKind.DONE  # an enum member read through its class is ~0.17 us on 3.11: once per root
_COMPLETED = OutcomeKind.COMPLETED

POISON_PILL = "POISON_PILL"  # the dead-letter reason of a record a component failed with retry=False
GONE_REASON = "deleted from Kafka (retention) while in flight"  # the reason of a dead-letter reference
TopicPartitionKey = tuple[str, int]
RecordKey = tuple[TopicPartitionKey, int]


@dataclass
class RootStats:
    """The counters :class:`RootOwner` keeps; a spout may hand in its own stats object with these
    fields instead (the Python spouts' ``SpoutStats`` does)."""

    completed: int = 0
    dead_lettered: int = 0
    metadata_truncated: int = 0
    expired_in_flight: int = 0  # deleted by Kafka before it could be read again (a reference was parked)
    committed: dict[TopicPartitionKey, int] = field(default_factory=dict)


def check_guard_config(component: str, max_dead_letter_ratio: float | None, dead_letter_window: int) -> None:
    if max_dead_letter_ratio is not None and not 0 <= max_dead_letter_ratio < 1:
        raise ConfigError(f"{component}: max_dead_letter_ratio must be in [0, 1) or None, got {max_dead_letter_ratio}")
    if dead_letter_window < 1:
        raise ConfigError(f"{component}: dead_letter_window must be >= 1, got {dead_letter_window}")


class RootOwner:
    """Tracker, outcomes, redelivery, dead letters, their guard, root index and commit point.

    ``records`` maps ``((topic, partition), offset)`` to the source record (anything with topic,
    partition, offset, key, value, headers and timestamp_ms) while its root is in flight; a spout
    that does not keep records gives ``reread(keys)``, which puts them there when a dead letter
    needs one (a record it cannot find because Kafka deleted it is counted and marked done by it).
    ``lock`` (optional) guards the tracker when several threads share it (the Spark driver).
    ``clock`` (:mod:`reliable_kafka.core.clock`) stamps attempts and dead letters; the tracker has its own.
    ``read_failure_reasons``: look up why a root FAILED in ``<topology>.failures`` (a consumer made
    at the first FAILED outcome); without it, only local failures give reasons.
    """

    def __init__(
        self,
        *,
        component: str,
        topics: TopologyTopics,
        tracker: InFlightTracker,
        bootstrap_servers: str,
        kafka_config: dict,
        clients=None,
        stats=None,
        reread: Callable[[list[RecordKey]], None] | None = None,
        encode_metadata: Callable[[TopicPartitionKey, int], tuple[str, bool]] | None = None,
        max_dead_letter_ratio: float | None = None,
        dead_letter_window: int = 1000,
        reason_with_attempts: bool = True,
        read_failure_reasons: bool = True,
        on_completed: Callable[[object], None] | None = None,
        lock=None,
        clock: Clock = time,
    ) -> None:
        check_guard_config(component, max_dead_letter_ratio, dead_letter_window)
        self.component = component
        self.topics = topics
        self.tracker = tracker
        self.bootstrap_servers = bootstrap_servers
        self.kafka_config = kafka_config
        self.clients = clients  # the component's client factory (None: confluent-kafka)
        self._clock = clock
        self.stats = stats if stats is not None else RootStats()
        self.records: dict[RecordKey, object] = {}
        self.producer: Producer | None = None  # set by use_producer before anything is written
        self.listener: OutcomeListener | None = None
        self.root_index: RootIndex | None = None
        self.max_dead_letter_ratio = max_dead_letter_ratio
        self.dead_letter_window = dead_letter_window
        self.guard_tripped: DeadLetterGuardTripped | None = None
        self.reread = reread  # how a record not held is read again (None: it cannot be)
        self.encode_metadata = encode_metadata or self._done_above_metadata  # how commit metadata is written
        self._reason_with_attempts = reason_with_attempts  # Spark jobs write the bare outcome, as before
        self._read_failure_reasons = read_failure_reasons  # from <topology>.failures, after a FAILED outcome
        self._on_completed = on_completed
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._committed: dict[TopicPartitionKey, tuple[int, str]] = {}
        # failures only (reliable_kafka.ops.failures): attempt histories, why roots failed locally
        self._attempts: dict[RecordKey, list[Attempt]] = {}
        self._local_reasons: dict[int, FailureRecord] = {}
        self._outcome_round = 0
        self._failure_index: FailureIndex | None = None
        self._started_ms = int(clock.time() * 1000)
        self._bound: list[OutcomeAction] = []  # bound for the DLQ, not written yet
        self._unconfirmed: list[_DeadLetterWrite] = []  # written, delivery not known yet
        self._gone: set[RecordKey] = set()  # bound for the DLQ, but Kafka deleted the record: a reference
        self._dead_letter_marks: deque[int] = deque()  # settled count when each dead letter was bound
        self._dead_letters_bound = 0

    # --- clients --------------------------------------------------------------------------------

    def use_producer(self, producer: Producer | None) -> None:
        """The producer for dead letters, quarantine copies and the root index (also a replacement)."""
        self.producer = producer
        if self.listener is not None and self.listener.quarantine is not None:
            self.listener.quarantine.producer = cast("Producer", producer)
        if self.root_index is not None:
            self.root_index.producer = producer

    def listen(self, spout_id: int | None) -> OutcomeListener:
        """Start reading outcomes (for ``spout_id``, or for owners followed later): before any INIT."""
        self.listener = OutcomeListener(
            bootstrap_servers=self.bootstrap_servers,
            topics=self.topics,
            spout_id=spout_id,
            kafka_config=self.kafka_config,
            clients=self.clients,
            clock=self._clock,
            quarantine=Quarantine(
                cast("Producer", self.producer),  # set by use_producer
                topic=self.topics.quarantine,
                component=self.component,
            ),
        )
        self.listener.start()
        return self.listener

    def index_roots(self, spout_id: int) -> None:
        """Write (offset, root) pairs to ``<topology>.roots`` with each INIT batch (16 bytes a root)."""
        self.root_index = RootIndex(self.producer, topic=self.topics.roots, spout_id=spout_id)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        if self._failure_index is not None:
            self._failure_index.close()

    # --- emission -------------------------------------------------------------------------------

    def track(self, key: TopicPartitionKey, offset: int, root: int, attempt: int, record=None) -> None:
        """``root`` now stands for the record at ``key``@``offset`` (its INIT is the spout's)."""
        self.tracker.emitted(key, offset, root=root, attempt=attempt)
        if record is not None:
            self.records[(key, offset)] = record
        if self.root_index is not None:
            self.root_index.add(key, offset, root)

    def track_many(self, key: TopicPartitionKey, offsets: list[int], roots: list[int], attempt: int) -> None:
        """:meth:`track` for a batch of records of ``key`` (no records kept)."""
        self.tracker.emitted_many(key, offsets, roots, attempt=attempt)
        if self.root_index is not None:
            for offset, root in zip(offsets, roots):
                self.root_index.add(key, offset, root)

    def fail_locally(self, root: int, failure: FailureRecord | None = None) -> None:
        """Fail ``root`` here (a handler raised, a batch failed), with why, as an acker's FAILED."""
        with self._lock:
            if failure is not None:
                self._local_reasons[root] = failure
            self.act(self.tracker.on_outcome(root, OutcomeKind.FAILED))

    # --- outcomes -------------------------------------------------------------------------------

    def take_outcomes(self, timeout: float = 0.0, *, max_records: int = 500) -> None:
        """Act on the outcomes that arrived and on roots past the backstop timeout."""
        outcomes = self.listener.poll(timeout, max_records=max_records) if self.listener is not None else ()
        with self._lock:
            self._outcome_round += 1  # reasons of this batch's FAILED outcomes are read at most once
            tracker = self.tracker
            completed: list[int] = []  # a run of COMPLETED roots, done together (in order with the rest)
            for root, kind in outcomes:
                if kind is _COMPLETED:
                    completed.append(root)
                    continue
                if completed:
                    self._done_many(tracker.complete_many(completed))
                    completed = []
                self.act(tracker.on_outcome(root, kind))
            if completed:
                self._done_many(tracker.complete_many(completed))
            for action in self.tracker.expire_backstop():
                self.act(action)

    def act(self, action: OutcomeAction | None) -> None:
        """Done, scheduled for redelivery (the tracker keeps the schedule) or bound for the DLQ."""
        if action is None:
            return
        if action.kind is _DONE:
            self._done(action.tp, action.offset, action.attempt)
            return
        if action.reason != POISON_PILL:  # a poison pill's attempt was noted when it failed
            given_up = self._note_attempt(action)
            if given_up is not None:
                self.act(given_up)
                return
        if action.kind is ActionKind.DEAD_LETTER and (
            self.max_dead_letter_ratio is None or self._dead_letter_allowed()
        ):
            self._bound.append(action)

    def _done(self, tp: TopicPartitionKey, offset: int, attempt: int) -> None:
        """The record at ``tp``@``offset`` is done (its tree completed): forget it."""
        self.stats.completed += 1
        record_key = (tp, offset)
        record = self.records.pop(record_key, None)
        if record is not None and self._on_completed is not None:
            self._on_completed(record)
        if attempt > 1:
            self._attempts.pop(record_key, None)

    def _done_many(self, entries) -> None:
        """:meth:`_done` for each tracker entry whose tree completed (one outcome batch)."""
        self.stats.completed += len(entries)
        pop, on_completed, attempts = self.records.pop, self._on_completed, self._attempts
        for entry in entries:
            record_key = (entry.tp, entry.offset)
            record = pop(record_key, None)
            if record is not None and on_completed is not None:
                on_completed(record)
            if entry.attempt > 1:
                attempts.pop(record_key, None)

    def _note_attempt(self, action: OutcomeAction) -> OutcomeAction | None:
        """Failure path only: remember why this attempt ended. A poison pill skips its retries: the
        DEAD_LETTER action that replaces its REDELIVER is returned."""
        failures: list[FailureRecord] = []
        if action.root is not None:
            local = self._local_reasons.pop(action.root, None)
            if local is not None:
                failures = [local]
            elif action.reason == "FAILED" and self._read_failure_reasons:
                if self._failure_index is None:
                    self._failure_index = FailureIndex(
                        bootstrap_servers=self.bootstrap_servers,
                        topic=self.topics.failures,
                        group_id=f"{self.topics.topology}.failure-reader",
                        kafka_config=self.kafka_config,
                        clients=self.clients,
                        since_ms=self._started_ms - 60_000,
                        clock=self._clock,
                    )
                failures = self._failure_index.take([action.root], round_=self._outcome_round).get(action.root, [])
        attempt = Attempt(
            action.attempt, action.root, action.reason, int(self._clock.time() * 1000), [asdict(f) for f in failures]
        )
        self._attempts.setdefault((action.tp, action.offset), []).append(attempt)
        if action.kind is ActionKind.REDELIVER and attempt.poison:
            return self.tracker.give_up(action.tp, action.offset, POISON_PILL)
        return None

    # --- dead letters ---------------------------------------------------------------------------

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
                    self._park(record, action)
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
        write = _DeadLetterWrite(None, action)

        def failed(error, message, write=write):
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

    def _park(self, record, action: OutcomeAction) -> None:
        write = _DeadLetterWrite(record, action)

        def failed(error, message, write=write):
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

    # --- partitions and commits -----------------------------------------------------------------

    def restore(
        self, key: TopicPartitionKey, committed: int | None, metadata: str | None, *, recorded: bool = True
    ) -> None:
        """Track ``key`` from its committed offset, skipping what the metadata records as done above it;
        ``recorded``: that offset is in the group (not only where reading starts)."""
        done_above: list[int] = []
        if committed is not None and metadata:
            try:
                done_above = decode_done_above(committed, metadata)
            except DecodeError as error:
                log.warning("%s: ignoring commit metadata of %s[%s]: %s", self.component, *key, error)
        with self._lock:
            self.tracker.assign(key, committed=committed, done_above=done_above)
            if committed is not None and recorded:
                self._committed[key] = (committed, metadata or "")

    def forget(self, key: TopicPartitionKey) -> None:
        """``key`` was revoked: its roots, records and history go (the next owner replays them)."""
        with self._lock:
            self.tracker.revoke(key)
            self._committed.pop(key, None)
            self._bound = [action for action in self._bound if action.tp != key]
            self._gone = {gone for gone in self._gone if gone[0] != key}
            for record_key in [k for k in self.records if k[0] == key]:
                del self.records[record_key]
            for record_key in [k for k in self._attempts if k[0] == key]:
                del self._attempts[record_key]

    def offsets_to_commit(
        self, *, only: Iterable[TopicPartitionKey] | None = None, changed_only: bool = True
    ) -> list[TopicPartition]:
        """The commit points (with metadata) to commit: every offset below each one is done."""
        only = None if only is None else set(only)
        offsets = []
        with self._lock:
            for key, point in self.tracker.commit_points().items():
                if only is not None and key not in only:
                    continue
                metadata, truncated = self.encode_metadata(key, point)
                if changed_only and self._committed.get(key) == (point, metadata):
                    continue
                self.stats.metadata_truncated += truncated
                offsets.append(TopicPartition(key[0], key[1], point, metadata))
        return offsets

    def committed(self, offsets: list[TopicPartition]) -> None:
        """``offsets`` (from :meth:`offsets_to_commit`) are in the group now."""
        with self._lock:
            for tp in offsets:
                key = (tp.topic, tp.partition)
                self._committed[key] = (tp.offset, tp.metadata or "")
                self.stats.committed[key] = tp.offset

    def commit_failed(self, key: TopicPartitionKey, offset: int) -> None:
        """An asynchronous commit of ``offset`` did not land: the next commit sends it again."""
        with self._lock:
            if key in self._committed and self._committed[key][0] == offset:
                del self._committed[key]

    def committed_offsets(self) -> dict[TopicPartitionKey, int]:
        return {key: offset for key, (offset, _) in self._committed.items()}

    def _done_above_metadata(self, key: TopicPartitionKey, point: int) -> tuple[str, bool]:
        return encode_done_above(point, self.tracker.done_above(key))


class _DeadLetterWrite:
    __slots__ = ("record", "action", "failed")

    def __init__(self, record, action: OutcomeAction) -> None:
        self.record, self.action, self.failed = record, action, False  # record None: a reference

    @property
    def key(self) -> tuple[str, int, int]:
        return (*self.action.tp, self.action.offset)
