"""The acker's per-partition table: folds ack records into pending roots and keeps time.

One :class:`AckerTable` per ack-topic partition. The shell decodes an ack record into columns and
calls :meth:`AckerTable.fold` (or hands several records to :meth:`AckerTable.fold_records`, which
decides the same and shares the per-call cost) and publishes the roots it decided
(:class:`Outcomes`). Three pieces, each in its own module:

* the rule, Storm's few lines: the XOR update, the decision (COMPLETED, FAILED, a RESET_TIMEOUT
  notice, or nothing), and the one out-of-order rule (a FAIL or ACK before the INIT waits for the
  owner): :mod:`reliable_kafka.core.acker_rule`;
* the rule applied to a group of records at once, deciding as record by record would:
  :mod:`reliable_kafka.core.acker_fold`;
* storage (insert, look up, update, remove, expire a bucket): :mod:`reliable_kafka.core.root_store`.

This module looks the group's roots up once, folds them (:meth:`AckerTable._apply`), stores what
stays pending, and keeps time:

* Timeouts use event time. The partition clock is the largest event time seen (record timestamps
  passed to ``fold``, wall time passed to ``advance``); it never moves back. Time is cut into
  buckets of width ``w = ceil(timeout_ms / buckets)``. A root touched (created, INIT or
  RESET_TIMEOUT) when the clock read ``c`` gets the deadline bucket ``d = (c + timeout_ms) // w``
  and expires at the first call whose clock reaches ``(d + 1) * w``: never while the clock is at
  or below ``c + timeout_ms``, always once it reaches ``c + timeout_ms + w``. Expiry happens
  before the batch that moved the clock is folded (events at time t see the state as of t).
  An expired root with an owner gives TIMED_OUT; one whose INIT never came is dropped and
  counted (``expired_ownerless``). Buckets live in a ring of ``buckets + 1`` (Storm's
  RotatingMap); expiry scans the table once per rotation.
* Commit low point: every bucket keeps the smallest ack-record offset at which one of its roots
  was first seen, and its live count. :meth:`AckerTable.low_offset` is the minimum over buckets
  that still hold roots: never above the first offset of any pending root, so a replay from it
  rebuilds the table. A root that moves bucket (RESET_TIMEOUT, a late INIT) carries its old
  bucket's minimum along, which can only be lower than its own.
* Owners: the store keeps a small index per root; this table maps it to the spout task id
  (one byte a root while at most 255 spout tasks own pending roots, two bytes beyond).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from reliable_kafka.core.acker_fold import MIX, Group, run_starts
from reliable_kafka.core.acker_rule import FAIL_BIT, INIT_BIT, KIND_BITS, NOTHING, RESET_BIT
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.core.root_store import MAX_BUCKETS, RootStore
from reliable_kafka.errors import ArgumentError, ConfigError, ReliableKafkaError

__all__ = ["AckerTable", "AckerStats", "Outcomes"]

_MAX_OWNER_INDEX = 0xFFFF  # owner indices are uint16 at most; 0 means "INIT not seen yet"
_NARROW_OWNERS = 192  # owners that one byte a slot keeps after a compaction, at most

_MAX_KIND = len(KIND_BITS) - 1
_INIT = int(EventKind.INIT)  # plain ints: comparing arrays with an IntEnum member is slow
_FAILED_KIND = int(OutcomeKind.FAILED)


def _columns(kinds: ArrayLike, roots: ArrayLike, vals: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kinds = np.asarray(kinds)
    roots = np.asarray(roots, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.int64)
    if kinds.ndim != 1 or kinds.shape != roots.shape or kinds.shape != vals.shape:
        raise ArgumentError(
            "AckerTable.fold: kinds, roots and vals must be 1-d arrays of one "
            f"length, got shapes {kinds.shape}, {roots.shape}, {vals.shape}"
        )
    return kinds, roots, vals


@dataclass(frozen=True)
class Outcomes:
    """The roots one call decided, in columns (parallel arrays), and the RESET_TIMEOUT notices
    for their owners (kind RESET_TIMEOUT: the root stays pending)."""

    roots: np.ndarray  # int64 root ids
    owners: np.ndarray  # int64 spout task ids (the INIT's sender)
    kinds: np.ndarray  # uint8 OutcomeKind values

    def __len__(self) -> int:
        return len(self.roots)

    def by_owner(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Owner task id -> (roots, kinds) for that owner, ready to publish one record each."""
        if not len(self.roots):
            return {}
        first = self.owners[0]
        if (self.owners == first).all():  # one spout task (the common case): no sort
            return {int(first): (self.roots, self.kinds)}
        order = np.argsort(self.owners, kind="stable")
        owners = self.owners[order]
        starts = run_starts(owners).nonzero()[0]
        ends = np.append(starts[1:], len(owners))
        roots, kinds = self.roots[order], self.kinds[order]
        return {int(owners[s]): (roots[s:e], kinds[s:e]) for s, e in zip(starts, ends)}

    @staticmethod
    def empty() -> Outcomes:
        """No decisions."""
        return _NO_OUTCOMES

    @staticmethod
    def concat(parts: list[Outcomes]) -> Outcomes:
        """The decisions of several calls, in order."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return Outcomes.empty()
        if len(parts) == 1:
            return parts[0]
        return Outcomes(
            np.concatenate([p.roots for p in parts]),
            np.concatenate([p.owners for p in parts]),
            np.concatenate([p.kinds for p in parts]),
        )


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


_NO_OUTCOMES = Outcomes(_frozen(np.empty(0, np.int64)), _frozen(np.empty(0, np.int64)), _frozen(np.empty(0, np.uint8)))


@dataclass
class AckerStats:
    """Counters since the table was created (the shell exports them as metrics)."""

    entries_folded: int = 0  # valid entries XORed in
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    expired_ownerless: int = 0  # roots that timed out before their INIT arrived
    invalid_entries: int = 0  # root 0 or unknown kind: skipped
    reset_notices: int = 0  # RESET_TIMEOUT forwarded to a root's owner
    rebuilds: int = 0  # rehashes into a larger or smaller table


class AckerTable:
    """Pending roots of one ack partition, folded batch by batch.

    Keyword-only configuration:

    * ``message_timeout_ms`` (default 30_000, Storm's message timeout): how long a root may stay
      pending after it was first seen, its INIT, or its last RESET_TIMEOUT, in event time.
    * ``buckets`` (default 4, 1 to 30): timeout buckets; expiry comes at most ``message_timeout_ms /
      buckets`` late, and the commit low point moves in steps of about that much.
    * ``initial_capacity`` (default 1024): slots allocated up front (rounded up to a prime number
      of groups of 8). The table grows and shrinks by itself; this only saves early rebuilds.
    """

    def __init__(self, *, message_timeout_ms: int = 30_000, buckets: int = 4, initial_capacity: int = 1024) -> None:
        if not isinstance(message_timeout_ms, int) or message_timeout_ms < 1:
            raise ConfigError(f"AckerTable: message_timeout_ms must be a positive int, got {message_timeout_ms!r}")
        if not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS:
            raise ConfigError(f"AckerTable: buckets must be an int from 1 to {MAX_BUCKETS}, got {buckets!r}")
        if not isinstance(initial_capacity, int) or initial_capacity < 1:
            raise ConfigError(f"AckerTable: initial_capacity must be a positive int, got {initial_capacity!r}")
        self._timeout = message_timeout_ms
        self._width = -(-message_timeout_ms // buckets)
        self._ring = buckets + 1
        self._store = RootStore(ring=self._ring, initial_capacity=initial_capacity)
        self._clock: int | None = None
        self._owner_index: dict[int, int] = {}
        self._owner_ids = np.zeros(16, np.int64)  # owner index -> spout task id; [0] unused
        self._owner_compactions = 0
        self._stats = AckerStats()

    # ----------------------------------------------------------------------------- public API

    @property
    def message_timeout_ms(self) -> int:
        return self._timeout

    @property
    def timeout_ms(self) -> int:
        """The old name of :attr:`message_timeout_ms`."""
        return self._timeout

    @property
    def bucket_width_ms(self) -> int:
        """Width of one timeout bucket: the most an expiry can come late."""
        return self._width

    @property
    def clock_ms(self) -> int | None:
        """The partition clock (largest event or wall time seen), None before the first call."""
        return self._clock

    @property
    def pending(self) -> int:
        """Roots held (not yet decided)."""
        return self._store.live

    @property
    def capacity(self) -> int:
        """Slots allocated."""
        return self._store.capacity

    @property
    def nbytes(self) -> int:
        """Bytes held by all of the table's arrays."""
        return self._store.nbytes + self._owner_ids.nbytes

    @property
    def stats(self) -> AckerStats:
        """A snapshot of the counters."""
        return dataclasses.replace(self._stats)

    @property
    def expired_ownerless(self) -> int:
        """``stats.expired_ownerless`` without copying the counters (the worker reads it every poll)."""
        return self._stats.expired_ownerless

    def low_offset(self) -> int | None:
        """Smallest ack-record offset a replay must start from; None when nothing is pending."""
        return self._store.low_offset()

    def advance(self, now_ms: int) -> Outcomes:
        """Move the clock to ``now_ms`` (wall time, when the partition is idle) and expire."""
        return self._advance_clock(int(now_ms))

    def fold(
        self, kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray, *, sender: int, event_time_ms: int, offset: int
    ) -> Outcomes:
        """Fold one ack record's entries; returns what this call decided (expiries first).

        ``kinds`` (EventKind values), ``roots`` and ``vals`` (int64) are parallel columns;
        ``sender`` is the task that wrote the record (the owner, for its INITs);
        ``event_time_ms`` its timestamp and ``offset`` its offset in the ack partition.
        Entries with root 0 or an unknown kind are skipped and counted as invalid.
        """
        return self.fold_records([(kinds, roots, vals, sender, event_time_ms, offset)])

    def fold_records(self, records: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]]) -> Outcomes:
        """Fold several ack records in order; each is ``(kinds, roots, vals, sender,
        event_time_ms, offset)`` as for :meth:`fold`.

        Decides exactly what folding them one by one would (the same outcomes, counters and
        pending roots), but shares the per-call cost: records whose times fall in one timeout
        bucket are folded together (:mod:`reliable_kafka.core.acker_fold`).
        """
        records = [(*_columns(k, r, v), int(s), int(t), int(o)) for k, r, v, s, t, o in records]
        parts: list[Outcomes] = []
        i = 0
        while i < len(records):
            parts.append(self._advance_clock(records[i][4]))
            assert self._clock is not None  # the call above set it
            # Later records join while they move the clock neither past a bucket boundary (no
            # expiry due) nor to a new newest deadline (one head bucket for all).
            base, head = self._clock // self._width, (self._clock + self._timeout) // self._width
            j, clock = i + 1, self._clock
            while j < len(records):
                moved = max(clock, records[j][4])
                if moved // self._width != base or (moved + self._timeout) // self._width != head:
                    break
                clock, j = moved, j + 1
            self._clock = clock
            parts.append(self._fold_group(records[i:j]))
            i = j
        return Outcomes.concat(parts)

    def _valid(self, kinds: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
        """The entries (kinds, then roots and any parallel columns) with a non-zero root and a
        known kind; counts the others."""
        invalid = (columns[0] == 0) | (kinds > _MAX_KIND)
        if kinds.dtype.kind != "u":
            invalid |= kinds < 0
        if not invalid.any():
            return (kinds, *columns)
        self._stats.invalid_entries += int(np.count_nonzero(invalid))
        valid = ~invalid
        return tuple(column[valid] for column in (kinds, *columns))

    def _fold_group(self, records: list[tuple[Any, ...]]) -> Outcomes:
        """Fold records that share one clock bucket and one head bucket (no expiry between)."""
        if len(records) == 1:
            kinds, roots, vals, sender, _, offset = records[0]
            kinds, roots, vals = self._valid(kinds, roots, vals)
            record = None
        else:
            kinds, roots, vals, record = self._valid(
                *(np.concatenate([r[c] for r in records]) for c in range(3)),
                np.repeat(np.arange(len(records)), [len(r[1]) for r in records]),
            )
        if not len(roots):
            return _NO_OUTCOMES
        self._stats.entries_folded += len(roots)
        senders = self._senders(records)
        offsets = np.array([r[5] for r in records], np.int64)
        return self._apply(Group(kinds, roots, vals, record, senders), offsets)

    def _senders(self, records: list[tuple[Any, ...]]) -> np.ndarray:
        """The owner index of each record's sender; 0 for an unknown sender whose record holds no
        valid INIT (only INITs read it). A sender becomes an owner only with a valid INIT: a dict
        look-up a record, no pass over the entries unless the sender is new."""
        senders = np.zeros(len(records), np.uint16)
        for _attempt in range(2):  # owner indices renumbered meanwhile: once more
            compactions = self._owner_compactions
            for i, (kinds, roots, *_) in enumerate(records):
                index = self._owner_index.get(records[i][3])
                if index is None and ((kinds == _INIT) & (roots != 0)).any():
                    index = self._owner_index_of(records[i][3])
                senders[i] = index or 0
            if self._owner_compactions == compactions:
                break
        return senders

    def _apply(self, group: Group, offsets: np.ndarray) -> Outcomes:
        """Look up the group's roots (once), fold them by the rule (:meth:`Group.fold`), store
        what stays pending and drop what was decided; returns the decisions and notices."""
        store, roots = self._store, group.roots
        pair, step = store.locate(group.mixed)
        slots = self._find(roots, pair, step)
        folded = group.fold(*store.read(slots))
        found = slots >= 0
        decided = folded.decision != NOTHING
        # A fresh entry began after an earlier decision in the group: the stored one is gone.
        stored = found if folded.fresh is None else found & ~folded.fresh
        stays = ~decided & stored  # pending before and after
        new = (~decided & ~stored).nonzero()[0]
        gone = (found & ~stays).nonzero()[0]
        need = store.live + len(new)
        if not store.fits(need):
            self._rebuild(need)  # then look again: the groups changed
            pair, step = store.locate(group.mixed)
            slots = self._find(roots, pair, step)
        if len(gone):
            store.remove(slots.take(gone))
        if len(new):  # where the new entries were first seen: their first records
            store.insert(
                roots.take(new),
                pair[new],
                step.take(new),
                head=self._head_bucket(),
                offset=int(offsets[folded.first_record.take(new)].min()),
                vals=folded.val.take(new),
                owner=folded.owner.take(new),
                failed=folded.failed.take(new),
            )
        # Roots that stay: write only what changed (each write is a random access).
        stay = stays.nonzero()[0]
        at, bits = slots.take(stay), folded.bits.take(stay)
        init = (bits & INIT_BIT).nonzero()[0]
        store.update(
            at,
            folded.val.take(stay),
            owned=init,
            owner=folded.owner[stay[init]],
            failed=(bits & FAIL_BIT).nonzero()[0],
        )
        moved = (bits & (INIT_BIT | RESET_BIT)).nonzero()[0]
        if len(moved):
            store.move_to_head(at[moved], self._head_bucket())

        ended, decided = folded.ended, decided.nonzero()[0]
        kinds = np.concatenate([folded.decision[decided], folded.ended_kind])
        n_failed = int(np.count_nonzero(kinds == _FAILED_KIND))
        self._stats.failed += n_failed
        self._stats.completed += len(kinds) - n_failed
        self._stats.reset_notices += len(folded.notices)
        if not len(kinds) and not len(folded.notices):
            return _NO_OUTCOMES
        return Outcomes(
            np.concatenate([roots[decided], roots[ended], roots[folded.notices]]),
            self._owner_ids[np.concatenate([folded.owner[decided], folded.ended_owner, folded.notice_owner])],
            np.concatenate([kinds, np.full(len(folded.notices), OutcomeKind.RESET_TIMEOUT, np.uint8)]),
        )

    def _find(self, keys: np.ndarray, pair: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Slot of each of the distinct ``keys`` (-1: absent); one lookup per fold group."""
        return self._store.find(keys, pair, step)

    def _rebuild(self, need: int) -> None:
        """Rehash into a table where ``need`` roots fill the target load."""
        self._store.rebuild(need)
        self._stats.rebuilds += 1

    # ----------------------------------------------------------------------------- time

    def _head_bucket(self) -> int:
        """Ring index of the deadline a root touched now gets."""
        assert self._clock is not None  # a fold sets it first
        return ((self._clock + self._timeout) // self._width) % self._ring

    def _advance_clock(self, now: int) -> Outcomes:
        if self._clock is None:
            self._clock = now
            return Outcomes.empty()
        if now <= self._clock:
            return Outcomes.empty()
        old, new = self._clock // self._width, now // self._width
        self._clock = now
        if new == old:
            return Outcomes.empty()
        # Live deadlines lie in [old, old + buckets]; every one below ``new`` is due.
        keys, owner = self._store.expire([(old + i) % self._ring for i in range(min(new - old, self._ring))])
        if not len(keys):
            return Outcomes.empty()
        known = owner != 0
        n_known = int(np.count_nonzero(known))
        self._stats.timed_out += n_known
        self._stats.expired_ownerless += len(keys) - n_known
        return Outcomes(keys[known], self._owner_ids[owner[known]], np.full(n_known, OutcomeKind.TIMED_OUT, np.uint8))

    # ----------------------------------------------------------------------------- owners

    def _owner_index_of(self, sender: int) -> int:
        index = self._owner_index.get(sender)
        if index is not None:
            return index
        index = len(self._owner_index) + 1
        if index > _MAX_OWNER_INDEX:
            self._compact_owners()
            index = len(self._owner_index) + 1
            if index > _MAX_OWNER_INDEX:
                raise ReliableKafkaError(
                    f"AckerTable: more than {_MAX_OWNER_INDEX} spout tasks own pending roots in "
                    "one ack partition; use more ack partitions"
                )
        if index > np.iinfo(self._store.owner.dtype).max:  # 255 owners in one byte: make room
            self._compact_owners()
            index = len(self._owner_index) + 1
            if index > _NARROW_OWNERS:  # still many: two bytes a slot from now on
                self._store.widen_owners()
        if index >= len(self._owner_ids):
            self._owner_ids = np.concatenate([self._owner_ids, np.zeros_like(self._owner_ids)])
        self._owner_ids[index] = sender
        self._owner_index[sender] = index
        return index

    def _compact_owners(self) -> None:
        """Forget spout tasks that own no pending root (e.g. earlier incarnations)."""
        used = self._store.owners_in_use()
        remap = np.zeros(_MAX_OWNER_INDEX + 1, np.uint16)
        remap[used] = np.arange(1, len(used) + 1, dtype=np.uint16)
        self._store.renumber_owners(remap)
        ids = self._owner_ids[used]
        self._owner_ids = np.zeros(max(16, 2 * (len(used) + 1)), np.int64)
        self._owner_ids[1 : len(used) + 1] = ids
        self._owner_index = {int(t): i + 1 for i, t in enumerate(ids)}
        self._owner_compactions += 1

    # ----------------------------------------------------------------------------- checks

    @property
    def _owner(self) -> np.ndarray:
        """The store's owner indices (tests look at their width)."""
        return self._store.owner

    @property
    def _overflow(self) -> np.ndarray:
        """The store's overflow counts (tests check that far roots were made)."""
        return self._store.overflow

    def _state_of(self, root: int) -> dict[str, Any] | None:
        """One root's entry (for tests and debugging): val, owner, failed, bucket."""
        if root == 0:  # 0 marks free slots; no root has it
            return None
        key = np.array([root], np.int64)
        pair, step = self._store.locate(key.view(np.uint64) * MIX)
        slot = int(self._find(key, pair, step)[0])
        if slot < 0:
            return None
        val, owner, failed, bucket = self._store.state_at(slot)
        return {
            "val": val,
            "owner": int(self._owner_ids[owner]) if owner else None,
            "failed": failed,
            "bucket": bucket,
        }

    def _audit(self) -> list[str]:
        """Internal invariants that do not hold; empty when the table is sound."""
        return self._store.audit()
