# ruff: noqa
# mypy: ignore-errors
"""The in-flight tracker as it was before its columnar pending store (main at c654f10: a PendingOffset
object, heap, dict and backstop entry per offset): core/pending.py and core/tracker.py verbatim, one after
the other, as the reference that tests/unit/test_tracker_columns.py compares the shipped tracker with."""

from __future__ import annotations

# --- core/pending.py as it was ---
"""The tracker's pending offsets of one source partition, and the partition's commit point.

The commit point is the smallest pending offset, or, when nothing is pending, the position
(highest offset seen + 1) moved over offsets already done; offsets never seen never block it.
"""


import enum
import heapq
from collections.abc import Iterable, Sequence

from reliable_kafka.core.outcome_actions import TopicPartition

__all__ = ["PendingState", "PendingOffset", "PartitionOffsets"]


class PendingState(enum.Enum):
    """Where a pending offset stands."""

    IN_FLIGHT = 1  # held under a root, waiting for its outcome
    RETRY = 2  # failed; waiting for its backoff to elapse
    REDELIVERING = 3  # handed out by due_redeliveries; waiting for emitted() again
    DEAD_LETTER = 4  # retries exhausted; waiting for dead_lettered()


_IN_FLIGHT = PendingState.IN_FLIGHT  # a module constant: an enum member read through its class is ~0.17 us


class PendingOffset:
    """One pending offset. ``token`` changes on every state change, so queued heap/deque items
    that carry an older token are stale and skipped (lazy deletion)."""

    __slots__ = ("tp", "offset", "root", "attempt", "state", "reason", "token", "first_ms", "emitted_ms")

    def __init__(
        self,
        tp: TopicPartition,
        offset: int,
        root: int | None = None,
        attempt: int = 1,
        token: int = 0,
        now_ms: int = 0,
    ) -> None:
        # all fields in one call: the tracker's bulk registration makes entries with map(), ~30% faster
        self.tp = tp
        self.offset = offset
        self.root = root
        self.attempt = attempt
        self.state = _IN_FLIGHT
        self.reason = ""
        self.token = token
        self.first_ms = now_ms  # first emit: the age of the oldest pending record (status)
        self.emitted_ms = now_ms  # this attempt's emit: complete latency


