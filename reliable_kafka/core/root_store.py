"""Where an acker table keeps its pending roots: storage only, no rule and no clock.

:class:`RootStore` holds, per root, its key, ack val, owner (an index into the table's spout task
ids; 0: no INIT yet), failed flag and deadline bucket, and per bucket the live count and the
smallest ack-record offset at which one of its roots was first seen (the commit low point). It
inserts, looks up, updates, removes and expires (a whole bucket at once); the decisions are
:mod:`reliable_kafka.core.acker_rule`'s, and :class:`~reliable_kafka.core.acker_table.AckerTable`
says which bucket is the newest and which are due.

Storage is columnar NumPy, no Python object per root: an open-addressing hash table of groups of
8 slots (keys and vals int64; owner as a one-byte index, two bytes once more than 255 owners are
in use; one meta byte: live, failed, "far", ring bucket), 18 bytes a slot, plus one overflow byte
a group (and one blank element at the end of vals, owner and meta, which absent roots read). A
root may sit in two groups (its home and the next on its double-hashing path, the group count being
prime) and goes to the one with more room, so one vectorised round finds nearly
every root. Only when both are full does it go further along its path; it is then marked far and
counted in both groups' overflow counts (as in Facebook's F14 tables), and lookups go past a pair
only if both counts are non-zero. No tombstones: a deleted slot is free at once. Loads stay
between 0.68 and 0.9 (grow at 0.9 to 0.68, shrink below 0.15): about 20 to 27 bytes a pending
root.
"""

from __future__ import annotations

import numpy as np

from reliable_kafka.core.acker_fold import MIX, run_starts

__all__ = ["RootStore", "MAX_BUCKETS"]

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
MAX_BUCKETS = _BUCKET - 1  # the ring has buckets + 1 indices

# Bit tricks on a group's 8 meta bytes read as one little-endian word (byte i = slot i).
_META8 = np.dtype("<u8")
_HIGH_BITS = np.uint64(0x8080808080808080)
_ONE = np.uint64(1)
_SHIFT32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_STUCK = 255  # an overflow count that reached this stays there until a rebuild

_NO_OFFSET = np.iinfo(np.int64).max


def _prime_at_least(n: int) -> int:
    """Smallest prime >= max(n, 2): a group count that every probe step is coprime with."""
    n = max(n, 2)
    while True:
        if (n % 2 or n == 2) and all(n % d for d in range(3, int(n**0.5) + 1, 2)):
            return n
        n += 1


