"""The spout's in-flight tracker: which source offsets are done, what to redeliver, what to commit.

Seed 001's ``InflightRecordTracker`` (kinesis-storm-spout) keeps every emitted record of a shard
in a linked map and moves a checkpoint when the oldest one is acked. This tracker keeps the same
facts per Kafka partition, in columns (``reliable_kafka.core.pending``) instead of the linked map:

* an emitted offset is *pending* until its tree COMPLETED, its dead-letter write was confirmed, or
  the shell declared it done at once (untracked, no tuples, at-most-once);
* the **commit point** of a partition is its smallest pending offset, or, when nothing is pending,
  the consumer's position (highest offset seen + 1). Offsets never seen (compaction, transaction
  markers) never block. Hence invariant 1 of docs/design.md section 8: every offset below a commit point
  is done;
* FAILED and TIMED_OUT trees are redelivered after a backoff with a new root, up to
  ``max_retries`` times, then dead-lettered;
* a local backstop timer fails roots that got no outcome at all (no acker running).

The tracker is pure: no Kafka client, no threads; time comes from an injected ``clock`` (ms). It is
not thread-safe: the spout shell calls it from its poll loop.

Typical shell loop::

    tracker = InFlightTracker(max_pending=10_000, max_retries=5)
    # on assign: tracker.assign(tp, committed=offset, done_above=decode_done_above(offset, meta))
    # per record: if tracker.should_skip(tp, off): continue; root = tracker.emitted(tp, off)
    # per outcome: action = tracker.on_outcome(root, kind)  -> DEAD_LETTER: write, then
    #              tracker.dead_lettered(tp, off) once the broker confirmed the write
    # periodically: tracker.due_redeliveries(), tracker.expire_backstop(),
    #               commit tracker.commit_points() with encode_done_above(...) as metadata
    # pause all partitions while tracker.over_max_pending(), resume once it is False
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import operator
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from reliable_kafka.core.backoff import Backoff
from reliable_kafka.core.clock import monotonic_ms
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.core.outcome_actions import ActionKind, OutcomeAction, Redelivery, TopicPartition

# the tracker's short names for its per-partition bookkeeping
from reliable_kafka.core.pending import SEQ_BITS, DoneEntry, PendingState
from reliable_kafka.core.pending import PartitionOffsets as _Partition
from reliable_kafka.errors import ArgumentError, ConfigError

__all__ = [
    "TopicPartition",
    "ActionKind",
    "OutcomeAction",
    "Redelivery",
    "TrackerStats",
    "Backoff",
    "InFlightTracker",
]

BACKSTOP_REASON = "backstop_expired"  # the word of ops.reasons (older dead letters say "backstop timeout")
BULK_MIN = 2
"""``emitted_many`` takes batches of at least this many fresh records in bulk (its checks are C-level
set and list operations: cheaper than a call per record from two records on)."""
_NUMPY_ORDER_FROM = 1024  # a batch this long is checked for ascending offsets with NumPy
_SEQ_MASK = (1 << SEQ_BITS) - 1

Run = tuple[TopicPartition, list[int], list[int], list[object]]
"""``complete_runs``' answer for a run of one partition: ``(tp, offsets, attempts, records)``."""


@dataclass(slots=True)
class TrackerStats:
    """Counters since the tracker was created (never reset by revoke).

    ``failed``/``timed_out`` count outcomes from ackers; ``backstop_expired`` counts local expiries;
    ``redelivered`` counts records handed out by ``due_redeliveries``; ``dead_lettered`` counts
    confirmed dead-letter writes; ``ignored_outcomes`` counts outcomes for roots not held.
    """

    emitted: int = 0
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    backstop_expired: int = 0
    redelivered: int = 0
    dead_lettered: int = 0
    ignored_outcomes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _out_of_order(tp: TopicPartition, offset: int, position: int) -> ArgumentError:
    return ArgumentError(
        f"emitted {tp}@{offset}: offset {offset} is not pending and lies below {position}, the next offset after "
        "every one registered or done: registered out of offset order, it could be one the commit point has "
        "already passed (committing it as done, docs/design.md, invariant 1). Register a partition's records in the "
        "order they were consumed (only redeliveries of pending offsets may come later), or assign() the "
        "partition again from a committed offset at or below it to read it again."
    )