class PartitionOffsets:
    """Pending and done offsets of one source partition."""

    __slots__ = ("pending", "_pending_heap", "done", "_done_heap", "position", "restored_above")

    def __init__(self, committed: int | None, done_above: Iterable[int] = ()) -> None:
        self.pending: dict[int, PendingOffset] = {}
        self._pending_heap: list[int] = []  # min-heap over pending offsets, lazily cleaned
        self.done: set[int] = set()  # offsets done above the commit point
        self._done_heap: list[int] = []
        # Next offset after everything seen (None: nothing seen, nothing committed).
        self.position = committed
        # Above every offset restored as done (commit metadata): every other done offset is below
        # the position, which never moves down, so nothing at or above both is done.
        self.restored_above = 0
        if committed is not None:
            self.done.update(o for o in done_above if o >= committed)
            self._done_heap = list(self.done)
            heapq.heapify(self._done_heap)
            self.restored_above = max(self.done) + 1 if self.done else 0

    def add_pending(self, entry: PendingOffset) -> None:
        offset = entry.offset
        heapq.heappush(self._pending_heap, offset)
        self.pending[offset] = entry
        self.done.discard(offset)
        if self.position is None or offset >= self.position:
            self.position = offset + 1

    def add_pending_many(self, offsets: Sequence[int], entries: list[PendingOffset]) -> None:
        """:meth:`add_pending` for ``entries`` of distinct ``offsets``, ascending, none pending (the
        tracker checked): with C-level bulk operations."""
        heap = self._pending_heap
        heap.extend(offsets)
        if self.position is not None and offsets[0] < self.position:
            # below the position the heap may hold larger offsets; above it every item is smaller
            # (pending offsets, stale ones included, are below the position), so ascending stays a heap
            heapq.heapify(heap)
        self.pending.update(zip(offsets, entries))
        if self.done:
            self.done.difference_update(offsets)
        if self.position is None or offsets[-1] >= self.position:
            self.position = offsets[-1] + 1

    def mark_done(self, offset: int) -> None:
        self.add_done(offset)
        self.commit_point()  # keeps ``done`` small: offsets below the commit point leave it

    def add_done(self, offset: int) -> None:
        """:meth:`mark_done` without moving the commit point: for a batch of offsets, followed by one
        :meth:`commit_point` (which gives the same state as a :meth:`mark_done` each)."""
        self.pending.pop(offset, None)
        if offset not in self.done:
            self.done.add(offset)
            heapq.heappush(self._done_heap, offset)
        if self.position is None or offset >= self.position:
            self.position = offset + 1
        self.compact_pending_heap()

    def compact_pending_heap(self) -> None:
        """One stuck offset at the top would keep stale items forever: rebuild (amortised O(1))."""
        if len(self._pending_heap) > 2 * len(self.pending) + 64:
            self._pending_heap = list(self.pending)
            heapq.heapify(self._pending_heap)

    def commit_point(self) -> int | None:
        """Smallest pending offset, else the position advanced over offsets already done."""
        heap = self._pending_heap
        while heap and heap[0] not in self.pending:
            heapq.heappop(heap)
        if heap:
            point = heap[0]
        elif self.position is None:
            return None
        else:
            point = self.position
            while point in self.done:  # done offsets primed from metadata, skipped on replay
                point += 1
            self.position = point
        done_heap = self._done_heap
        while done_heap and done_heap[0] < point:
            self.done.discard(heapq.heappop(done_heap))
        if len(done_heap) > 2 * len(self.done) + 64:
            self._done_heap = list(self.done)
            heapq.heapify(self._done_heap)
        return point