class RootStore:
    """Pending roots in columns, with their deadline buckets (a ring of ``ring`` indices).

    Roots are addressed by slot. A caller mixes its keys (``roots.view(np.uint64) * MIX``), gets
    their two choices from :meth:`locate`, then :meth:`find` them and :meth:`insert` the absent
    ones. ``owner`` is a small index the caller assigns (0: unknown).
    """

    def __init__(self, *, ring: int, initial_capacity: int) -> None:
        self.ring = ring
        self.min_groups = _prime_at_least(-(-initial_capacity // _GROUP))
        self.owner_dtype: type = np.uint8  # one byte a slot while at most 255 owners are known
        self._allocate(self.min_groups)
        self.live = 0
        self.bucket_count = np.zeros(ring, np.int64)
        self.bucket_low = np.full(ring, _NO_OFFSET, np.int64)

    def _allocate(self, groups: int) -> None:
        self.groups = groups
        slots = groups * _GROUP
        self.keys = np.zeros(slots, np.int64)
        # vals, owner and meta end in one blank element past the last slot: slot -1 (absent)
        # reads it, so a lookup's state reads need no mask (see read()).
        self._vals_all = np.zeros(slots + 1, np.int64)
        self._owner_all: np.ndarray = np.zeros(slots + 1, self.owner_dtype)
        self._meta_all = np.zeros(slots + 1, np.uint8)
        self.vals, self.owner, self.meta = self._vals_all[:-1], self._owner_all[:-1], self._meta_all[:-1]
        self.overflow = np.zeros(groups, np.uint8)  # far roots that have the group as a choice
        self.max_probe = 0  # furthest probe position of any root
        self.fill_limit = int(_MAX_FILL * slots)
        self.shrink_limit = int(_SHRINK_AT * slots)

    # ----------------------------------------------------------------------------- sizes

    @property
    def capacity(self) -> int:
        """Slots allocated."""
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        """Bytes held by the store's arrays."""
        arrays = (self.keys, self._vals_all, self._owner_all, self._meta_all, self.overflow, self.bucket_low)
        return sum(a.nbytes for a in arrays) + self.bucket_count.nbytes

    def low_offset(self) -> int | None:
        """Smallest first-seen offset over the buckets that hold roots; None when empty."""
        held = self.bucket_count > 0
        if not held.any():
            return None
        return int(self.bucket_low[held].min())

    def fits(self, need: int) -> bool:
        """Whether ``need`` live roots keep the load in range (else :meth:`rebuild` first)."""
        return need <= self.fill_limit and (need >= self.shrink_limit or self.groups <= self.min_groups)

    # ----------------------------------------------------------------------------- lookup

    def locate(self, mixed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two groups each mixed key may sit in (one row per key) and its probe step."""
        step = self._step(mixed)
        return self._choices(self._home(mixed), step), step

    def _home(self, mixed: np.ndarray) -> np.ndarray:
        """Home group of each mixed key: its high 32 bits scaled to the group count."""
        home: np.ndarray = (((mixed >> _SHIFT32) * np.uint64(self.groups)) >> _SHIFT32).astype(np.intp)
        return home

    def _step(self, mixed: np.ndarray) -> np.ndarray:
        """Probe step of each mixed key (double hashing), from its low bits. The group count is
        prime, so every step visits every group."""
        step: np.ndarray = (((mixed & _LOW32) * np.uint64(self.groups - 1)) >> _SHIFT32).astype(np.intp) + 1
        return step

    def _choices(self, home: np.ndarray, step: np.ndarray) -> np.ndarray:
        """The two groups (probe positions 0 and 1) each key may sit in; one row per key."""
        pair = np.empty((2, len(home)), np.intp)  # one column a choice: lookups read them whole
        pair[0] = home
        second = np.add(home, step, out=pair[1])
        second -= self.groups * (second >= self.groups)  # home < groups, step < groups: no division
        by_key: np.ndarray = pair.T
        return by_key

    def find(self, keys: np.ndarray, pair: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Slot of each of the distinct ``keys``, -1 where absent.

        A key lives in one of its two groups unless both were full when it came: each key reads
        its first group's row of keys, and only keys not found there read their second (a
        random read each, the main cost of a fold). Past both, the overflow counts of both
        say so, and only such keys look further (at every position up to the longest path in
        use, in one round).
        """
        groups = self.keys.reshape(-1, _GROUP)
        first, second = pair[:, 0], pair[:, 1]  # contiguous: pair is the transpose of two rows
        slots = self._find_in(groups, keys, first)  # most roots: found in their first choice
        todo = np.flatnonzero(slots < 0)
        if not len(todo):
            return slots
        found = self._find_in(groups, keys.take(todo), second.take(todo))
        slots[todo] = found
        todo = todo[found < 0]
        if len(todo):
            overflow = self.overflow
            todo = todo[np.minimum(overflow.take(first.take(todo)), overflow.take(second.take(todo))) != 0]
        if len(todo):
            self._find_further(keys.take(todo), first.take(todo), step.take(todo), todo, slots)
        return slots

    @staticmethod
    def _find_in(groups: np.ndarray, keys: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Slot of each key in its ``group``, -1 where it is not there."""
        match = np.take(groups, group, axis=0).ravel() == np.repeat(keys, _GROUP)
        # 8 booleans are one little-endian uint64; True is bit 0 of its byte, so the bits up to
        # the lowest one set count 8 * (slot in the group) + 1 (all 64 when none is set)
        word = match.view(np.uint64)
        found: np.ndarray = np.where(
            word != 0, (group << _GROUP_BITS) + (np.bitwise_count(word ^ (word - _ONE)) >> 3).astype(np.intp), -1
        )
        return found

    def _find_further(
        self, keys: np.ndarray, home: np.ndarray, step: np.ndarray, todo: np.ndarray, slots: np.ndarray
    ) -> None:
        """Look at probe positions 2 .. max(longest path, _WIDE_PROBE) of keys ``todo``."""
        reach = max(self.max_probe, _WIDE_PROBE)
        path = (home[:, None] + step[:, None] * np.arange(2, reach + 1)) % self.groups
        hit = np.flatnonzero(
            np.take(self.keys.reshape(-1, _GROUP), path.ravel(), axis=0).reshape(len(todo), -1) == keys[:, None]
        )
        slots[todo[hit // ((reach - 1) * _GROUP)]] = (path.ravel()[hit >> _GROUP_BITS] << _GROUP_BITS) + (
            hit & (_GROUP - 1)
        )

    def read(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(val, owner, failed) at each slot; zeros where the slot is -1 (absent: the blank element)."""
        failed: np.ndarray = (self._meta_all.take(slots) & _FAILED) != 0
        return self._vals_all.take(slots), self._owner_all.take(slots), failed

    # ----------------------------------------------------------------------------- changes

    def insert(
        self,
        keys: np.ndarray,
        pair: np.ndarray,
        step: np.ndarray,
        *,
        head: int,
        offset: int,
        vals: np.ndarray,
        owner: np.ndarray,
        failed: np.ndarray,
    ) -> None:
        """Store new roots with their state, in bucket ``head``, first seen at ``offset``."""
        slots = self._place(keys, pair, step, flags=np.where(failed, np.uint8(_FAILED | head), np.uint8(head)))
        self.vals[slots] = vals
        self.owner[slots] = owner
        self.live += len(slots)
        self.bucket_count[head] += len(slots)
        self.bucket_low[head] = min(self.bucket_low[head], offset)

    def update(
        self, slots: np.ndarray, vals: np.ndarray, *, owned: np.ndarray, owner: np.ndarray, failed: np.ndarray
    ) -> None:
        """Write new vals at ``slots``; the ``owner`` at ``slots[owned]``; mark ``slots[failed]``."""
        self.vals[slots] = vals
        if len(owned):
            self.owner[slots[owned]] = owner
        if len(failed):
            self.meta[slots[failed]] |= np.uint8(_FAILED)

    def move_to_head(self, slots: np.ndarray, head: int) -> None:
        """Give the roots at ``slots`` the deadline bucket ``head``, carrying their old buckets'
        low offsets along (they can only be lower than the head's own)."""
        meta = self.meta[slots]
        old = meta & _BUCKET
        moving = old != head
        if not moving.any():
            return
        old = old[moving]
        self.meta[slots] = np.where(moving, (meta & np.uint8(~_BUCKET & 0xFF)) | np.uint8(head), meta)
        self.bucket_low[head] = min(self.bucket_low[head], self.bucket_low[old].min())
        self.bucket_count -= np.bincount(old, minlength=self.ring)
        self.bucket_count[head] += len(old)
        self.bucket_low[self.bucket_count == 0] = _NO_OFFSET

    def remove(self, slots: np.ndarray) -> None:
        """Drop roots; their slots are free at once."""
        meta = self.meta.take(slots)
        self.bucket_count -= np.bincount(meta & _BUCKET, minlength=self.ring)
        self.bucket_low[self.bucket_count == 0] = _NO_OFFSET
        self.live -= len(slots)
        far = np.flatnonzero(meta & _FAR)
        if len(far):
            pair, _ = self.locate(self.keys[slots[far]].view(np.uint64) * MIX)
            self._count_overflow(pair, -1)
        self.keys[slots] = 0
        self.meta[slots] = 0

    def expire(self, due: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Remove every root whose bucket is among ``due``; returns their (keys, owners)."""
        if not self.bucket_count[due].any():
            return np.empty(0, np.int64), np.empty(0, self.owner_dtype)
        is_due = np.zeros(256, dtype=bool)
        for flags in (_LIVE, _LIVE | _FAILED, _LIVE | _FAR, _LIVE | _FAILED | _FAR):
            is_due[[flags | b for b in due]] = True
        slots = np.flatnonzero(is_due[self.meta])
        keys, owner = self.keys[slots], self.owner[slots]
        self.remove(slots)
        return keys, owner

    def _place(
        self, keys: np.ndarray, pair: np.ndarray, step: np.ndarray, *, flags: np.ndarray | int = 0
    ) -> np.ndarray:
        """Claim a free slot for each of the distinct, absent ``keys``: in whichever of its two
        groups has more room, or, both full, in the first group with room further on its
        probe path. Claimed slots get the key and a live mark with the meta bits ``flags``; keys
        placed past both choices also get _FAR and are counted in their two choices' overflow
        counts.

        Every key writes itself into the first free slot of its group; where several chose
        one slot a single write survives, and the others try again (that group's next free
        slot, or the next group on their path).
        """
        meta8 = self.meta.view(_META8)
        free = ~np.take(meta8, pair) & _HIGH_BITS  # the high bit of each free slot's meta byte
        room = np.bitwise_count(free)
        position = (room[:, 1] > room[:, 0]).astype(np.intp)
        group = np.where(position, pair[:, 1], pair[:, 0])
        free = np.where(position, free[:, 1], free[:, 0])
        slots = np.empty(len(keys), np.intp)
        todo = np.arange(len(keys))
        while True:
            full = free == 0
            if full.any():  # look at the next _WIDE_PROBE groups on their paths at once
                at = np.flatnonzero(full)
                ahead = (group[at, None] + step[todo[at], None] * _AHEAD) % self.groups
                has_room = (~np.take(meta8, ahead) & _HIGH_BITS) != 0
                jump = np.where(has_room.any(axis=1), has_room.argmax(axis=1), _WIDE_PROBE - 1)
                position[todo[at]] += jump + 1
                group[at] = ahead[np.arange(len(at)), jump]
                free[at] = ~meta8[group[at]] & _HIGH_BITS
                continue
            slot = (group << _GROUP_BITS) + (np.bitwise_count(free ^ (free - _ONE)) >> 3) - 1
            mine = keys[todo]
            self.keys[slot] = mine
            won = self.keys[slot] == mine
            if won.all():
                slots[todo] = slot
                break
            slots[todo[won]] = slot[won]
            self.meta[slot[won]] = _LIVE  # taken: the losers look past it
            todo, group = todo[~won], group[~won]
            free = ~meta8[group] & _HIGH_BITS
        far = position > 1
        self.meta[slots] = np.where(far, np.uint8(_LIVE | _FAR), np.uint8(_LIVE)) | flags
        if far.any():
            self.max_probe = max(self.max_probe, int(position.max()))
            self._count_overflow(pair[far], +1)
        return slots

    def _count_overflow(self, pair: np.ndarray, delta: int) -> None:
        """Add ``delta`` to the overflow counts of the groups in ``pair`` (the two choices of
        keys placed further on). A count that reaches _STUCK stays there until a rebuild."""
        groups = pair.ravel()
        count = self.overflow[groups]
        if delta < 0:
            np.subtract.at(self.overflow, groups[count < _STUCK], 1)
        elif int(count.max()) + len(groups) < _STUCK:
            np.add.at(self.overflow, groups, 1)
        else:
            groups, passes = np.unique(groups, return_counts=True)
            self.overflow[groups] = np.minimum(self.overflow[groups] + passes, _STUCK)

    def rebuild(self, need: int) -> None:
        """Rehash the live roots into a fresh table where ``need`` roots fill _TARGET_LOAD."""
        groups = _prime_at_least(max(self.min_groups, -(-int(need / _TARGET_LOAD) // _GROUP)))
        old_vals, old_owner, old_meta = self.vals, self.owner, self.meta
        live = np.flatnonzero(old_meta >= _LIVE)
        keys = self.keys[live]
        mixed = keys.view(np.uint64) * MIX
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
        self.keys[placed[direct]] = keys[direct]
        self.meta[placed[direct]] = _LIVE
        spill = np.flatnonzero(~direct)
        if len(spill):
            step = self._step(mixed[spill])
            placed[spill] = self._place(keys[spill], self._choices(home[spill], step), step)
        self.vals[placed] = old_vals[live]
        self.owner[placed] = old_owner[live]
        self.meta[placed] |= old_meta[live] & np.uint8(~_FAR & 0xFF)

    # ----------------------------------------------------------------------------- owners

    def owners_in_use(self) -> np.ndarray:
        """The distinct non-zero owner indices of live roots."""
        used = np.unique(self.owner[self.meta >= _LIVE])
        in_use: np.ndarray = used[used != 0]
        return in_use

    def renumber_owners(self, remap: np.ndarray) -> None:
        """Replace every owner index ``i`` by ``remap[i]``."""
        self.owner[:] = remap[self.owner]

    def widen_owners(self) -> None:
        """Two bytes an owner index from now on (more than 255 owners in use)."""
        self.owner_dtype = np.uint16
        self._owner_all = self._owner_all.astype(np.uint16)
        self.owner = self._owner_all[:-1]

    # ----------------------------------------------------------------------------- checks

    def state_at(self, slot: int) -> tuple[int, int, bool, int]:
        """(val, owner, failed, bucket) of the root at ``slot``."""
        meta = int(self.meta[slot])
        return int(self.vals[slot]), int(self.owner[slot]), bool(meta & _FAILED), meta & _BUCKET

    def audit(self) -> list[str]:
        """Internal invariants that do not hold; empty when the store is sound."""
        problems = []
        live = np.flatnonzero(self.meta >= _LIVE)
        if len(live) != self.live:
            problems.append(f"live slots {len(live)} != pending {self.live}")
        if np.any(self.keys[live] == 0) or np.any(self.keys[self.meta < _LIVE] != 0):
            problems.append("key 0 in a live slot or a key in a free slot")
        if np.any(self.meta[self.meta < _LIVE] != 0):
            problems.append("a free slot with meta bits")
        if self.bucket_count.sum() != self.live or np.any(self.bucket_count < 0):
            problems.append(f"bucket counts {self.bucket_count.tolist()} vs {self.live}")
        counts = np.bincount(self.meta[live] & _BUCKET, minlength=self.ring)
        if len(counts) > self.ring or not np.array_equal(counts, self.bucket_count):
            problems.append("bucket counts do not match the slots' buckets")
        if np.any(self.bucket_low[self.bucket_count == 0] != _NO_OFFSET):
            problems.append("an empty bucket still holds a low offset")
        keys = self.keys[live]
        if len(np.unique(keys)) != len(keys):
            problems.append("a root is stored twice")
        pair, step = self.locate(keys.view(np.uint64) * MIX)
        # Roots outside both choices must be marked _FAR (in tiny tables a probe path can come
        # back to a choice, so _FAR roots may sit in one); _FAR roots are the counted ones.
        in_pair = ((live >> _GROUP_BITS)[:, None] == pair).any(axis=1)
        far = np.flatnonzero(self.meta[live] & _FAR)
        if np.any(~in_pair & ((self.meta[live] & _FAR) == 0)):
            problems.append("a root outside both its choices is not marked _FAR")
        if len(far):
            path = (pair[far, :1] + step[far, None] * np.arange(self.max_probe + 1)) % self.groups
            if not (path == (live[far] >> _GROUP_BITS)[:, None]).any(axis=1).all():
                problems.append("a root lies beyond the longest recorded probe path")
        expected = np.zeros(self.groups, np.int64)
        np.add.at(expected, pair[far].ravel(), 1)
        actual = self.overflow.astype(np.int64)
        if np.any((actual != expected) & (actual != _STUCK)) or np.any(actual < np.minimum(expected, _STUCK)):
            problems.append("overflow counts do not match the far roots")
        if not np.array_equal(self.find(keys, pair, step), live):
            problems.append("a live root is not found where it is stored")
        return problems
