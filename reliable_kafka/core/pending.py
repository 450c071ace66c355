"""The tracker's pending offsets of one source partition, and the partition's commit point.

The commit point is the smallest pending offset, or, when nothing is pending, the position
(highest offset seen + 1) moved over offsets already done; offsets never seen never block it.
"""

from __future__ import annotations

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
