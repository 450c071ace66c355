"""The acker table's documented semantics written plainly with a dict: a differential oracle.

:class:`ReferenceAcker` takes the same calls as
:class:`~reliable_kafka.core.acker_table.AckerTable` (``fold``, ``fold_records``, ``advance``) and
returns what it decided as a list of ``(root, owner, kind)`` (OutcomeKind values, RESET_TIMEOUT
notices included). It shares no code with the table, so the unit tests and the simulation can
hold the table to it call by call. ``entries`` maps each pending root to its state, with the
ack offset at which its entry began; ``low_bound()`` is the smallest of those: the table's
``low_offset()`` must never be above it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike

from reliable_kafka.core.acker_table import AckerStats
from reliable_kafka.core.kinds import EventKind, OutcomeKind

__all__ = ["Decision", "ReferenceAcker", "ReferenceEntry"]

Decision = tuple[int, int, int]  # (root, owner, OutcomeKind value)

_INIT, _ACK, _FAIL, _RESET = (int(k) for k in EventKind)


class ReferenceEntry:
    """One pending root."""

    __slots__ = ("val", "owner", "failed", "deadline", "first_offset")

    def __init__(self, deadline: int, first_offset: int) -> None:
        self.val = 0
        self.owner: int | None = None
        self.failed = False
        self.deadline = deadline  # absolute bucket number: expires once the clock's bucket passes it
        self.first_offset = first_offset

    def state(self) -> tuple[int, int | None, bool, int]:
        return (self.val, self.owner, self.failed, self.deadline)


class ReferenceAcker:
    """Storm's acker over a dict, with the table's timeout buckets and counters."""

    def __init__(self, *, message_timeout_ms: int, buckets: int) -> None:
        self.timeout_ms = message_timeout_ms
        self.width = -(-message_timeout_ms // buckets)
        self.clock: int | None = None
        self.entries: dict[int, ReferenceEntry] = {}
        self.stats = AckerStats()

    @property
    def pending(self) -> int:
        return len(self.entries)

    def low_bound(self) -> int | None:
        """The smallest ack offset at which a pending root's entry began."""
        return min((e.first_offset for e in self.entries.values()), default=None)

    def advance(self, now_ms: int) -> list[Decision]:
        """Move the clock (never back) and expire every root whose deadline bucket has passed."""
        if self.clock is None:
            self.clock = now_ms
            return []
        if now_ms <= self.clock:
            return []
        self.clock = now_ms
        decided = []
        for root in [r for r, e in self.entries.items() if e.deadline < now_ms // self.width]:
            entry = self.entries.pop(root)
            if entry.owner is None:  # its INIT never came: dropped silently, counted
                self.stats.expired_ownerless += 1
            else:
                self.stats.timed_out += 1
                decided.append((root, entry.owner, int(OutcomeKind.TIMED_OUT)))
        return decided

    def fold(
        self, kinds: ArrayLike, roots: ArrayLike, vals: ArrayLike, *, sender: int, event_time_ms: int, offset: int
    ) -> list[Decision]:
        """One ack record: expiries first, then its entries, then the decisions."""
        decided = self.advance(event_time_ms)
        assert self.clock is not None  # advance() set it
        head = (self.clock + self.timeout_ms) // self.width
        touched: dict[int, bool] = {}  # root -> a RESET_TIMEOUT came for it in this record
        for kind, root, val in zip(np.asarray(kinds).tolist(), np.asarray(roots).tolist(), np.asarray(vals).tolist()):
            if root == 0 or not _INIT <= kind <= _RESET:
                self.stats.invalid_entries += 1
                continue
            self.stats.entries_folded += 1
            entry = self.entries.get(root)
            if entry is None:
                entry = self.entries[root] = ReferenceEntry(head, offset)
            if kind in (_INIT, _ACK):
                entry.val ^= val
            if kind == _INIT:
                entry.owner = sender
            elif kind == _FAIL:
                entry.failed = True
            if kind in (_INIT, _RESET):
                entry.deadline = head
            touched[root] = touched.get(root, False) or kind == _RESET
        for root, reset in touched.items():  # decisions come after the whole record
            entry = self.entries[root]
            if entry.owner is None:
                continue  # a FAIL or ACK before the INIT waits for the owner
            if entry.failed or entry.val == 0:
                del self.entries[root]
                if entry.failed:
                    self.stats.failed += 1
                else:
                    self.stats.completed += 1
                kind = OutcomeKind.FAILED if entry.failed else OutcomeKind.COMPLETED
                decided.append((root, entry.owner, int(kind)))
            elif reset:
                self.stats.reset_notices += 1
                decided.append((root, entry.owner, int(OutcomeKind.RESET_TIMEOUT)))
        return decided

    def fold_records(self, records: Iterable[tuple[ArrayLike, ArrayLike, ArrayLike, int, int, int]]) -> list[Decision]:
        """Several records ``(kinds, roots, vals, sender, event_time_ms, offset)``, in order."""
        return [
            decision
            for kinds, roots, vals, sender, t, offset in records
            for decision in self.fold(kinds, roots, vals, sender=sender, event_time_ms=t, offset=offset)
        ]