def _check_order(tp: TopicPartition, part: _Partition, offsets: Sequence[int]) -> None:
    """Raise as ``emitted`` would for the first offset of ``offsets`` registered out of order."""
    position = part.position
    if offsets and (position is None or offsets[0] >= position) and all(map(operator.lt, offsets, offsets[1:])):
        return  # the usual batch, new offsets ascending: checked at C speed
    seen: set[int] = set()
    for offset in offsets:
        if offset in seen or part.pending_index(offset) >= 0:
            continue  # a re-emission
        if position is not None and offset < position:
            raise _out_of_order(tp, offset, position)
        seen.add(offset)
        position = offset + 1


def _listed(values: Sequence[int] | np.ndarray) -> Sequence[int]:
    """Python ints from a NumPy array (the tracker keeps no NumPy scalars), else ``values`` itself."""
    return values.tolist() if isinstance(values, np.ndarray) else values


class InFlightTracker:
    """Pending source offsets per partition, their roots, retries and commit points.

    Configuration (keyword-only):

    * ``max_pending`` (10_000): roots in flight at which the shell should pause (None: no limit).
    * ``max_retries`` (5): redeliveries after the first attempt; a record gets at most
      ``max_retries + 1`` attempts, then goes to the dead-letter topic (None: retry forever).
    * ``backoff`` (``Backoff()``): wait before each redelivery.
    * ``message_timeout_ms`` (30_000) + ``backstop_grace_ms`` (10_000): the local backstop deadline
      of every root; a root without an outcome by then is failed locally (``message_timeout_ms``
      None disables the backstop).
    * ``clock``: a callable returning milliseconds (default: ``time.monotonic``); tests inject a
      fake clock.

    Re-emitting an offset that is still pending (a redelivery, or Kafka handing the record again
    after a seek or restart) replaces its root: the old root is forgotten, so a late outcome for it
    is ignored. Any other offset must be registered (``emitted``, ``emitted_many``) in offset order,
    above every offset registered or done before in the partition: when nothing is pending, the
    commit point passes offsets never registered (Kafka never hands out a transaction marker or a
    compacted record), so a record registered below them could already have been committed as done.
    Such a registration raises :class:`ArgumentError` and changes nothing; to read a partition again
    from lower down, ``assign`` it again from that committed offset.
    """

    def __init__(
        self,
        *,
        max_pending: int | None = 10_000,
        max_retries: int | None = 5,
        backoff: Backoff | None = None,
        message_timeout_ms: int | None = 30_000,
        backstop_grace_ms: int = 10_000,
        clock: Callable[[], int] | None = None,
    ) -> None:
        where = "InFlightTracker"
        if max_pending is not None and max_pending < 1:
            raise ConfigError(f"{where}: max_pending must be >= 1 or None, got {max_pending}")
        if max_retries is not None and max_retries < 0:
            raise ConfigError(f"{where}: max_retries must be >= 0 or None, got {max_retries}")
        if message_timeout_ms is not None and message_timeout_ms <= 0:
            raise ConfigError(f"{where}: message_timeout_ms must be > 0 or None, got {message_timeout_ms}")
        if backstop_grace_ms < 0:
            raise ConfigError(f"{where}: backstop_grace_ms must be >= 0, got {backstop_grace_ms}")
        self.max_pending = max_pending
        self.max_retries = max_retries
        self.backoff = backoff if backoff is not None else Backoff()
        self._backstop_ms = None if message_timeout_ms is None else message_timeout_ms + backstop_grace_ms
        self._clock = clock if clock is not None else monotonic_ms()
        self.stats = TrackerStats()
        self.complete_latency = LatencyHistogram()  # emit to COMPLETED of the attempt that completed
        self.dead_letters_by_reason: dict[str, int] = {}  # the last attempt's reason: FAILED, TIMED_OUT...
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._numbered: dict[int, _Partition] = {}  # the partitions by number (a root's code's high bits)
        self._numbers = itertools.count(1)
        # root -> its slot's code (partition number << SEQ_BITS | seq): one int a root
        self._roots: dict[int, int] = {}
        self._tokens = itertools.count(1)
        # Backstop deadlines in emission order (with one timeout for all, deadline order), one item
        # per registration call: (deadline, token, partition, first seq, end seq). A slot in the
        # range is due by it while it is in flight with that token.
        self._backstop: deque[tuple[int, int, _Partition, int, int]] = deque()
        self._retries: list[tuple[int, int, _Partition, int]] = []  # heap of (due_ms, token, partition, seq)

    # -- partitions --------------------------------------------------------------------------

    def _new_partition(self, tp: TopicPartition, committed: int | None, done_above: Iterable[int] = ()) -> _Partition:
        number = next(self._numbers)
        part = _Partition(committed, done_above, tp=tp, number=number)
        self._partitions[tp] = self._numbered[number] = part
        return part

    def assign(self, tp: TopicPartition, *, committed: int | None, done_above: Iterable[int] = ()) -> None:
        """Start tracking ``tp`` from its committed offset (None: no committed offset).

        ``done_above``: offsets recorded as done above ``committed`` (decoded commit metadata);
        ``should_skip`` reports them and they count as done. Assigning a partition already held
        first drops it, as ``revoke`` does.
        """
        if committed is None:
            done_above = list(done_above)
            if done_above:
                raise ArgumentError(f"assign {tp}: done_above given without a committed offset")
        elif committed < 0:
            raise ArgumentError(f"assign {tp}: committed offset must be >= 0, got {committed}")
        if tp in self._partitions:
            self.revoke(tp)
        self._new_partition(tp, committed, done_above).commit_point()

    def revoke(self, tp: TopicPartition) -> int | None:
        """Forget ``tp`` and return its final commit point (None if nothing is known).

        Its roots become unknown, so their late outcomes are ignored; pending offsets are left to
        the next owner, which replays them from the commit point.
        """
        part = self._partitions.pop(tp, None)
        if part is None:
            return None
        del self._numbered[part.number]
        point = part.commit_point()
        held, roots = self._roots, part.roots
        for i in part.pending_slots():
            if roots[i]:
                del held[roots[i]]
        part.alive = False  # its queued retry and backstop items are stale
        return point

    def partitions(self) -> list[TopicPartition]:
        """The partitions being tracked."""
        return list(self._partitions)

    def _part(self, tp: TopicPartition) -> _Partition:
        part = self._partitions.get(tp)
        return self._new_partition(tp, None) if part is None else part

    # -- emission ----------------------------------------------------------------------------

    def should_skip(self, tp: TopicPartition, offset: int) -> bool:
        """True when the record at ``offset`` is already done (below the commit point or recorded
        done above it, e.g. from commit metadata): the shell skips it on replay."""
        part = self._partitions.get(tp)
        if part is None:
            return False
        if offset in part.extra:
            return True
        if part.position is None or offset >= part.position:
            return False  # the usual case, a new record: the commit point never passes an offset not done
        i = part.index(offset)
        if i >= 0:
            return not part.live[i]
        point = part.commit_point()
        return point is not None and offset < point

    def first_unseen(self, tp: TopicPartition) -> int:
        """An offset from which on ``should_skip(tp, offset)`` is False until ``tp`` is emitted, done
        or assigned again (at or above the position, above every offset restored as done): a
        consumed batch checks only the offsets below it."""
        part = self._partitions.get(tp)
        return 0 if part is None else max(part.position or 0, part.restored_above)

    def emitted(
        self, tp: TopicPartition, offset: int, *, root: int | None = None, attempt: int = 1, record: object = None
    ) -> int:
        """Record that the record at ``offset`` was emitted as ``root``; returns the root.

        ``root`` defaults to a fresh id; ``attempt`` is 1 for a first delivery and
        ``Redelivery.attempt`` for a redelivery. A partition not assigned yet is tracked from
        here, with no committed offset. ``record``: kept for the offset while it is pending
        (:meth:`record`; a re-emission without one keeps the one before).
        """
        if attempt < 1:
            raise ArgumentError(f"emitted {tp}@{offset}: attempt numbers start at 1, got {attempt}")
        part = self._part(tp)
        i = part.pending_index(offset)
        if i < 0 and part.position is not None and offset < part.position:
            raise _out_of_order(tp, offset, part.position)
        held = self._roots
        if root is None:
            root = new_id()
            while root in held:
                root = new_id()
        elif root == 0:
            raise ArgumentError(f"emitted {tp}@{offset}: root ids are non-zero")
        else:
            holder = held.get(root)
            if holder is not None and (i < 0 or holder != part.code(i)):
                where = self._numbered[holder >> SEQ_BITS]
                raise ArgumentError(
                    f"emitted {tp}@{offset}: root {root} is already held by "
                    f"{where.tp}@{where.offsets[(holder & _SEQ_MASK) - where.base]}; draw a new root"
                )
        now = self._clock()
        token = next(self._tokens)
        if i < 0:
            i = part.append(offset, root, attempt, token, now, record)
        else:
            if record is not None:
                part.records[i] = record
            old = part.roots[i]
            if old:
                del held[old]  # the old root is forgotten: its late outcome is ignored
            part.roots[i] = root
            part.attempts[i] = attempt
            part.states[i] = PendingState.IN_FLIGHT
            part.tokens[i] = token
            part.emitted_ms[i] = now
        seq = part.base + i
        held[root] = part.number << SEQ_BITS | seq
        if self._backstop_ms is not None:
            self._backstop.append((now + self._backstop_ms, token, part, seq, seq + 1))
            self._compact_backstop()
        self.stats.emitted += 1
        return root

    def emitted_many(
        self,
        tp: TopicPartition,
        offsets: Sequence[int] | np.ndarray,
        roots: Sequence[int] | np.ndarray,
        *,
        attempt: int = 1,
        records: Sequence[object] | None = None,
    ) -> None:
        """``emitted(tp, offset, root=root, attempt=attempt)`` for each (offset, root) pair in one
        call (a spout's consumed batch; the Spark driver's batch; lists or NumPy arrays).

        A batch of fresh records (offsets ascending above every one registered, roots distinct,
        non-zero and not held: a stream batch's range) is appended to the partition's columns in
        bulk; any other batch goes pair by pair, re-emissions and errors as :meth:`emitted`.
        ``records``: one for each pair, kept as :meth:`emitted` keeps one.
        """
        if attempt < 1:
            raise ArgumentError(f"emitted {tp}: attempt numbers start at 1, got {attempt}")
        offsets, roots = _listed(offsets), _listed(roots)
        if not offsets:
            return
        part = self._part(tp)
        if len(offsets) >= BULK_MIN and len(offsets) == len(roots) and self._fresh(part, offsets, roots):
            self._emitted_fresh(part, offsets, roots, attempt, records)
            return
        _check_order(tp, part, offsets)  # before any is registered: a refused batch changes nothing
        for offset, root, record in zip(offsets, roots, itertools.repeat(None) if records is None else records):
            self.emitted(tp, offset, root=root, attempt=attempt, record=record)

    def _fresh(self, part: _Partition, offsets: Sequence[int], roots: Sequence[int]) -> bool:
        """True when ``emitted_many`` may take the bulk path: every pair a first emission, no error."""
        if part.position is not None and offsets[0] < part.position:
            return False  # a re-emission, or registered out of order: pair by pair
        if len(offsets) >= _NUMPY_ORDER_FROM:
            column = np.array(offsets, dtype=np.int64)
            if not bool((column[1:] > column[:-1]).all()):
                return False
        elif not all(map(operator.lt, offsets, offsets[1:])):
            return False  # not strictly ascending: a repeated offset is a re-emission
        distinct = set(roots)
        return len(distinct) == len(roots) and 0 not in distinct and self._roots.keys().isdisjoint(distinct)

    def _emitted_fresh(
        self,
        part: _Partition,
        offsets: Sequence[int],
        roots: Sequence[int],
        attempt: int,
        records: Sequence[object] | None,
    ) -> None:
        now = self._clock()
        token = next(self._tokens)  # one for the batch: a later state change of a slot gives it its own
        first = part.base + part.extend(offsets, roots, attempt, token, now, records)
        end = first + len(offsets)
        self._roots.update(zip(roots, range(part.number << SEQ_BITS | first, part.number << SEQ_BITS | end)))
        if self._backstop_ms is not None:
            self._backstop.append((now + self._backstop_ms, token, part, first, end))
            self._compact_backstop()
        self.stats.emitted += len(offsets)

    def _compact_backstop(self) -> None:
        """Items whose slots all settled since stay queued until due: one stuck root would keep them
        forever, so the queue is rebuilt when it outgrows the roots in flight (amortised O(1))."""
        backstop = self._backstop
        if len(backstop) > 2 * len(self._roots) + 1024:
            self._backstop = deque(
                item for item in backstop if next(iter(self._backstop_slots(item)), None) is not None
            )

    @staticmethod
    def _backstop_slots(item: tuple[int, int, _Partition, int, int]) -> Iterable[int]:
        """The slots that a backstop item still times (in flight, with its token)."""
        _, token, part, first, end = item
        if not part.alive:
            return
        base, live, tokens, roots = part.base, part.live, part.tokens, part.roots
        i, stop = max(first - base, 0), end - base
        while i < stop:
            i = live.find(1, i, stop)
            if i < 0:
                return
            if tokens[i] == token and roots[i]:
                yield i
            i += 1

    def skip_mask(self, tp: TopicPartition, offsets: np.ndarray) -> np.ndarray:
        """``should_skip(tp, offset)`` for each of ``offsets`` (a NumPy int64 array), as a boolean
        array: below the commit point, or recorded done above it."""
        offsets = np.asarray(offsets, dtype=np.int64)
        part = self._partitions.get(tp)
        if part is None or part.position is None:
            return np.zeros(len(offsets), dtype=bool)
        # The commit point is the smallest pending offset, so nothing below it is pending, and no
        # offset is both pending and done: should_skip's order of checks does not matter here.
        point = part.commit_point()
        mask = offsets < point if point is not None else np.zeros(len(offsets), dtype=bool)
        done = part.done_above(point)
        if done:
            mask |= np.isin(offsets, np.array(done, dtype=np.int64))
        return mask

    def done_immediately(self, tp: TopicPartition, offset: int) -> None:
        """Mark ``offset`` done without tracking (untracked, no tuples emitted, at-most-once)."""
        self._finish(self._part(tp), offset)

    def dead_lettered(self, tp: TopicPartition, offset: int) -> None:
        """The broker confirmed the dead-letter write of ``offset``: it is done now.

        Honoured only while ``offset`` is pending in the dead-letter state. A confirmation that
        arrives after the partition was revoked, even if it was assigned back since (an eager
        rebalance does that), belongs to an earlier incarnation of the partition and is ignored:
        counting it would move the commit point over offsets the new incarnation has not read
        again, and a record below it would be lost.
        """
        part = self._partitions.get(tp)
        i = part.pending_index(offset) if part is not None else -1
        if i < 0 or part is None or part.states[i] != PendingState.DEAD_LETTER:
            return
        reason = part.reasons.get(part.base + i, "")
        self._finish(part, offset)
        self.stats.dead_lettered += 1
        self.dead_letters_by_reason[reason] = self.dead_letters_by_reason.get(reason, 0) + 1

    def _finish(self, part: _Partition, offset: int) -> None:
        i = part.pending_index(offset)
        if i >= 0 and part.roots[i]:
            del self._roots[part.roots[i]]
        part.mark_done(offset)
        part.commit_point()  # keeps ``extra`` small: offsets below the commit point leave it

    # -- outcomes ----------------------------------------------------------------------------

    def _slot(self, code: int) -> tuple[_Partition, int]:
        part = self._numbered[code >> SEQ_BITS]
        return part, (code & _SEQ_MASK) - part.base

    def holds(self, root: int) -> bool:
        """True while ``root`` is in flight here (an outcome for it would be acted on)."""
        return root in self._roots

    def on_outcome(self, root: int, kind: OutcomeKind | int) -> OutcomeAction | None:
        """Apply an acker's outcome; None (and counted) when ``root`` is not held.

        RESET_TIMEOUT is no outcome: it pushes the root's backstop deadline and returns None.
        """
        if type(kind) is not OutcomeKind:
            kind = OutcomeKind(kind)
        if kind is OutcomeKind.RESET_TIMEOUT:
            if not self.reset_timeout(root):
                self.stats.ignored_outcomes += 1
            return None
        if kind is OutcomeKind.COMPLETED:
            entry = self.complete(root)
            return (
                None
                if entry is None
                else OutcomeAction(ActionKind.DONE, entry.tp, entry.offset, entry.attempt, "COMPLETED")
            )
        code = self._roots.pop(root, None)
        if code is None:
            self.stats.ignored_outcomes += 1
            return None
        if kind is OutcomeKind.FAILED:
            self.stats.failed += 1
        else:
            self.stats.timed_out += 1
        part, i = self._slot(code)
        return self._failed(part, i, kind.name, self._clock())

    def complete(self, root: int) -> DoneEntry | None:
        """``on_outcome(root, COMPLETED)`` without making its DONE action: ``(tp, offset, attempt)``
        of the record that was done (also as attributes), or None (and counted) when ``root`` is
        not held."""
        runs = self.complete_runs((root,))
        if not runs:
            return None
        tp, offsets, attempts, _ = runs[0]
        return DoneEntry((tp, offsets[0], attempts[0]))

    def complete_many(self, roots: Iterable[int]) -> list[DoneEntry]:
        """:meth:`complete` for each of ``roots`` with one clock read: the records that were done,
        in order; roots not held are counted and skipped."""
        return [
            DoneEntry(entry)
            for tp, offsets, attempts, _ in self.complete_runs(roots)
            for entry in zip(itertools.repeat(tp), offsets, attempts)
        ]

    def complete_runs(self, roots: Iterable[int]) -> list[Run]:
        """:meth:`complete_many` in columns (a spout's outcome batch, once per root): per run of
        consecutive roots of one partition, ``(tp, offsets, attempts, records)`` of the records done,
        in order (``records``: what :meth:`emitted` kept, None where nothing); roots not held are
        counted and skipped."""
        pop = self._roots.pop
        numbered = self._numbered
        now = self._clock()
        runs: list[Run] = []
        waits: list[float] = []
        wait = waits.append
        ignored = 0
        number = -1
        part = None
        offsets: list[int] = []
        attempts: list[int] = []
        records: list[object] = []
        for root in roots:
            code = pop(root, None)
            if code is None:
                ignored += 1
                continue
            if code >> SEQ_BITS != number:  # a batch's roots share their partition: one lookup a run
                number = code >> SEQ_BITS
                part = numbered[number]
                offsets, attempts, records = [], [], []
                runs.append((part.tp, offsets, attempts, records))
                base, live, slot_roots, tokens = part.base, part.live, part.roots, part.tokens
                slot_offsets, slot_attempts, emitted_ms = part.offsets, part.attempts, part.emitted_ms
                slot_records = part.records
            i = (code & _SEQ_MASK) - base
            # part.finish(i), inlined (once per completed root); a completed slot was in flight: no reason kept
            live[i] = 0
            slot_roots[i] = 0
            tokens[i] = 0
            part.pending_count -= 1  # type: ignore[union-attr]
            offsets.append(slot_offsets[i])
            attempts.append(slot_attempts[i])
            records.append(slot_records[i])
            slot_records[i] = None
            wait((now - emitted_ms[i]) / 1000.0)
        done = len(waits)
        for tp, *_ in runs:
            self._partitions[tp].first_pending()
        self.stats.ignored_outcomes += ignored
        self.stats.completed += done
        if waits:
            self.complete_latency.observe_many(waits)
        return runs

    def _failed(self, part: _Partition, i: int, reason: str, now_ms: int) -> OutcomeAction:
        """Retry path shared by acker outcomes and backstop expiry; the offset stays pending."""
        root, part.roots[i] = part.roots[i], 0
        seq = part.base + i
        part.reasons[seq] = reason
        token = part.tokens[i] = next(self._tokens)
        attempt, offset = part.attempts[i], part.offsets[i]
        if self.max_retries is None or attempt <= self.max_retries:
            part.states[i] = PendingState.RETRY
            due = now_ms + self.backoff.delay_ms(attempt)
            heapq.heappush(self._retries, (due, token, part, seq))
            return OutcomeAction(ActionKind.REDELIVER, part.tp, offset, attempt, reason, due, root)
        part.states[i] = PendingState.DEAD_LETTER
        return OutcomeAction(ActionKind.DEAD_LETTER, part.tp, offset, attempt, reason, None, root)

    def give_up(self, tp: TopicPartition, offset: int, reason: str) -> OutcomeAction | None:
        """Dead-letter a record waiting for its redelivery now (a poison pill: ``fail(retry=False)``),
        or handed out for it and not found (Kafka deleted it).

        Returns the DEAD_LETTER action, or None when ``offset`` is not waiting for a redelivery.
        """
        part = self._partitions.get(tp)
        i = part.pending_index(offset) if part is not None else -1
        if i < 0 or part is None or part.states[i] not in (PendingState.RETRY, PendingState.REDELIVERING):
            return None
        part.states[i] = PendingState.DEAD_LETTER
        part.reasons[part.base + i] = reason
        part.tokens[i] = next(self._tokens)  # its queued retry is stale now
        return OutcomeAction(ActionKind.DEAD_LETTER, part.tp, offset, part.attempts[i], reason)

    def reset_timeout(self, root: int) -> bool:
        """Push the backstop deadline of ``root`` (Storm's resetTimeout); False if not held."""
        code = self._roots.get(root)
        if code is None:
            return False
        part, i = self._slot(code)
        token = part.tokens[i] = next(self._tokens)
        if self._backstop_ms is not None:
            seq = part.base + i
            self._backstop.append((self._clock() + self._backstop_ms, token, part, seq, seq + 1))
            self._compact_backstop()
        return True

    # -- time --------------------------------------------------------------------------------

    @staticmethod
    def _retry_slot(item: tuple[int, int, _Partition, int]) -> int:
        """The slot a retry item still schedules, or -1 when it is stale."""
        _, token, part, seq = item
        i = seq - part.base
        if not part.alive or i < 0 or part.tokens[i] != token or not part.live[i]:
            return -1
        return i

    def due_redeliveries(self, now_ms: int | None = None, *, limit: int | None = None) -> list[Redelivery]:
        """Records whose backoff has elapsed, oldest due first; each is handed out once.

        The shell re-reads each record and calls ``emitted(tp, offset, attempt=r.attempt)``; the
        offset stays pending (and blocks the commit point) until then. ``limit`` caps how many are
        handed out; the rest stay due for the next call.
        """
        now = self._clock() if now_ms is None else now_ms
        out: list[Redelivery] = []
        retries = self._retries
        while retries and retries[0][0] <= now and (limit is None or len(out) < limit):
            item = heapq.heappop(retries)
            i = self._retry_slot(item)
            if i < 0:
                continue
            part = item[2]
            part.states[i] = PendingState.REDELIVERING
            part.tokens[i] = next(self._tokens)
            out.append(Redelivery(part.tp, part.offsets[i], part.attempts[i] + 1, part.reasons.get(item[3], "")))
        self.stats.redelivered += len(out)
        return out

    def expire_backstop(self, now_ms: int | None = None) -> list[OutcomeAction]:
        """Fail locally, as TIMED_OUT with reason ``"backstop_expired"``, every root whose backstop
        deadline has passed; returns the REDELIVER / DEAD_LETTER actions."""
        now = self._clock() if now_ms is None else now_ms
        actions: list[OutcomeAction] = []
        queue = self._backstop
        while queue and queue[0][0] <= now:
            item = queue.popleft()
            part = item[2]
            for i in list(self._backstop_slots(item)):  # stale ones (settled or re-emitted since) skipped
                del self._roots[part.roots[i]]
                self.stats.backstop_expired += 1
                actions.append(self._failed(part, i, BACKSTOP_REASON, now))
        return actions

    def next_due_ms(self) -> int | None:
        """Earliest time at which ``due_redeliveries`` or ``expire_backstop`` has work (None: no
        work scheduled): the shell may sleep until then."""
        retries, queue = self._retries, self._backstop
        while retries and self._retry_slot(retries[0]) < 0:
            heapq.heappop(retries)
        while queue and next(iter(self._backstop_slots(queue[0])), None) is None:
            queue.popleft()
        times = [retries[0][0]] if retries else []
        if queue:
            times.append(queue[0][0])
        return min(times) if times else None

    # -- backpressure ------------------------------------------------------------------------

    def pending_roots(self) -> int:
        """Roots in flight (emitted, no outcome yet), over all partitions."""
        return len(self._roots)

    def over_max_pending(self) -> bool:
        """True while ``pending_roots() >= max_pending`` (Storm's rule: emit only below it).

        The shell pauses its partitions while this is True and resumes them as soon as it is False
        again (no hysteresis). Redeliveries are emitted even while paused: their offsets are
        already pending, and they are what lets the commit point move on.
        """
        return self.max_pending is not None and len(self._roots) >= self.max_pending

    # -- commits -----------------------------------------------------------------------------

    def commit_point(self, tp: TopicPartition) -> int | None:
        """The offset to commit for ``tp``: every offset below it is done. None if nothing known."""
        part = self._partitions.get(tp)
        return None if part is None else part.commit_point()

    def commit_points(self) -> dict[TopicPartition, int]:
        """Commit points of every tracked partition that has one."""
        points = {tp: part.commit_point() for tp, part in self._partitions.items()}
        return {tp: point for tp, point in points.items() if point is not None}

    def done_above(self, tp: TopicPartition) -> list[int]:
        """Offsets done above the commit point of ``tp``, ascending (for the commit metadata)."""
        part = self._partitions.get(tp)
        if part is None:
            return []
        return part.done_above(part.commit_point())

    def pending_summary(self) -> dict[TopicPartition, tuple[int, int, int, int]]:
        """Per partition with pending offsets: ``(pending, retrying, oldest offset, its first
        emit ms)``; ``retrying`` counts offsets failed and waiting for a redelivery or a dead-letter
        write. O(pending): for the periodic status snapshot, not the hot path."""
        summary = {}
        for tp, part in list(self._partitions.items()):
            slots = part.pending_slots()
            if not slots:
                continue
            states = part.states
            retrying = sum(1 for i in slots if states[i] != PendingState.IN_FLIGHT)
            oldest = slots[0]
            summary[tp] = (len(slots), retrying, part.offsets[oldest], part.first_ms[oldest])
        return summary

    def now_ms(self) -> int:
        """The tracker's clock (ms), the time base of ``pending_summary``."""
        return self._clock()

    def is_pending(self, tp: TopicPartition, offset: int) -> bool:
        """True while ``offset`` of ``tp`` is emitted and not done (in flight, failed or dead-lettering)."""
        part = self._partitions.get(tp)
        return part is not None and part.pending_index(offset) >= 0

    def pending_offsets(self, tp: TopicPartition) -> list[int]:
        """Offsets of ``tp`` not done yet, ascending (for inspection and tests)."""
        part = self._partitions.get(tp)
        return [] if part is None else part.pending_offsets()

    def record(self, tp: TopicPartition, offset: int) -> object:
        """What :meth:`emitted` kept for ``offset`` while it is pending, else None."""
        part = self._partitions.get(tp)
        i = part.pending_index(offset) if part is not None else -1
        return None if i < 0 or part is None else part.records[i]

    def forget_record(self, tp: TopicPartition, offset: int) -> object:
        """:meth:`record`, no longer kept (the offset stays pending)."""
        part = self._partitions.get(tp)
        i = part.pending_index(offset) if part is not None else -1
        if i < 0 or part is None:
            return None
        record, part.records[i] = part.records[i], None
        return record

    def records_held(self) -> list[tuple[TopicPartition, int]]:
        """``(tp, offset)`` of every pending offset with a record kept (O(pending): not the hot path)."""
        return [
            (tp, part.offsets[i])
            for tp, part in self._partitions.items()
            for i in part.pending_slots()
            if part.records[i] is not None
        ]

    def unsettled(self, tp: TopicPartition) -> list[tuple[int, int, bool]]:
        """``(offset, attempt, failed)`` of the pending offsets of ``tp`` that a successor must
        know about to take over: those past their first attempt, and those whose outcome already
        failed them (waiting for a redelivery or a dead letter). Ascending by offset."""
        part = self._partitions.get(tp)
        if part is None:
            return []
        offsets, attempts, states = part.offsets, part.attempts, part.states
        return [
            (offsets[i], attempts[i], states[i] != PendingState.IN_FLIGHT)
            for i in part.pending_slots()
            if attempts[i] > 1 or states[i] != PendingState.IN_FLIGHT
        ]
