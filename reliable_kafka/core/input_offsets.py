"""A parallel bolt's input offsets of one partition: which are done, and how far it may commit.

A bolt with many handler calls in flight finishes its records out of order. Its commit point on a
partition is the smallest offset received and not yet done, or, with nothing pending, the next
offset after everything seen; offsets never seen (compaction, transaction markers) never block.
Every offset below the commit point is done (docs/design.md section 6.1); the offsets done above it go in
the commit metadata (:mod:`reliable_kafka.core.commit_metadata`) so that a restarted bolt skips
them, and are read back on assign as ``done_above``.

Pure: no Kafka client, no threads, no clock; the bolt's loop calls it from its own thread.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable

from reliable_kafka.errors import ArgumentError

__all__ = ["InputOffsets"]


class InputOffsets:
    """Received and done offsets of one assigned partition.

    ``committed``: the group's committed offset at assign (None: none yet; reading starts where
    the consumer's reset policy says). ``done_above``: offsets the commit metadata records as done
    above it; :meth:`skip` answers True for them, so a restart does not run them again.
    Offsets are received in ascending order (the order a consumer delivers one partition).
    """

    __slots__ = ("_pending", "_done", "_restored", "_restored_heap", "_position")

    def __init__(self, committed: int | None = None, done_above: Iterable[int] = ()) -> None:
        self._pending: deque[int] = deque()  # received, ascending, from the first one not done
        self._done: set[int] = set()  # done offsets among _pending (the others are dropped)
        restored = {o for o in done_above if committed is not None and o >= committed}
        self._restored = restored  # done by an earlier owner, not received in this assignment
        self._restored_heap = sorted(restored)
        self._position = committed  # next offset after everything seen (None: nothing known)

    def skip(self, offset: int) -> bool:
        """True if ``offset`` was done by an earlier owner (commit metadata): count it seen, skip it."""
        if offset not in self._restored:
            return False
        self._see(offset)
        return True

    def received(self, offset: int) -> None:
        """``offset`` is in flight now (above every offset received before)."""
        if self._pending and offset <= self._pending[-1]:
            raise ArgumentError(f"InputOffsets: offset {offset} received after {self._pending[-1]} (not ascending)")
        self._pending.append(offset)
        self._see(offset)

    def done(self, offset: int) -> None:
        """``offset`` (received) is done: its outputs and ack entries are handed to the producer."""
        pending = self._pending
        if not pending or offset < pending[0] or offset in self._done:
            return  # dropped already (done), or never received here: nothing to do
        self._done.add(offset)
        while pending and pending[0] in self._done:
            self._done.discard(pending.popleft())

    def _see(self, offset: int) -> None:
        if self._position is None or offset >= self._position:
            self._position = offset + 1

    @property
    def in_flight(self) -> int:
        """Offsets received and not done."""
        return len(self._pending) - len(self._done)

    def commit_point(self) -> int | None:
        """The offset to commit: every offset below it is done (None: nothing known yet)."""
        if self._pending:
            return self._pending[0]
        point = self._position
        if point is None:
            return None
        while point in self._restored:  # restored done offsets right above: skipped by a replay anyway
            point += 1
        self._position = point
        heap = self._restored_heap
        while heap and heap[0] < point:
            self._restored.discard(heapq.heappop(heap))
        return point

    def done_above(self, point: int | None = None) -> list[int]:
        """Offsets done above ``point`` (default: the commit point), ascending: the commit metadata's."""
        if point is None:
            point = self.commit_point()
        if point is None:
            return []
        return sorted(o for o in (*self._done, *self._restored) if o > point)
