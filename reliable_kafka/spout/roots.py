"""The roots a spout owns: the one core that the Python, transactional and Spark spouts compose.

A spout reads source records and commits; everything between is the same for all three and lives
here (docs/design.md section 5 and 9): the in-flight tracker, the outcome listener, acting on outcomes (done,
redeliver, dead-letter), why an attempt failed (``reliable_kafka.ops.failures``), the dead-letter
writes and their guard, the root index that ``reliable-kafka trace`` reads, and the commit point
with its metadata. A spout tells :class:`RootOwner` only what differs: how a record it no longer
holds is read again (``reread``) and how commit metadata is written (``encode_metadata``).

The dead-letter path (the guard, the writes and their confirmation) is ``spout/dead_letters.py``,
the base of :class:`RootOwner`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from confluent_kafka import TopicPartition

from reliable_kafka.config import Connection, Tracking
from reliable_kafka.core.clock import Clock, monotonic_ms
from reliable_kafka.core.commit_metadata import decode_done_above, encode_done_above
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import ActionKind, InFlightTracker, OutcomeAction, Run
from reliable_kafka.errors import ArgumentError, DeadLetterGuardTripped, DecodeError
from reliable_kafka.kafka.outcomes import OutcomeListener
from reliable_kafka.kafka.parking import Quarantine
from reliable_kafka.ops.failures import Attempt, FailureIndex, FailureRecord
from reliable_kafka.spout.dead_letters import (
    GONE_REASON,
    POISON_PILL,
    DeadLetters,
    DeadLetterWrite,
    RecordKey,
    TopicPartitionKey,
)
from reliable_kafka.spout.root_index import RootIndex
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = ["RootOwner", "HeldRecords", "RootStats", "POISON_PILL", "GONE_REASON"]

log = logging.getLogger(__name__)
_COMPLETED_VALUE = int(OutcomeKind.COMPLETED)


@dataclass
class RootStats:
    """The counters :class:`RootOwner` keeps; a spout may hand in its own stats object with these
    fields instead (the Python spouts' ``SpoutStats`` does)."""

    completed: int = 0
    dead_lettered: int = 0
    metadata_truncated: int = 0
    expired_in_flight: int = 0  # deleted by Kafka before it could be read again (a reference was parked)
    committed: dict[TopicPartitionKey, int] = field(default_factory=dict)


class RootCounters(Protocol):
    """What :class:`RootOwner` counts into: a :class:`RootStats`, or a spout's own stats with its fields."""

    completed: int
    dead_lettered: int
    metadata_truncated: int
    expired_in_flight: int
    committed: dict[TopicPartitionKey, int]


class HeldRecords(MutableMapping[RecordKey, object]):
    """:attr:`RootOwner.records`: ``((topic, partition), offset)`` -> the source record, while its
    offset is pending. A record the spout tracked with its offset is kept by the tracker in its
    columns (no dict entry or key tuple a root) and made into a source record (``to_record``) only
    when asked for; records put here (read again by offset, for a dead letter) are in ``read_again``."""

    def __init__(self, tracker: InFlightTracker, to_record: Callable[[object], object] | None = None) -> None:
        self.read_again: dict[RecordKey, object] = {}
        self._tracker = tracker
        self._to_record = to_record

    def to_record(self, kept: object) -> object:
        return kept if self._to_record is None else self._to_record(kept)

    def __getitem__(self, key: RecordKey) -> object:
        record = self.read_again.get(key)
        if record is None:
            record = self._tracker.record(*key)
            if record is None:
                raise KeyError(key)
            record = self.to_record(record)
        return record

    def __contains__(self, key: object) -> bool:
        return key in self.read_again or self._tracker.record(*cast(RecordKey, key)) is not None

    def __setitem__(self, key: RecordKey, record: object) -> None:
        self.read_again[key] = record

    def __delitem__(self, key: RecordKey) -> None:
        found = self.read_again.pop(key, None) is not None
        if self._tracker.forget_record(*key) is None and not found:
            raise KeyError(key)

    def __iter__(self) -> Iterator[RecordKey]:
        keys = list(self.read_again)
        seen = set(keys)
        keys.extend(key for key in self._tracker.records_held() if key not in seen)
        return iter(keys)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class RootOwner(DeadLetters):
    """Tracker, outcomes, redelivery, dead letters, their guard, root index and commit point.

    ``records`` maps ``((topic, partition), offset)`` to the source record (anything with topic,
    partition, offset, key, value, headers and timestamp_ms) while its root is in flight; a spout
    that does not keep records gives ``reread(keys)``, which puts them there when a dead letter
    needs one (a record it cannot find because Kafka deleted it is counted and marked done by it).
    ``lock`` (optional) guards the tracker when several threads share it (the Spark driver).
    ``tracking`` (:class:`~reliable_kafka.config.Tracking`): the owner builds the in-flight tracker
    from it (``owner.tracker``; the spout keeps none of its own) and guards dead letters by it.
    ``connection``: how the outcome listener, the dead-letter writes and the root index reach Kafka.
    ``clock`` (:mod:`reliable_kafka.core.clock`) stamps attempts and dead letters and times the tracker.
    ``on_completed(records)``: called with the held records whose trees completed, a list per outcome batch.
    ``to_record``: makes what the spout kept with an offset (``track_many(records=...)``, e.g. the
    consumed message) into its source record, when one is asked for (:class:`HeldRecords`).
    ``read_failure_reasons``: look up why a root FAILED in ``<topology>.failures`` (a consumer made
    at the first FAILED outcome); without it, only local failures give reasons.
    """

    def __init__(
        self,
        *,
        component: str,
        topics: TopologyTopics,
        connection: Connection,
        tracking: Tracking,
        stats: RootCounters | None = None,
        reread: Callable[[list[RecordKey]], None] | None = None,
        encode_metadata: Callable[[TopicPartitionKey, int], tuple[str, bool]] | None = None,
        reason_with_attempts: bool = True,
        read_failure_reasons: bool = True,
        on_completed: Callable[[list[Any]], None] | None = None,  # the records as to_record made them
        to_record: Callable[[object], object] | None = None,
        lock: AbstractContextManager[object] | None = None,
        clock: Clock = time,
    ) -> None:
        self.component = component
        self.topics = topics
        # the owner's tracker: the spout reaches it here (owner.tracker), it keeps no copy of its own
        self.tracker = InFlightTracker(
            max_pending=tracking.max_pending,
            max_retries=tracking.max_retries,
            backoff=tracking.backoff,
            message_timeout_ms=tracking.message_timeout_ms,
            backstop_grace_ms=tracking.backstop_grace_ms,
            clock=monotonic_ms(clock),
        )
        self.bootstrap_servers = connection.bootstrap_servers
        self.kafka_config = connection.client_config()
        self.clients = connection.clients  # the component's client factory (None: confluent-kafka)
        self._clock = clock
        self.stats: RootCounters = stats if stats is not None else RootStats()
        self.records: HeldRecords = HeldRecords(self.tracker, to_record)
        self.producer: Producer | None = None  # set by use_producer before anything is written
        self.listener: OutcomeListener | None = None
        self.root_index: RootIndex | None = None
        self.max_dead_letter_ratio = tracking.max_dead_letter_ratio
        self.dead_letter_window = tracking.dead_letter_window
        self.guard_tripped: DeadLetterGuardTripped | None = None
        self.reread = reread  # how a record not held is read again (None: it cannot be)
        # outcomes of roots the tracker does not hold go here (None: ignored, counted by the tracker)
        self.on_unknown: Callable[[int, int], None] | None = None
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
        self._unconfirmed: list[DeadLetterWrite] = []  # written, delivery not known yet
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

    def track(self, key: TopicPartitionKey, offset: int, root: int, attempt: int, record: object = None) -> None:
        """``root`` now stands for the record at ``key``@``offset`` (its INIT is the spout's)."""
        self.tracker.emitted(key, offset, root=root, attempt=attempt, record=record)
        if self.root_index is not None:
            self.root_index.add(key, offset, root)

    def track_many(
        self,
        key: TopicPartitionKey,
        offsets: list[int],
        roots: list[int],
        attempt: int,
        records: Sequence[object] | None = None,
    ) -> None:
        """:meth:`track` for a batch of records of ``key``; ``records`` (one an offset, or None: none
        kept) are kept by the tracker with their offsets, in its columns."""
        self.tracker.emitted_many(key, offsets, roots, attempt=attempt, records=records)
        if self.root_index is not None:
            self.root_index.add_many(key, offsets, roots)

    def fail_locally(self, root: int, failure: FailureRecord | None = None) -> None:
        """Fail ``root`` here (a handler raised, a batch failed), with why, as an acker's FAILED."""
        with self._lock:
            if failure is not None:
                self._local_reasons[root] = failure
            self.act(self.tracker.on_outcome(root, OutcomeKind.FAILED))

    # --- outcomes -------------------------------------------------------------------------------

    def take_outcomes(self, timeout: float = 0.0, *, max_records: int = 500) -> None:
        """Act on the outcomes that arrived and on roots past the backstop timeout."""
        batches = self.listener.poll_batches(timeout, max_records=max_records) if self.listener is not None else ()
        with self._lock:
            self._outcome_round += 1  # reasons of this batch's FAILED outcomes are read at most once
            for roots, kinds in batches:
                if self.on_unknown is None:
                    self._apply(roots, kinds)
                else:
                    self._apply(*self._hand_over_unknown(roots, kinds))
            for action in self.tracker.expire_backstop():
                self.act(action)

    def apply_outcomes(self, roots: Sequence[int], kinds: np.ndarray) -> None:
        """Act on outcomes ``kinds[i]`` (OutcomeKind values) of ``roots[i]``, in order, as if they had
        just come from the ackers (a Spark single query's outcomes that came before their roots)."""
        with self._lock:
            self._apply(roots, kinds)

    def _apply(self, roots: Sequence[int], kinds: np.ndarray) -> None:
        tracker = self.tracker
        if not (kinds != _COMPLETED_VALUE).any():  # the usual record: its roots done with one call
            self._done_runs(tracker.complete_runs(roots))
            return
        completed: list[int] = []  # a run of COMPLETED roots, done together (in order with the rest)
        for root, kind in zip(roots, map(OutcomeKind, kinds.tolist())):
            if kind is OutcomeKind.COMPLETED:
                completed.append(root)
                continue
            if completed:
                self._done_runs(tracker.complete_runs(completed))
                completed = []
            self.act(tracker.on_outcome(root, kind))
        if completed:
            self._done_runs(tracker.complete_runs(completed))

    def _hand_over_unknown(self, roots: Sequence[int], kinds: np.ndarray) -> tuple[Sequence[int], np.ndarray]:
        """The outcomes of roots the tracker holds; the others go to ``on_unknown``."""
        holds = self.tracker.holds
        known = [holds(root) for root in roots]
        if all(known):
            return roots, kinds
        assert self.on_unknown is not None
        for root, kind, held in zip(roots, kinds.tolist(), known):
            if not held:
                self.on_unknown(root, kind)
        mask = np.array(known, dtype=bool)
        return [root for root, held in zip(roots, known) if held], kinds[mask]

    def on_outcome(self, root: int, kind: OutcomeKind | int) -> None:
        """Act on one acker outcome for ``root``, as :meth:`take_outcomes` acts on an outcome record's:
        a COMPLETED root is done through the tracker's ``complete_runs``, which hands over the
        record kept with its offset (for ``on_completed``); any other kind through :meth:`act`."""
        with self._lock:
            if kind == _COMPLETED_VALUE:
                self._done_runs(self.tracker.complete_runs((root,)))
            else:
                self.act(self.tracker.on_outcome(root, kind))

    def act(self, action: OutcomeAction | None) -> None:
        """Scheduled for redelivery (the tracker keeps the schedule) or bound for the DLQ.

        Not for a DONE action (the tracker's answer to ``on_outcome(root, COMPLETED)``): the tracker
        has let go of the record kept with its offset by then, so ``on_completed`` could not be given
        it. :meth:`on_outcome` acts on a COMPLETED root with its record.
        """
        if action is None:
            return
        if action.kind is ActionKind.DONE:
            raise ArgumentError(
                f"{self.component}: RootOwner.act got the DONE action of {action.tp}@{action.offset}: its record "
                "is no longer kept, and the completion hook would miss it; call RootOwner.on_outcome(root, kind) "
                "instead of act(tracker.on_outcome(root, kind))"
            )
        if action.reason != POISON_PILL:  # a poison pill's attempt was noted when it failed
            given_up = self._note_attempt(action)
            if given_up is not None:
                self.act(given_up)
                return
        if action.kind is ActionKind.DEAD_LETTER and (
            self.max_dead_letter_ratio is None or self._dead_letter_allowed()
        ):
            self._bound.append(action)

    def _done_runs(self, runs: list[Run]) -> None:
        """The records of the tracker's ``complete_runs`` (one outcome batch) are done (their trees
        completed): counted, their records handed to ``on_completed`` and forgotten, and their
        attempt histories dropped. Per partition: the offsets done, their attempts and the records
        kept with them, in columns."""
        read_again, attempts_held, hooked = self.records.read_again, self._attempts, self._on_completed is not None
        kept: list[object] = []
        for tp, offsets, attempts, records in runs:
            self.stats.completed += len(offsets)
            if hooked:
                kept.extend(record for record in records if record is not None)
            if read_again:  # records read again for a dead letter whose root completed meanwhile
                found = map(read_again.pop, zip(itertools.repeat(tp), offsets), itertools.repeat(None))
                kept.extend(record for record in found if record is not None)
            if attempts_held and max(attempts) > 1:  # retries only: histories of records that needed more than one
                for offset, attempt in zip(offsets, attempts):
                    if attempt > 1:
                        attempts_held.pop((tp, offset), None)
        if kept and self._on_completed is not None:
            self._on_completed(list(map(self.records.to_record, kept)))

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
