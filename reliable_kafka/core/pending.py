"""The tracker's registered offsets of one source partition, in columns, and the partition's commit point.

The commit point is the smallest pending offset, or, when nothing is pending, the position
(highest offset seen + 1) moved over offsets already done; offsets never seen never block it.

Offsets are registered in ascending order (the tracker refuses any other order), so a partition
keeps them as parallel columns, one slot per offset, appended in bulk: no object, heap item or
dict entry per offset. A slot stays until every slot before it is done too; the commit point is
the first slot still pending (a ``bytearray.find``), and the done prefix is dropped now and then.
A slot's ``seq`` (its index since the partition was assigned) names it in the tracker's root map
and time queues.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import operator
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from reliable_kafka.core.outcome_actions import TopicPartition

__all__ = ["PendingState", "PartitionOffsets", "DoneEntry", "SEQ_BITS"]

SEQ_BITS = 40
"""A root's code in the tracker's root map is ``partition number << SEQ_BITS | seq``: one int per
root (no tuple, nothing for the cyclic GC to walk), 2**40 slots per partition assignment."""

_DROP_FROM = 1024  # a done prefix this long (and half the columns) is dropped: amortised O(1) a slot


class PendingState(enum.IntEnum):
    """Where a pending offset stands (a byte in the partition's ``states`` column)."""

    IN_FLIGHT = 1  # held under a root, waiting for its outcome
    RETRY = 2  # failed; waiting for its backoff to elapse
    REDELIVERING = 3  # handed out by due_redeliveries; waiting for emitted() again
    DEAD_LETTER = 4  # retries exhausted; waiting for dead_lettered()


class DoneEntry(tuple[TopicPartition, int, int]):
    """``(tp, offset, attempt)`` of a record the tracker counted done (``complete``, ``complete_many``)."""

    __slots__ = ()

    tp = property(operator.itemgetter(0))
    offset = property(operator.itemgetter(1))
    attempt = property(operator.itemgetter(2))


class PartitionOffsets:
    """Registered and done offsets of one source partition (one assignment of it).

    Columns, one slot per registered offset (ascending): ``offsets``, ``live`` (1 while pending,
    0 once done), ``states`` (a :class:`PendingState` while live), ``roots`` (0: none, e.g. failed),
    ``attempts``, ``tokens`` (change with every state change: queued retry and backstop items that
    carry an older one are stale), ``first_ms`` (first emit: the age of the oldest pending record)
    ``emitted_ms`` (this attempt's emit: complete latency) and ``records`` (what the shell keeps
    for a pending offset, its source record, or None; opaque here). ``extra`` holds offsets done that
    have no slot (restored from commit metadata, or marked done without being registered).
    """

    __slots__ = (
        "tp",
        "number",
        "alive",
        "base",
        "head",
        "offsets",
        "live",
        "states",
        "roots",
        "attempts",
        "tokens",
        "first_ms",
        "emitted_ms",
        "records",
        "reasons",
        "pending_count",
        "extra",
        "_extra_heap",
        "position",
        "restored_above",
    )

    def __init__(
        self, committed: int | None, done_above: Iterable[int] = (), *, tp: TopicPartition = ("", -1), number: int = 0
    ) -> None:
        self.tp = tp
        self.number = number  # the tracker's name for this assignment (the high bits of a root's code)
        self.alive = True  # False once revoked: its queued items are stale
        self.base = 0  # seq of slot 0 (slots before it were dropped, all done)
        self.head = 0  # no slot before it is pending
        self.offsets: list[int] = []
        self.live = bytearray()
        self.states = bytearray()
        self.roots: list[int] = []
        self.attempts: list[int] = []
        self.tokens: list[int] = []
        self.first_ms: list[int] = []
        self.emitted_ms: list[int] = []
        self.records: list[object] = []
        self.reasons: dict[int, str] = {}  # seq -> why its last attempt failed (failed slots only)
        self.pending_count = 0
        self.extra: set[int] = set()
        self._extra_heap: list[int] = []
        # Next offset after everything seen (None: nothing seen, nothing committed).
        self.position = committed
        # Above every offset restored as done (commit metadata): every other done offset is below
        # the position, which never moves down, so nothing at or above both is done.
        self.restored_above = 0
        if committed is not None:
            self.extra.update(o for o in done_above if o >= committed)
            self._extra_heap = list(self.extra)
            heapq.heapify(self._extra_heap)
            self.restored_above = max(self.extra) + 1 if self.extra else 0

    # -- slots ----------------------------------------------------------------------------------

    def index(self, offset: int) -> int:
        """The slot of ``offset``, or -1 when it has none (never registered, or dropped: done)."""
        offsets = self.offsets
        i = bisect_left(offsets, offset)
        return i if i < len(offsets) and offsets[i] == offset else -1

    def pending_index(self, offset: int) -> int:
        """The slot of ``offset`` while it is pending, else -1."""
        if self.position is None or offset >= self.position:
            return -1  # every slot lies below the position
        i = self.index(offset)
        return i if i >= 0 and self.live[i] else -1

    def code(self, i: int) -> int:
        """Slot ``i``'s name in the tracker's root map."""
        return self.number << SEQ_BITS | (self.base + i)

    def append(self, offset: int, root: int, attempt: int, token: int, now_ms: int, record: object = None) -> int:
        """Register ``offset`` (above every slot) as pending in flight under ``root``; its slot."""
        self.offsets.append(offset)
        self.live.append(1)
        self.states.append(1)
        self.roots.append(root)
        self.attempts.append(attempt)
        self.tokens.append(token)
        self.first_ms.append(now_ms)
        self.emitted_ms.append(now_ms)
        self.records.append(record)
        self.pending_count += 1
        if self.extra:
            self.extra.discard(offset)
        if self.position is None or offset >= self.position:
            self.position = offset + 1
        return len(self.offsets) - 1

    def extend(
        self,
        offsets: Sequence[int],
        roots: Sequence[int],
        attempt: int,
        token: int,
        now_ms: int,
        records: Sequence[object] | None = None,
    ) -> int:
        """:meth:`append` for ``offsets``, ascending and above every slot, with C-level list
        operations; the first new slot."""
        n = len(offsets)
        first = len(self.offsets)
        repeat = itertools.repeat
        self.offsets.extend(offsets)
        self.live.extend(b"\x01" * n)
        self.states.extend(b"\x01" * n)
        self.roots.extend(roots)
        self.attempts.extend(repeat(attempt, n))
        self.tokens.extend(repeat(token, n))
        self.first_ms.extend(repeat(now_ms, n))
        self.emitted_ms.extend(repeat(now_ms, n))
        self.records.extend(repeat(None, n) if records is None else records)
        self.pending_count += n
        if self.extra:
            self.extra.difference_update(offsets)
        if self.position is None or offsets[-1] >= self.position:
            self.position = offsets[-1] + 1
        return first

    def finish(self, i: int) -> None:
        """Slot ``i`` (pending) is done."""
        self.live[i] = 0
        self.roots[i] = 0
        self.tokens[i] = 0
        self.records[i] = None
        self.pending_count -= 1
        if self.reasons:
            self.reasons.pop(self.base + i, None)

    def mark_done(self, offset: int) -> None:
        """``offset`` is done: its slot if pending, else recorded as done without one."""
        i = self.pending_index(offset)
        if i >= 0:
            self.finish(i)
            return
        if self.index(offset) < 0 and offset not in self.extra:
            self.extra.add(offset)
            heapq.heappush(self._extra_heap, offset)
        if self.position is None or offset >= self.position:
            self.position = offset + 1

    # -- the commit point -------------------------------------------------------------------------

    def first_pending(self) -> int:
        """The first pending slot (``len(offsets)`` when none); drops a long done prefix."""
        head = self.live.find(1, self.head)
        if head < 0:
            head = len(self.offsets)
        if head >= _DROP_FROM and 2 * head >= len(self.offsets):
            columns = (
                self.offsets,
                self.roots,
                self.attempts,
                self.tokens,
                self.first_ms,
                self.emitted_ms,
                self.records,
            )
            for column in columns:
                del column[:head]
            del self.live[:head]
            del self.states[:head]
            self.base += head
            head = 0
        self.head = head
        return head

    def commit_point(self) -> int | None:
        """Smallest pending offset, else the position advanced over offsets already done."""
        head = self.first_pending()
        if head < len(self.offsets):
            point = self.offsets[head]
        elif self.position is None:
            return None
        else:
            point = self.position
            while point in self.extra:  # done offsets primed from metadata, skipped on replay
                point += 1
            self.position = point
        extra_heap = self._extra_heap
        while extra_heap and extra_heap[0] < point:
            self.extra.discard(heapq.heappop(extra_heap))
        return point

    def done_above(self, point: int | None) -> list[int]:
        """Offsets done above ``point`` (the commit point), ascending."""
        head = self.head
        registered = list(itertools.compress(self.offsets[head:], map(operator.not_, self.live[head:])))
        extra = [o for o in self.extra if point is None or o > point]
        if not extra:
            return [o for o in registered if point is None or o > point]
        return sorted(itertools.chain((o for o in registered if point is None or o > point), extra))

    def pending_offsets(self) -> list[int]:
        head = self.first_pending()
        return list(itertools.compress(self.offsets[head:], self.live[head:]))

    def pending_slots(self) -> list[int]:
        """Indexes of the pending slots, ascending."""
        head = self.first_pending()
        live = self.live
        return [i for i in range(head, len(live)) if live[i]]
