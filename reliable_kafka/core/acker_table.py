"""The acker's per-partition table: root -> (ack val, owner, failed flag, deadline bucket).

One :class:`AckerTable` per ack-topic partition. The shell decodes an ack record into columns and
calls :meth:`AckerTable.fold` (or hands several records to :meth:`AckerTable.fold_records`, which
decides the same and shares the per-call cost) and publishes the roots it decided
(:class:`Outcomes`). The rule itself, Storm's few lines, is :mod:`reliable_kafka.core.acker_rule`;
:mod:`reliable_kafka.core.acker_fold` applies it record by record to a group of records at once.
This module stores the result and keeps time:

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

Storage is columnar NumPy, no Python object per root: an open-addressing hash table of groups of
8 slots (keys and vals int64; owner as a one-byte index into the spout task ids seen, two bytes
once more than 255 own pending roots; one meta byte: live, failed, "far", ring bucket), 18 bytes
a slot, plus one overflow byte a group. A root may sit
in two groups (its home and the next on its double-hashing path, the group count being prime)
and goes to the one with more room, so one vectorised round finds nearly every root. Only when
both are full does it go further along its path; it is then marked far and counted in both
groups' overflow counts (as in Facebook's F14 tables), and lookups go past a pair only if both
counts are non-zero. No tombstones: a deleted slot is free at once. Loads stay between 0.68 and
0.9 (grow at 0.9 to 0.68, shrink below 0.15): about 20 to 27 bytes a pending root.
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
from reliable_kafka.deprecation import renamed_keywords
from reliable_kafka.errors import ArgumentError, ConfigError, ReliableKafkaError

__all__ = ["AckerTable", "AckerStats", "Outcomes"]

# Table geometry and sizing.
_GROUP = 8  # slots a lookup compares at once (8 int64 keys: one cache line)
_GROUP_BITS = 3
_WIDE_PROBE = 8  # probe positions a second lookup round looks at, at least
_AHEAD = np.arange(1, _WIDE_PROBE + 1)
_MAX_FILL = 0.90  # grow when the live roots would exceed this share of the slots ...
_TARGET_LOAD = 0.68  # ... to a size where they fill this share
_SHRINK_AT = 0.15  # shrink (to _TARGET_LOAD) when they fill less than this share

# One meta byte per slot; 0 is a free slot.
_LIVE = 0x80
_FAILED = 0x40  # a FAIL was seen
_FAR = 0x20  # the root sits past both its choices (it is in their overflow counts)
_BUCKET = 0x1F  # ring index of the root's deadline bucket
_MAX_BUCKETS = _BUCKET - 1  # the ring has buckets + 1 indices

# Bit tricks on a group's 8 meta bytes read as one little-endian word (byte i = slot i).
_META8 = np.dtype("<u8")
_HIGH_BITS = np.uint64(0x8080808080808080)
_ONE = np.uint64(1)
_SHIFT32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_STUCK = 255  # an overflow count that reached this stays there until a rebuild

_MAX_OWNER_INDEX = 0xFFFF  # owner indices are uint16 at most; 0 means "INIT not seen yet"
_NARROW_OWNERS = 192  # owners that one byte a slot keeps after a compaction, at most
_NO_OFFSET = np.iinfo(np.int64).max

_MAX_KIND = len(KIND_BITS) - 1
_INIT = int(EventKind.INIT)  # plain ints: comparing arrays with an IntEnum member is slow
_FAILED_KIND = int(OutcomeKind.FAILED)
_MIX = MIX


def _prime_at_least(n: int) -> int:
    """Smallest prime >= max(n, 2): a group count that every probe step is coprime with."""
    n = max(n, 2)
    while True:
        if (n % 2 or n == 2) and all(n % d for d in range(3, int(n**0.5) + 1, 2)):
            return n
        n += 1


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
        order = np.argsort(self.owners, kind="stable")
        owners = self.owners[order]
        starts = np.flatnonzero(run_starts(owners))
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
      pending after it was first seen, its INIT, or its last RESET_TIMEOUT, in event time. Its old
      name ``timeout_ms`` still works, with a DeprecationWarning.
    * ``buckets`` (default 4, 1 to 30): timeout buckets; expiry comes at most ``message_timeout_ms /
      buckets`` late, and the commit low point moves in steps of about that much.
    * ``initial_capacity`` (default 1024): slots allocated up front (rounded up to a prime number
      of groups of 8). The table grows and shrinks by itself; this only saves early rebuilds.
    """

    @renamed_keywords(timeout_ms="message_timeout_ms")
    def __init__(self, *, message_timeout_ms: int = 30_000, buckets: int = 4, initial_capacity: int = 1024) -> None:
        timeout_ms = message_timeout_ms
        if not isinstance(timeout_ms, int) or timeout_ms < 1:
            raise ConfigError(f"AckerTable: message_timeout_ms must be a positive int, got {timeout_ms!r}")
        if not isinstance(buckets, int) or not 1 <= buckets <= _MAX_BUCKETS:
            raise ConfigError(f"AckerTable: buckets must be an int from 1 to {_MAX_BUCKETS}, got {buckets!r}")
        if not isinstance(initial_capacity, int) or initial_capacity < 1:
            raise ConfigError(f"AckerTable: initial_capacity must be a positive int, got {initial_capacity!r}")
        self._timeout = timeout_ms
        self._width = -(-timeout_ms // buckets)
        self._ring = buckets + 1
        self._min_groups = _prime_at_least(-(-initial_capacity // _GROUP))
        self._owner_dtype: type = np.uint8  # one byte a slot while at most 255 owners are known
        self._allocate(self._min_groups)
        self._live = 0
        self._bucket_count = np.zeros(self._ring, np.int64)
        self._bucket_low = np.full(self._ring, _NO_OFFSET, np.int64)
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
        return self._live

    @property
    def capacity(self) -> int:
        """Slots allocated."""
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """Bytes held by all of the table's arrays."""
        return sum(
            a.nbytes
            for a in (
                self._keys,
                self._vals,
                self._owner,
                self._meta,
                self._overflow,
                self._bucket_count,
                self._bucket_low,
                self._owner_ids,
            )
        )

    @property
    def stats(self) -> AckerStats:
        """A snapshot of the counters."""
        return dataclasses.replace(self._stats)

    def low_offset(self) -> int | None:
        """Smallest ack-record offset a replay must start from; None when nothing is pending."""
        held = self._bucket_count > 0
        if not held.any():
            return None
        return int(self._bucket_low[held].min())

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
        senders = self._senders(records, kinds, record)
        offsets = np.array([r[5] for r in records], np.int64)
        return self._apply(Group(kinds, roots, vals, record, senders), offsets)

    def _senders(self, records: list[tuple[Any, ...]], kinds: np.ndarray, record: np.ndarray | None) -> np.ndarray:
        """The owner index of each record's sender (0 for records without an INIT)."""
        init = kinds == _INIT
        with_init = record[init] if record is not None else np.zeros(int(init.any()), np.intp)
        senders = np.zeros(len(records), np.uint16)
        with_init = np.flatnonzero(np.bincount(with_init, minlength=len(records))).tolist()
        for _attempt in range(2):  # owner indices renumbered meanwhile: once more
            compactions = self._owner_compactions
            for i in with_init:
                senders[i] = self._owner_index_of(records[i][3])
            if self._owner_compactions == compactions:
                break
        return senders

    def _apply(self, group: Group, offsets: np.ndarray) -> Outcomes:
        """Look up the group's roots (once), fold them (:meth:`Group.fold`), store what stays
        pending and drop what was decided; returns the decisions and RESET_TIMEOUT notices."""
        mixed, roots = group.mixed, group.roots
        step = self._step(mixed)
        pair = self._choices(self._home(mixed), step)
        slots = self._find(roots, pair, step)
        found = slots >= 0
        at = np.where(found, slots, 0)
        meta = self._meta[at]
        folded = group.fold(
            np.where(found, self._vals[at], 0), np.where(found, self._owner[at], 0), found & ((meta & _FAILED) != 0)
        )
        decided = folded.decision != NOTHING
        keep = ~decided
        # A fresh entry began after an earlier decision in the group: the stored one is gone.
        stale = found if folded.fresh is None else found & ~folded.fresh
        new = keep & ~stale
        n_new = int(np.count_nonzero(new))
        gone = np.flatnonzero(found & ~(keep & stale))
        need = self._live + n_new
        if need > self._fill_limit or (need < self._shrink_limit and self._groups > self._min_groups):
            self._rebuild(need)  # then look again: the groups changed
            step = self._step(mixed)
            pair = self._choices(self._home(mixed), step)
            slots = self._find(roots, pair, step)
        if len(gone):
            self._remove(slots[gone], self._meta[slots[gone]])
        if n_new:  # where the new entries were first seen: their first records
            self._insert(
                roots[new],
                pair[new],
                step[new],
                int(offsets[folded.first_record[new]].min()),
                folded.val[new],
                folded.owner[new],
                folded.failed[new],
            )
        # Roots that stay: write only what changed (each write is a random access).
        stay = np.flatnonzero(keep & stale)
        at, bits = slots[stay], folded.bits[stay]
        self._vals[at] = folded.val[stay]
        init = np.flatnonzero(bits & INIT_BIT)
        if len(init):
            self._owner[at[init]] = folded.owner[stay[init]]
        fail = np.flatnonzero(bits & FAIL_BIT)
        if len(fail):
            self._meta[at[fail]] |= np.uint8(_FAILED)
        moved = np.flatnonzero(bits & (INIT_BIT | RESET_BIT))
        if len(moved):
            self._move_to_head(at[moved], self._meta[at[moved]], np.ones(len(moved), bool))

        ended = folded.ended
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
        due = [(old + i) % self._ring for i in range(min(new - old, self._ring))]
        if not self._bucket_count[due].any():
            return Outcomes.empty()
        is_due = np.zeros(256, dtype=bool)
        for flags in (_LIVE, _LIVE | _FAILED, _LIVE | _FAR, _LIVE | _FAILED | _FAR):
            is_due[[flags | b for b in due]] = True
        slots = np.flatnonzero(is_due[self._meta])
        owner = self._owner[slots]
        known = owner != 0
        n_known = int(np.count_nonzero(known))
        self._stats.timed_out += n_known
        self._stats.expired_ownerless += len(slots) - n_known
        timed_out = Outcomes(
            self._keys[slots[known]], self._owner_ids[owner[known]], np.full(n_known, OutcomeKind.TIMED_OUT, np.uint8)
        )
        self._remove(slots, self._meta[slots])
        return timed_out

    def _move_to_head(self, slots: np.ndarray, meta: np.ndarray, touched: np.ndarray) -> np.ndarray:
        """Give the ``touched`` ones of ``slots`` (whose meta bytes are ``meta``) the newest
        deadline, carrying their old buckets' low offsets along; returns the new meta."""
        head = self._head_bucket()
        old = meta & _BUCKET
        moving = touched & (old != head)
        if not moving.any():
            return meta
        old = old[moving]
        meta = np.where(moving, (meta & np.uint8(~_BUCKET & 0xFF)) | np.uint8(head), meta)
        self._meta[slots] = meta
        self._bucket_low[head] = min(self._bucket_low[head], self._bucket_low[old].min())
        self._bucket_count -= np.bincount(old, minlength=self._ring)
        self._bucket_count[head] += len(old)
        self._bucket_low[self._bucket_count == 0] = _NO_OFFSET
        return meta

    # ----------------------------------------------------------------------------- hash table

    def _allocate(self, groups: int) -> None:
        self._groups = groups
        slots = groups * _GROUP
        self._keys = np.zeros(slots, np.int64)
        self._vals = np.zeros(slots, np.int64)
        self._owner: np.ndarray = np.zeros(slots, self._owner_dtype)
        self._meta = np.zeros(slots, np.uint8)
        self._overflow = np.zeros(groups, np.uint8)  # far roots that have the group as a choice
        self._max_probe = 0  # furthest probe position of any root
        self._fill_limit = int(_MAX_FILL * slots)
        self._shrink_limit = int(_SHRINK_AT * slots)

    def _home(self, mixed: np.ndarray) -> np.ndarray:
        """Home group of each mixed key: its high 32 bits scaled to the group count."""
        home: np.ndarray = (((mixed >> _SHIFT32) * np.uint64(self._groups)) >> _SHIFT32).astype(np.intp)
        return home

    def _step(self, mixed: np.ndarray) -> np.ndarray:
        """Probe step of each mixed key (double hashing), from its low bits. The group count is
        prime, so every step visits every group."""
        step: np.ndarray = (((mixed & _LOW32) * np.uint64(self._groups - 1)) >> _SHIFT32).astype(np.intp) + 1
        return step

    def _choices(self, home: np.ndarray, step: np.ndarray) -> np.ndarray:
        """The two groups (probe positions 0 and 1) each key may sit in; one row per key."""
        pair = np.empty((len(home), 2), np.intp)
        pair[:, 0] = home
        np.remainder(home + step, self._groups, out=pair[:, 1])
        return pair

    def _find(self, keys: np.ndarray, pair: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Slot of each of the distinct ``keys``, -1 where absent.

        A key lives in one of its two groups unless both were full when it came: each key reads
        its first group's row of keys, and only keys not found there read their second (a
        random read each, the main cost of a fold). Past both, the overflow counts of both
        say so, and only such keys look further (at every position up to the longest path in
        use, in one round).
        """
        groups = self._keys.reshape(-1, _GROUP)
        slots = self._find_in(groups, keys, pair[:, 0], np.arange(len(keys)), np.full(len(keys), -1, np.intp))
        second = np.flatnonzero(slots < 0)  # roots found in their first choice: one row read
        if len(second):
            self._find_in(groups, keys[second], pair[second, 1], second, slots)
        todo = np.flatnonzero(slots < 0)
        if len(todo):
            overflow = np.take(self._overflow, pair[todo])
            todo = todo[np.minimum(overflow[:, 0], overflow[:, 1]) != 0]
        if len(todo):
            self._find_further(keys[todo], pair[todo, 0], step[todo], todo, slots)
        return slots

    @staticmethod
    def _find_in(
        groups: np.ndarray, keys: np.ndarray, group: np.ndarray, rows: np.ndarray, slots: np.ndarray
    ) -> np.ndarray:
        """Sets ``slots[rows]`` for the ``keys`` found in their ``group``; returns ``slots``."""
        match = np.take(groups, group, axis=0) == keys[:, None]
        # 8 booleans are one little-endian uint64; True is bit 0 of its byte, so the bits up to
        # the lowest one set count 8 * (slot in the group) + 1
        word = match.view(np.uint64).ravel()
        hit = np.flatnonzero(word)
        if len(hit):
            word = word[hit]
            slots[rows[hit]] = (group[hit] << _GROUP_BITS) + (np.bitwise_count(word ^ (word - _ONE)) >> 3)
        return slots

    def _find_further(
        self, keys: np.ndarray, home: np.ndarray, step: np.ndarray, todo: np.ndarray, slots: np.ndarray
    ) -> None:
        """Look at probe positions 2 .. max(longest path, _WIDE_PROBE) of keys ``todo``."""
        reach = max(self._max_probe, _WIDE_PROBE)
        path = (home[:, None] + step[:, None] * np.arange(2, reach + 1)) % self._groups
        hit = np.flatnonzero(
            np.take(self._keys.reshape(-1, _GROUP), path.ravel(), axis=0).reshape(len(todo), -1) == keys[:, None]
        )
        slots[todo[hit // ((reach - 1) * _GROUP)]] = (path.ravel()[hit >> _GROUP_BITS] << _GROUP_BITS) + (
            hit & (_GROUP - 1)
        )

    def _insert(
        self,
        keys: np.ndarray,
        pair: np.ndarray,
        step: np.ndarray,
        offset: int,
        vals: np.ndarray,
        owner: np.ndarray,
        failed: np.ndarray,
    ) -> None:
        """Store new roots with their state, in the newest bucket, first seen at ``offset``."""
        slots = self._place(keys, pair, step)
        head = self._head_bucket()
        self._vals[slots] = vals
        self._owner[slots] = owner
        self._meta[slots] |= np.where(failed, np.uint8(_FAILED | head), np.uint8(head))
        self._live += len(slots)
        self._bucket_count[head] += len(slots)
        self._bucket_low[head] = min(self._bucket_low[head], offset)

    def _place(self, keys: np.ndarray, pair: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Claim a free slot for each of the distinct, absent ``keys``: in whichever of its two
        groups has more room, or, both full, in the first group with room further on its
        probe path. Claimed slots get the key and a live mark; keys placed past both choices
        also get _FAR and are counted in their two choices' overflow counts.

        Every key writes itself into the first free slot of its group; where several chose
        one slot a single write survives, and the others try again (that group's next free
        slot, or the next group on their path).
        """
        meta8 = self._meta.view(_META8)
        room = np.bitwise_count(~np.take(meta8, pair) & _HIGH_BITS)
        position = (room[:, 1] > room[:, 0]).astype(np.intp)
        group = np.where(position, pair[:, 1], pair[:, 0])
        slots = np.empty(len(keys), np.intp)
        todo = np.arange(len(keys))
        while True:
            free = ~meta8[group] & _HIGH_BITS  # the high bit of each free slot's meta byte
            full = free == 0
            if full.any():  # look at the next _WIDE_PROBE groups on their paths at once
                at = np.flatnonzero(full)
                ahead = (group[at, None] + step[todo[at], None] * _AHEAD) % self._groups
                room = (~np.take(meta8, ahead) & _HIGH_BITS) != 0
                jump = np.where(room.any(axis=1), room.argmax(axis=1), _WIDE_PROBE - 1)
                position[todo[at]] += jump + 1
                group[at] = ahead[np.arange(len(at)), jump]
                continue
            slot = (group << _GROUP_BITS) + (np.bitwise_count(free ^ (free - _ONE)) >> 3) - 1
            self._keys[slot] = keys[todo]
            won = self._keys[slot] == keys[todo]
            if won.all():
                slots[todo] = slot
                break
            slots[todo[won]] = slot[won]
            self._meta[slot[won]] = _LIVE  # taken: the losers look past it
            todo, group = todo[~won], group[~won]
        far = position > 1
        self._meta[slots] = np.where(far, np.uint8(_LIVE | _FAR), np.uint8(_LIVE))
        if far.any():
            self._max_probe = max(self._max_probe, int(position.max()))
            self._count_overflow(pair[far], +1)
        return slots

    def _count_overflow(self, pair: np.ndarray, delta: int) -> None:
        """Add ``delta`` to the overflow counts of the groups in ``pair`` (the two choices of
        keys placed further on). A count that reaches _STUCK stays there until a rebuild."""
        groups = pair.ravel()
        count = self._overflow[groups]
        if delta < 0:
            np.subtract.at(self._overflow, groups[count < _STUCK], 1)
        elif int(count.max()) + len(groups) < _STUCK:
            np.add.at(self._overflow, groups, 1)
        else:
            groups, passes = np.unique(groups, return_counts=True)
            self._overflow[groups] = np.minimum(self._overflow[groups] + passes, _STUCK)

    def _remove(self, slots: np.ndarray, meta: np.ndarray) -> None:
        """Drop decided roots (``meta``: their meta bytes); their slots are free at once."""
        self._bucket_count -= np.bincount(meta & _BUCKET, minlength=self._ring)
        self._bucket_low[self._bucket_count == 0] = _NO_OFFSET
        self._live -= len(slots)
        far = np.flatnonzero(meta & _FAR)
        if len(far):
            mixed = self._keys[slots[far]].view(np.uint64) * _MIX
            self._count_overflow(self._choices(self._home(mixed), self._step(mixed)), -1)
        self._keys[slots] = 0
        self._meta[slots] = 0

    def _rebuild(self, need: int) -> None:
        """Rehash the live roots into a fresh table where ``need`` roots fill _TARGET_LOAD."""
        groups = _prime_at_least(max(self._min_groups, -(-int(need / _TARGET_LOAD) // _GROUP)))
        old_vals, old_owner, old_meta = self._vals, self._owner, self._meta
        live = np.flatnonzero(old_meta >= _LIVE)
        keys = self._keys[live]
        mixed = keys.view(np.uint64) * _MIX
        self._allocate(groups)
        home = self._home(mixed)
        order = np.argsort(home)
        live, keys, mixed, home = live[order], keys[order], mixed[order], home[order]
        # The table is empty: the first 8 keys of each home group go straight into it, the
        # rest to their second choice or further.
        rank = np.arange(len(home))
        rank -= np.maximum.accumulate(np.where(run_starts(home), rank, 0))
        direct = rank < _GROUP
        placed = np.empty(len(keys), np.intp)
        placed[direct] = home[direct] * _GROUP + rank[direct]
        self._keys[placed[direct]] = keys[direct]
        self._meta[placed[direct]] = _LIVE
        spill = np.flatnonzero(~direct)
        if len(spill):
            step = self._step(mixed[spill])
            placed[spill] = self._place(keys[spill], self._choices(home[spill], step), step)
        self._vals[placed] = old_vals[live]
        self._owner[placed] = old_owner[live]
        self._meta[placed] |= old_meta[live] & np.uint8(~_FAR & 0xFF)
        self._stats.rebuilds += 1

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
        if index > np.iinfo(self._owner.dtype).max:  # 255 owners in one byte: make room
            self._compact_owners()
            index = len(self._owner_index) + 1
            if index > _NARROW_OWNERS:  # still many: two bytes a slot from now on
                self._owner_dtype = np.uint16
                self._owner = self._owner.astype(np.uint16)
        if index >= len(self._owner_ids):
            self._owner_ids = np.concatenate([self._owner_ids, np.zeros_like(self._owner_ids)])
        self._owner_ids[index] = sender
        self._owner_index[sender] = index
        return index

    def _compact_owners(self) -> None:
        """Forget spout tasks that own no pending root (e.g. earlier incarnations)."""
        used = np.unique(self._owner[self._meta >= _LIVE])
        used = used[used != 0]
        remap = np.zeros(_MAX_OWNER_INDEX + 1, np.uint16)
        remap[used] = np.arange(1, len(used) + 1, dtype=np.uint16)
        self._owner[:] = remap[self._owner]
        ids = self._owner_ids[used]
        self._owner_ids = np.zeros(max(16, 2 * (len(used) + 1)), np.int64)
        self._owner_ids[1 : len(used) + 1] = ids
        self._owner_index = {int(t): i + 1 for i, t in enumerate(ids)}
        self._owner_compactions += 1

    # ----------------------------------------------------------------------------- checks

    def _state_of(self, root: int) -> dict[str, Any] | None:
        """One root's entry (for tests and debugging): val, owner, failed, bucket."""
        if root == 0:  # 0 marks free slots; no root has it
            return None
        key = np.array([root], np.int64)
        mixed = key.view(np.uint64) * _MIX
        step = self._step(mixed)
        slot = int(self._find(key, self._choices(self._home(mixed), step), step)[0])
        if slot < 0:
            return None
        meta = int(self._meta[slot])
        owner = int(self._owner[slot])
        return {
            "val": int(self._vals[slot]),
            "owner": int(self._owner_ids[owner]) if owner else None,
            "failed": bool(meta & _FAILED),
            "bucket": meta & _BUCKET,
        }

    def _audit(self) -> list[str]:
        """Internal invariants that do not hold; empty when the table is sound."""
        problems = []
        live = np.flatnonzero(self._meta >= _LIVE)
        if len(live) != self._live:
            problems.append(f"live slots {len(live)} != pending {self._live}")
        if np.any(self._keys[live] == 0) or np.any(self._keys[self._meta < _LIVE] != 0):
            problems.append("key 0 in a live slot or a key in a free slot")
        if np.any(self._meta[self._meta < _LIVE] != 0):
            problems.append("a free slot with meta bits")
        if self._bucket_count.sum() != self._live or np.any(self._bucket_count < 0):
            problems.append(f"bucket counts {self._bucket_count.tolist()} vs {self._live}")
        counts = np.bincount(self._meta[live] & _BUCKET, minlength=self._ring)
        if len(counts) > self._ring or not np.array_equal(counts, self._bucket_count):
            problems.append("bucket counts do not match the slots' buckets")
        if np.any(self._bucket_low[self._bucket_count == 0] != _NO_OFFSET):
            problems.append("an empty bucket still holds a low offset")
        keys = self._keys[live]
        if len(np.unique(keys)) != len(keys):
            problems.append("a root is stored twice")
        mixed = keys.view(np.uint64) * _MIX
        step = self._step(mixed)
        pair = self._choices(self._home(mixed), step)
        # Roots outside both choices must be marked _FAR (in tiny tables a probe path can come
        # back to a choice, so _FAR roots may sit in one); _FAR roots are the counted ones.
        in_pair = ((live >> _GROUP_BITS)[:, None] == pair).any(axis=1)
        far = np.flatnonzero(self._meta[live] & _FAR)
        if np.any(~in_pair & ((self._meta[live] & _FAR) == 0)):
            problems.append("a root outside both its choices is not marked _FAR")
        if len(far):
            path = (pair[far, :1] + step[far, None] * np.arange(self._max_probe + 1)) % self._groups
            if not (path == (live[far] >> _GROUP_BITS)[:, None]).any(axis=1).all():
                problems.append("a root lies beyond the longest recorded probe path")
        expected = np.zeros(self._groups, np.int64)
        np.add.at(expected, pair[far].ravel(), 1)
        actual = self._overflow.astype(np.int64)
        if np.any((actual != expected) & (actual != _STUCK)) or np.any(actual < np.minimum(expected, _STUCK)):
            problems.append("overflow counts do not match the far roots")
        found = self._find(keys, pair, step)
        if not np.array_equal(found, live):
            problems.append("a live root is not found where it is stored")
        return problems
