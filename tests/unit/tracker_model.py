"""A reference model of the in-flight tracker (``reliable_kafka.core.tracker.InFlightTracker``), for tests.

Written from the tracker's contract (docs/design.md section 5 and the tracker's docstrings), as
plainly as possible: a dict of pending entries per partition, a set of done offsets, and answers
computed from them on every call (min, sorted, filters). No speed matters here; obviousness does.
test_tracker_columns.py drives the model and the tracker with the same operations and compares.

One liberty: the tracker moves a partition's position over offsets restored as done only when its
commit point is read; the model computes it on every call. The test reads the commit points after
every step, where the two must agree.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from reliable_kafka.core.backoff import Backoff
from reliable_kafka.core.outcome_actions import ActionKind
from reliable_kafka.errors import ArgumentError

IN_FLIGHT, RETRY, REDELIVERING, DEAD_LETTER = "in flight", "retry", "redelivering", "dead letter"
STATS = ("emitted", "completed", "failed", "timed_out", "backstop_expired", "redelivered", "dead_lettered")


@dataclass
class Entry:
    """A pending offset."""

    root: int  # 0 once its attempt failed (no root held)
    attempt: int
    first_ms: int  # first emit in this assignment (pending_summary's age)
    emitted_ms: int  # this attempt's emit (complete latency)
    record: object
    state: str = IN_FLIGHT
    reason: str = ""  # why its last attempt failed
    deadline: int = 0  # backstop deadline (IN_FLIGHT)
    expiry_order: int = 0  # registrations and resets are timed out in the order they were made
    due: int = 0  # redelivery due time (RETRY)
    failure_order: int = 0  # equal due times: redelivered in the order they failed


@dataclass
class Partition:
    position: int | None  # next offset after every offset committed, registered or done
    done: set[int] = field(default_factory=set)
    restored_above: int = 0  # above every offset restored as done from commit metadata
    pending: dict[int, Entry] = field(default_factory=dict)

    def commit_point(self) -> int | None:
        """Smallest pending offset; else the position, moved over offsets already done."""
        if self.pending:
            return min(self.pending)
        point = self.position
        while point is not None and point in self.done:
            point += 1
        return point

    def first_new(self) -> int | None:
        """Registering an offset below this is refused unless it is pending (a re-emission): past
        every offset committed, registered or done, and past the commit point (which may have moved
        over offsets restored as done; those not passed yet may still be registered)."""
        point = self.commit_point()
        return None if point is None else max(point, self.position or 0)


class TrackerModel:
    def __init__(self, *, max_pending: int | None, max_retries: int | None, backoff: Backoff, backstop_ms: int, clock):
        self.max_pending, self.max_retries, self.backoff = max_pending, max_retries, backoff
        self.backstop_ms, self.clock = backstop_ms, clock
        self.parts: dict[tuple[str, int], Partition] = {}
        self.roots: dict[int, tuple[tuple[str, int], int]] = {}  # root in flight -> (tp, offset)
        self.stats = dict.fromkeys((*STATS, "ignored_outcomes"), 0)
        self.by_reason: dict[str, int] = {}
        self.latencies: list[float] = []
        self.order = 0  # one counter for expiry_order and failure_order: only their order matters

    def _next(self) -> int:
        self.order += 1
        return self.order

    def assign(self, tp, *, committed, done_above=()):
        self.revoke(tp)
        done = {o for o in done_above if o >= committed} if committed is not None else set()
        self.parts[tp] = Partition(committed, done, max(done, default=-1) + 1)

    def revoke(self, tp):
        part = self.parts.pop(tp, None)
        if part is None:
            return None
        for entry in part.pending.values():
            self.roots.pop(entry.root, None)
        return part.commit_point()

    def emitted(self, tp, offset, *, root, attempt=1, record=None):
        part = self.parts.setdefault(tp, Partition(None))
        entry = part.pending.get(offset)
        limit = part.first_new()
        if entry is None and limit is not None and offset < limit:
            raise ArgumentError(offset)  # names the offset refused; nothing changed
        now = self.clock()
        if entry is None:
            entry = part.pending[offset] = Entry(root, attempt, now, now, record)
        else:  # re-emission: a new root and attempt, the old root forgotten
            self.roots.pop(entry.root, None)
            entry.root, entry.attempt, entry.emitted_ms, entry.state = root, attempt, now, IN_FLIGHT
            entry.record = record if record is not None else entry.record
        entry.deadline, entry.expiry_order = now + self.backstop_ms, self._next()
        self.roots[root] = (tp, offset)
        part.done.discard(offset)
        part.position = max(part.position or 0, offset + 1)
        self.stats["emitted"] += 1
        return root

    def emitted_many(self, tp, offsets, roots, *, records):
        if not offsets:
            return
        part = self.parts.setdefault(tp, Partition(None))
        limit, seen = part.first_new(), set()  # refused if one pair would be: then nothing changes
        for offset in offsets:
            if offset in seen or offset in part.pending:
                continue
            if limit is not None and offset < limit:
                raise ArgumentError(offset)  # names the offset refused; nothing changed
            seen.add(offset)
            limit = offset + 1
        for offset, root, record in zip(offsets, roots, records):
            self.emitted(tp, offset, root=root, record=record)

    def done_immediately(self, tp, offset):
        self._done(self.parts.setdefault(tp, Partition(None)), offset)

    def _done(self, part, offset):
        entry = part.pending.pop(offset, None)
        if entry is not None:
            self.roots.pop(entry.root, None)
        part.done.add(offset)
        part.position = max(part.position or 0, offset + 1)

    def _held(self, root):
        tp, offset = self.roots[root]
        return tp, offset, self.parts[tp].pending[offset]

    def complete_many(self, roots):
        out = []
        for root in roots:
            if root not in self.roots:
                self.stats["ignored_outcomes"] += 1
                continue
            tp, offset, entry = self._held(root)
            self.latencies.append((self.clock() - entry.emitted_ms) / 1000.0)
            self._done(self.parts[tp], offset)
            self.stats["completed"] += 1
            out.append((tp, offset, entry.attempt))
        return out

    def on_outcome(self, root, kind):
        """``kind``: an OutcomeKind's name; the action as a tuple of the tracker's OutcomeAction fields."""
        if root not in self.roots:
            self.stats["ignored_outcomes"] += 1
            return None
        if kind == "COMPLETED":
            tp, offset, attempt = self.complete_many([root])[0]
            return (ActionKind.DONE, tp, offset, attempt, "COMPLETED", None, None)
        tp, offset, entry = self._held(root)
        if kind == "RESET_TIMEOUT":  # no outcome: the backstop deadline moves
            entry.deadline, entry.expiry_order = self.clock() + self.backstop_ms, self._next()
            return None
        self.stats["failed" if kind == "FAILED" else "timed_out"] += 1
        return self._failed(tp, offset, entry, kind, self.clock())

    def _failed(self, tp, offset, entry, reason, now):
        root = entry.root
        del self.roots[root]
        entry.root, entry.reason, entry.failure_order = 0, reason, self._next()
        if self.max_retries is None or entry.attempt <= self.max_retries:
            entry.state, entry.due = RETRY, now + self.backoff.delay_ms(entry.attempt)
            return (ActionKind.REDELIVER, tp, offset, entry.attempt, reason, entry.due, root)
        entry.state = DEAD_LETTER
        return (ActionKind.DEAD_LETTER, tp, offset, entry.attempt, reason, None, root)

    def _entry(self, tp, offset):
        """The pending entry of ``offset``, or None."""
        return self.parts[tp].pending.get(offset) if tp in self.parts else None

    def give_up(self, tp, offset, reason):
        entry = self._entry(tp, offset)
        if entry is None or entry.state not in (RETRY, REDELIVERING):
            return None
        entry.state, entry.reason = DEAD_LETTER, reason
        return (ActionKind.DEAD_LETTER, tp, offset, entry.attempt, reason, None, None)

    def dead_lettered(self, tp, offset):
        entry = self._entry(tp, offset)
        if entry is not None and entry.state == DEAD_LETTER:
            self._done(self.parts[tp], offset)
            self.stats["dead_lettered"] += 1
            self.by_reason[entry.reason] = self.by_reason.get(entry.reason, 0) + 1

    def _entries(self, state):
        return [(tp, o, e) for tp, part in self.parts.items() for o, e in part.pending.items() if e.state == state]

    def due_redeliveries(self, limit=None):
        """``(tp, offset, next attempt, reason)`` of the records due, oldest due first."""
        due = [x for x in self._entries(RETRY) if x[2].due <= self.clock()]
        due.sort(key=lambda x: (x[2].due, x[2].failure_order))
        out = []
        for tp, offset, entry in due[:limit]:
            entry.state = REDELIVERING
            out.append((tp, offset, entry.attempt + 1, entry.reason))
        self.stats["redelivered"] += len(out)
        return out

    def expire_backstop(self):
        now = self.clock()
        expired = [x for x in self._entries(IN_FLIGHT) if x[2].deadline <= now]
        expired.sort(key=lambda x: (x[2].deadline, x[2].expiry_order))
        self.stats["backstop_expired"] += len(expired)
        return [self._failed(tp, offset, entry, "backstop_expired", now) for tp, offset, entry in expired]

    def next_due_ms(self):
        times = [e.due for _, _, e in self._entries(RETRY)] + [e.deadline for _, _, e in self._entries(IN_FLIGHT)]
        return min(times, default=None)

    def commit_points(self):
        points = {tp: part.commit_point() for tp, part in self.parts.items()}
        return {tp: point for tp, point in points.items() if point is not None}

    def done_above(self, tp):
        part = self.parts.get(tp)
        return [] if part is None else sorted(o for o in part.done if o > part.commit_point())

    def should_skip(self, tp, offset):
        part = self.parts.get(tp)
        if part is None or offset in part.pending:
            return False
        point = part.commit_point()
        return offset in part.done or (point is not None and offset < point)

    def first_unseen(self, tp):
        part = self.parts.get(tp)
        return 0 if part is None else max(part.first_new() or 0, part.restored_above)

    def pending_in(self, *states):
        """``(tp, offset)`` of the pending offsets in one of ``states``, sorted."""
        return sorted((tp, offset) for state in states for tp, offset, _ in self._entries(state))

    def records_held(self):
        return sorted(
            (tp, o) for tp, part in self.parts.items() for o, e in part.pending.items() if e.record is not None
        )

    def over_max_pending(self):
        return self.max_pending is not None and len(self.roots) >= self.max_pending

    def pending_offsets(self, tp):
        return sorted(self.parts[tp].pending) if tp in self.parts else []

    def record(self, tp, offset):
        entry = self._entry(tp, offset)
        return None if entry is None else entry.record

    def unsettled(self, tp):
        pending = self.parts[tp].pending if tp in self.parts else {}
        return [
            (o, e.attempt, e.state != IN_FLIGHT)
            for o, e in sorted(pending.items())
            if e.attempt > 1 or e.state != IN_FLIGHT
        ]

    def pending_summary(self):
        summary = {}
        for tp, part in self.parts.items():
            if part.pending:
                oldest = min(part.pending)
                retrying = sum(e.state != IN_FLIGHT for e in part.pending.values())
                summary[tp] = (len(part.pending), retrying, oldest, part.pending[oldest].first_ms)
        return summary

    def latency_counts(self, bounds):
        counts = [0] * (len(bounds) + 1)
        for seconds in self.latencies:
            counts[bisect.bisect_left(bounds, seconds)] += 1
        return counts