# --- core/tracker.py as it was ---
"""The spout's in-flight tracker: which source offsets are done, what to redeliver, what to commit.

Seed 001's ``InflightRecordTracker`` (kinesis-storm-spout) keeps every emitted record of a shard
in a linked map and moves a checkpoint when the oldest one is acked. This tracker keeps the same
facts per Kafka partition, with a heap of pending offsets instead of the linked map:

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


import dataclasses
import gc
import heapq
import itertools
import operator
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from reliable_kafka.core.backoff import Backoff
from reliable_kafka.core.clock import monotonic_ms
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.core.outcome_actions import ActionKind, OutcomeAction, Redelivery, TopicPartition

# the tracker's short names for its per-partition bookkeeping
_Partition = PartitionOffsets
_Entry = PendingOffset
_State = PendingState
from reliable_kafka.errors import ArgumentError, ConfigError
from reliable_kafka.core.ids import new_id

__all__ = [
    "TopicPartition",
    "ActionKind",
    "OutcomeAction",
    "Redelivery",
    "TrackerStats",
    "Backoff",
    "InFlightTracker",
]

BACKSTOP_REASON = "backstop_expired"  # the vocabulary of reliable_kafka.ops.reasons, as the tracker now
BULK_MIN = 64
"""``emitted_many`` takes batches of at least this many records in bulk (measured: at 10 records
the bulk path's checks cost 0.3 us a record more than a loop; at 500 they save 0.3)."""


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


# Enum members read through their class cost ~0.17 us each on Python 3.11, and ``OutcomeKind(kind)``
# ~0.8 us: these run once or more per root, so the hot paths read module constants.
_IN_FLIGHT = _State.IN_FLIGHT
_COMPLETED = OutcomeKind.COMPLETED
_RESET_TIMEOUT = OutcomeKind.RESET_TIMEOUT
_DONE = ActionKind.DONE
_SET_KIND, _SET_TP, _SET_OFFSET, _SET_ATTEMPT, _SET_REASON, _SET_DUE_MS, _SET_ROOT = (
    OutcomeAction.__dict__[f.name].__set__ for f in dataclasses.fields(OutcomeAction)
)


def _done_action(tp: TopicPartition, offset: int, attempt: int) -> OutcomeAction:
    """``OutcomeAction(ActionKind.DONE, tp, offset, attempt, "COMPLETED")``, set slot by slot: a
    frozen dataclass's ``__init__`` (object.__setattr__ per field) is ~5x slower, once per completed root."""
    action = object.__new__(OutcomeAction)
    _SET_KIND(action, _DONE)
    _SET_TP(action, tp)
    _SET_OFFSET(action, offset)
    _SET_ATTEMPT(action, attempt)
    _SET_REASON(action, "COMPLETED")
    _SET_DUE_MS(action, None)
    _SET_ROOT(action, None)
    return action


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
    pending, seen = part.pending, set()
    for offset in offsets:
        if offset in pending or offset in seen:
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
        self._roots: dict[int, _Entry] = {}
        self._tokens = itertools.count(1)
        # Backstop deadlines in emission order: with one timeout for all, that is deadline order.
        self._backstop: deque[tuple[int, int, _Entry]] = deque()
        self._retries: list[tuple[int, int, _Entry]] = []  # heap of (due_ms, token, entry)

    # -- partitions --------------------------------------------------------------------------

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
        part = _Partition(committed, done_above)
        part.commit_point()
        self._partitions[tp] = part

    def revoke(self, tp: TopicPartition) -> int | None:
        """Forget ``tp`` and return its final commit point (None if nothing is known).

        Its roots become unknown, so their late outcomes are ignored; pending offsets are left to
        the next owner, which replays them from the commit point.
        """
        part = self._partitions.pop(tp, None)
        if part is None:
            return None
        point = part.commit_point()
        for entry in part.pending.values():
            if entry.root is not None:
                del self._roots[entry.root]
            entry.token = 0  # invalidates its queued retry and backstop items
        return point

    def partitions(self) -> list[TopicPartition]:
        """The partitions being tracked."""
        return list(self._partitions)

    # -- emission ----------------------------------------------------------------------------

    def should_skip(self, tp: TopicPartition, offset: int) -> bool:
        """True when the record at ``offset`` is already done (below the commit point or recorded
        done above it, e.g. from commit metadata): the shell skips it on replay."""
        part = self._partitions.get(tp)
        if part is None or offset in part.pending:
            return False
        if offset in part.done:
            return True
        if part.position is None or offset >= part.position:
            return False  # the usual case, a new record: the commit point never passes an offset not done
        point = part.commit_point()
        return point is not None and offset < point

    def first_unseen(self, tp: TopicPartition) -> int:
        """An offset from which on ``should_skip(tp, offset)`` is False until ``tp`` is emitted, done
        or assigned again (at or above the position, above every offset restored as done): a
        consumed batch checks only the offsets below it."""
        part = self._partitions.get(tp)
        return 0 if part is None else max(part.position or 0, part.restored_above)

    def emitted(self, tp: TopicPartition, offset: int, *, root: int | None = None, attempt: int = 1) -> int:
        """Record that the record at ``offset`` was emitted as ``root``; returns the root.

        ``root`` defaults to a fresh id; ``attempt`` is 1 for a first delivery and
        ``Redelivery.attempt`` for a redelivery. A partition not assigned yet is tracked from
        here, with no committed offset.
        """
        if attempt < 1:
            raise ArgumentError(f"emitted {tp}@{offset}: attempt numbers start at 1, got {attempt}")
        part = self._partitions.get(tp)
        if part is None:
            part = self._partitions[tp] = _Partition(None)
        entry = part.pending.get(offset)
        if entry is None and part.position is not None and offset < part.position:
            raise _out_of_order(tp, offset, part.position)
        if root is None:
            root = new_id()
            while root in self._roots:
                root = new_id()
        elif root == 0:
            raise ArgumentError(f"emitted {tp}@{offset}: root ids are non-zero")
        else:
            holder = self._roots.get(root)
            if holder is not None and holder is not entry:
                raise ArgumentError(
                    f"emitted {tp}@{offset}: root {root} is already held by "
                    f"{holder.tp}@{holder.offset}; draw a new root"
                )
        now = self._clock()
        if entry is None:
            entry = _Entry(tp, offset)
            entry.first_ms = now
            part.add_pending(entry)
        elif entry.root is not None:
            del self._roots[entry.root]  # the old root is forgotten: its late outcome is ignored
        entry.root = root
        entry.attempt = attempt
        entry.state = _IN_FLIGHT
        entry.token = next(self._tokens)
        entry.emitted_ms = now
        self._roots[root] = entry
        if self._backstop_ms is not None:
            self._backstop.append((now + self._backstop_ms, entry.token, entry))
            if len(self._backstop) > 2 * len(self._roots) + 1024:
                self._backstop = deque(item for item in self._backstop if item[2].token == item[1])
        self.stats.emitted += 1
        return root

    def emitted_many(
        self,
        tp: TopicPartition,
        offsets: Sequence[int] | np.ndarray,
        roots: Sequence[int] | np.ndarray,
        *,
        attempt: int = 1,
    ) -> None:
        """``emitted(tp, offset, root=root, attempt=attempt)`` for each (offset, root) pair in one
        call (the Spark driver registers a batch at a time; lists or NumPy arrays).

        A batch of fresh records (offsets ascending and not pending, roots distinct, non-zero and
        not held: a stream batch's range) is registered in bulk, with C-level dict, heap and deque
        operations; any other batch goes pair by pair, re-emissions and errors as :meth:`emitted`.
        """
        if attempt < 1:
            raise ArgumentError(f"emitted {tp}: attempt numbers start at 1, got {attempt}")
        offsets, roots = _listed(offsets), _listed(roots)
        part = self._partitions.get(tp)
        if part is None:
            part = self._partitions[tp] = _Partition(None)
        if len(offsets) >= BULK_MIN and len(offsets) == len(roots) and self._fresh(part, offsets, roots):
            if part.position is not None and offsets[0] < part.position:  # ascending, none pending: the first
                raise _out_of_order(tp, offsets[0], part.position)
            self._emitted_fresh(tp, part, offsets, roots, attempt)
            return
        _check_order(tp, part, offsets)  # before any is registered: a refused batch changes nothing
        # A small batch (a Python spout's poll at a low rate): the checks above cost more than they save.
        held, pending, tokens = self._roots, part.pending, self._tokens
        now = self._clock()
        backstop = self._backstop if self._backstop_ms is not None else None
        deadline = now + (self._backstop_ms or 0)
        fresh = 0
        for offset, root in zip(offsets, roots):
            if offset in pending or root in held or not root:
                self.emitted(tp, offset, root=root, attempt=attempt)  # re-emission, or the error it raises
                continue
            entry = _Entry(tp, offset, root, attempt, next(tokens), now)
            part.add_pending(entry)
            held[root] = entry
            if backstop is not None:
                backstop.append((deadline, entry.token, entry))
            fresh += 1
        self.stats.emitted += fresh
        if backstop is not None and len(backstop) > 2 * len(held) + 1024:
            self._backstop = deque(item for item in backstop if item[2].token == item[1])

    def _fresh(self, part: _Partition, offsets: Sequence[int], roots: Sequence[int]) -> bool:
        """True when ``emitted_many`` may take the bulk path: every pair a first emission, no error."""
        column = np.array(offsets, dtype=np.int64)
        if len(column) > 1 and not bool((column[1:] > column[:-1]).all()):
            return False  # not strictly ascending: a repeated offset is a re-emission
        if part.position is not None and offsets[0] < part.position and not part.pending.keys().isdisjoint(offsets):
            return False
        distinct = set(roots)
        return len(distinct) == len(roots) and 0 not in distinct and self._roots.keys().isdisjoint(distinct)

    def _emitted_fresh(
        self, tp: TopicPartition, part: _Partition, offsets: Sequence[int], roots: Sequence[int], attempt: int
    ) -> None:
        now = self._clock()
        tokens = list(itertools.islice(self._tokens, len(offsets)))
        # The cyclic GC would run dozens of times while a batch's entries are made, at times a full
        # collection over every object of the driver (measured: 25 to 85 ms instead of 15 per 25,000
        # records); the entries hold no cycles, so it runs once afterwards instead.
        collecting = gc.isenabled()
        gc.disable()
        try:
            repeat = itertools.repeat
            entries = list(map(_Entry, repeat(tp), offsets, roots, repeat(attempt), tokens, repeat(now)))
            part.add_pending_many(offsets, entries)
            held = self._roots
            held.update(zip(roots, entries))
            if self._backstop_ms is not None:
                backstop = self._backstop
                backstop.extend(zip(repeat(now + self._backstop_ms), tokens, entries))
                if len(backstop) > 2 * len(held) + 1024:
                    self._backstop = deque(item for item in backstop if item[2].token == item[1])
        finally:
            if collecting:
                gc.enable()
        self.stats.emitted += len(entries)

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
        if part.done:
            mask |= np.isin(offsets, np.fromiter(part.done, dtype=np.int64, count=len(part.done)))
        return mask

    def done_immediately(self, tp: TopicPartition, offset: int) -> None:
        """Mark ``offset`` done without tracking (untracked, no tuples emitted, at-most-once)."""
        self._finish(tp, offset)

    def dead_lettered(self, tp: TopicPartition, offset: int) -> None:
        """The broker confirmed the dead-letter write of ``offset``: it is done now.

        Honoured only while ``offset`` is pending in the dead-letter state. A confirmation that
        arrives after the partition was revoked, even if it was assigned back since (an eager
        rebalance does that), belongs to an earlier incarnation of the partition and is ignored:
        counting it would move the commit point over offsets the new incarnation has not read
        again, and a record below it would be lost.
        """
        part = self._partitions.get(tp)
        entry = part.pending.get(offset) if part is not None else None
        if entry is None or entry.state is not _State.DEAD_LETTER:
            return
        self._finish(tp, offset)
        self.stats.dead_lettered += 1
        self.dead_letters_by_reason[entry.reason] = self.dead_letters_by_reason.get(entry.reason, 0) + 1

    def _finish(self, tp: TopicPartition, offset: int) -> None:
        part = self._partitions.get(tp)
        if part is None:
            part = self._partitions[tp] = _Partition(None)
        entry = part.pending.get(offset)
        if entry is not None:
            if entry.root is not None:
                del self._roots[entry.root]
            entry.token = 0
        part.mark_done(offset)

    # -- outcomes ----------------------------------------------------------------------------

    def on_outcome(self, root: int, kind: OutcomeKind | int) -> OutcomeAction | None:
        """Apply an acker's outcome; None (and counted) when ``root`` is not held.

        RESET_TIMEOUT is no outcome: it pushes the root's backstop deadline and returns None.
        """
        if type(kind) is not OutcomeKind:
            kind = OutcomeKind(kind)
        if kind is _RESET_TIMEOUT:
            if not self.reset_timeout(root):
                self.stats.ignored_outcomes += 1
            return None
        if kind is _COMPLETED:
            entry = self.complete(root)
            return None if entry is None else _done_action(entry.tp, entry.offset, entry.attempt)
        entry = self._roots.pop(root, None)
        if entry is None:
            self.stats.ignored_outcomes += 1
            return None
        if kind is OutcomeKind.FAILED:
            self.stats.failed += 1
        else:
            self.stats.timed_out += 1
        return self._failed(entry, kind.name, self._clock())

    def complete(self, root: int) -> _Entry | None:
        """``on_outcome(root, COMPLETED)`` without making its DONE action (~0.75 us, once per root on
        a spout's hot path): the entry that was done (read its ``tp``, ``offset`` and ``attempt``),
        or None (and counted) when ``root`` is not held."""
        entry = self._roots.pop(root, None)
        if entry is None:
            self.stats.ignored_outcomes += 1
            return None
        self.stats.completed += 1
        self.complete_latency.observe((self._clock() - entry.emitted_ms) / 1000.0)
        entry.token = 0
        self._partitions[entry.tp].mark_done(entry.offset)
        return entry

    def complete_many(self, roots: Iterable[int]) -> list[_Entry]:
        """:meth:`complete` for each of ``roots`` with one clock read (a spout's outcome batch): the
        entries that were done, in order; roots not held are counted and skipped."""
        held, partitions = self._roots, self._partitions
        now = self._clock()
        done: list[_Entry] = []
        waits: list[float] = []
        touched: set[_Partition] = set()  # partitions whose commit point moves once, after the loop
        ignored = 0
        pop, keep, wait = held.pop, done.append, waits.append
        heappush = heapq.heappush
        tp: TopicPartition | None = None
        part = _Partition(None)  # replaced at the first entry
        for root in roots:
            entry = pop(root, None)
            if entry is None:
                ignored += 1
                continue
            entry.token = 0
            if entry.tp is not tp:  # a batch's entries share their partition's key object: one lookup a run
                tp = entry.tp
                part = partitions[tp]
                touched.add(part)
            # part.add_done(entry.offset), inlined (once per completed root)
            offset = entry.offset
            part.pending.pop(offset, None)
            if offset not in part.done:
                part.done.add(offset)
                heappush(part._done_heap, offset)
            if part.position is None or offset >= part.position:
                part.position = offset + 1
            wait((now - entry.emitted_ms) / 1000.0)
            keep(entry)
        for part in touched:
            part.compact_pending_heap()
            part.commit_point()
        self.stats.ignored_outcomes += ignored
        self.stats.completed += len(done)
        self.complete_latency.observe_many(waits)
        return done

    def _failed(self, entry: _Entry, reason: str, now_ms: int) -> OutcomeAction:
        """Retry path shared by acker outcomes and backstop expiry; the offset stays pending."""
        root, entry.root = entry.root, None
        entry.reason = reason
        entry.token = next(self._tokens)
        if self.max_retries is None or entry.attempt <= self.max_retries:
            entry.state = _State.RETRY
            due = now_ms + self.backoff.delay_ms(entry.attempt)
            heapq.heappush(self._retries, (due, entry.token, entry))
            return OutcomeAction(ActionKind.REDELIVER, entry.tp, entry.offset, entry.attempt, reason, due, root)
        entry.state = _State.DEAD_LETTER
        return OutcomeAction(ActionKind.DEAD_LETTER, entry.tp, entry.offset, entry.attempt, reason, None, root)

    def give_up(self, tp: TopicPartition, offset: int, reason: str) -> OutcomeAction | None:
        """Dead-letter a record waiting for its redelivery now (a poison pill: ``fail(retry=False)``),
        or handed out for it and not found (Kafka deleted it).

        Returns the DEAD_LETTER action, or None when ``offset`` is not waiting for a redelivery.
        """
        part = self._partitions.get(tp)
        entry = part.pending.get(offset) if part is not None else None
        if entry is None or entry.state not in (_State.RETRY, _State.REDELIVERING):
            return None
        entry.state = _State.DEAD_LETTER
        entry.reason = reason
        entry.token = next(self._tokens)  # its queued retry is stale now
        return OutcomeAction(ActionKind.DEAD_LETTER, entry.tp, entry.offset, entry.attempt, reason)

    def reset_timeout(self, root: int) -> bool:
        """Push the backstop deadline of ``root`` (Storm's resetTimeout); False if not held."""
        entry = self._roots.get(root)
        if entry is None:
            return False
        entry.token = next(self._tokens)
        if self._backstop_ms is not None:
            self._backstop.append((self._clock() + self._backstop_ms, entry.token, entry))
        return True

    # -- time --------------------------------------------------------------------------------

    def due_redeliveries(self, now_ms: int | None = None, *, limit: int | None = None) -> list[Redelivery]:
        """Records whose backoff has elapsed, oldest due first; each is handed out once.

        The shell re-reads each record and calls ``emitted(tp, offset, attempt=r.attempt)``; the
        offset stays pending (and blocks the commit point) until then. ``limit`` caps how many are
        handed out; the rest stay due for the next call.
        """
        now = self._clock() if now_ms is None else now_ms
        out: list[Redelivery] = []
        while self._retries and self._retries[0][0] <= now and (limit is None or len(out) < limit):
            _, token, entry = heapq.heappop(self._retries)
            if entry.token != token:
                continue
            entry.state = _State.REDELIVERING
            entry.token = next(self._tokens)
            out.append(Redelivery(entry.tp, entry.offset, entry.attempt + 1, entry.reason))
        self.stats.redelivered += len(out)
        return out

    def expire_backstop(self, now_ms: int | None = None) -> list[OutcomeAction]:
        """Fail locally, as TIMED_OUT with reason ``"backstop_expired"``, every root whose backstop
        deadline has passed; returns the REDELIVER / DEAD_LETTER actions."""
        now = self._clock() if now_ms is None else now_ms
        actions: list[OutcomeAction] = []
        queue = self._backstop
        while queue and queue[0][0] <= now:
            _, token, entry = queue.popleft()
            if entry.token != token or entry.root is None:  # stale: settled or re-emitted since queued
                continue
            del self._roots[entry.root]
            self.stats.backstop_expired += 1
            actions.append(self._failed(entry, BACKSTOP_REASON, now))
        return actions

    def next_due_ms(self) -> int | None:
        """Earliest time at which ``due_redeliveries`` or ``expire_backstop`` has work (None: no
        work scheduled): the shell may sleep until then."""
        retries, queue = self._retries, self._backstop
        while retries and retries[0][2].token != retries[0][1]:
            heapq.heappop(retries)
        while queue and queue[0][2].token != queue[0][1]:
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
        point = part.commit_point()
        return sorted(o for o in part.done if point is None or o > point)

    def pending_summary(self) -> dict[TopicPartition, tuple[int, int, int, int]]:
        """Per partition with pending offsets: ``(pending, retrying, oldest offset, its first
        emit ms)``; ``retrying`` counts offsets failed and waiting for a redelivery or a dead-letter
        write. O(pending): for the periodic status snapshot, not the hot path."""
        summary = {}
        for tp, part in list(self._partitions.items()):
            entries = list(part.pending.values())
            if not entries:
                continue
            oldest = min(entries, key=lambda entry: entry.offset)
            retrying = sum(1 for entry in entries if entry.state is not _State.IN_FLIGHT)
            summary[tp] = (len(entries), retrying, oldest.offset, oldest.first_ms)
        return summary

    def now_ms(self) -> int:
        """The tracker's clock (ms), the time base of ``pending_summary``."""
        return self._clock()

    def is_pending(self, tp: TopicPartition, offset: int) -> bool:
        """True while ``offset`` of ``tp`` is emitted and not done (in flight, failed or dead-lettering)."""
        part = self._partitions.get(tp)
        return part is not None and offset in part.pending

    def pending_offsets(self, tp: TopicPartition) -> list[int]:
        """Offsets of ``tp`` not done yet, ascending (O(n log n): for inspection and tests)."""
        part = self._partitions.get(tp)
        return [] if part is None else sorted(part.pending)

    def unsettled(self, tp: TopicPartition) -> list[tuple[int, int, bool]]:
        """``(offset, attempt, failed)`` of the pending offsets of ``tp`` that a successor must
        know about to take over: those past their first attempt, and those whose outcome already
        failed them (waiting for a redelivery or a dead letter). Ascending by offset."""
        part = self._partitions.get(tp)
        if part is None:
            return []
        return [
            (offset, entry.attempt, entry.state is not _State.IN_FLIGHT)
            for offset, entry in sorted(part.pending.items())
            if entry.attempt > 1 or entry.state is not _State.IN_FLIGHT
        ]
