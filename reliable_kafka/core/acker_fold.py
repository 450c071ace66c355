"""The acker's rule (:mod:`reliable_kafka.core.acker_rule`) applied to a group of ack records at
once, deciding exactly what folding them one record at a time would. Pure: no storage.

The table hands over the group's entries in record order with each entry's record number, and
after :attr:`Group.roots` has told it which roots to look up, their stored state. Equal roots are
found with a small scratch hash (no sort). A root that appears once in the group (the common
case) is one entry: the rule applies to it as it stands. Only the entries of roots that appear
several times are sorted (by root, keeping record order); a *segment* is one root's entries in one
record. Folding record by record means the rule's update applied segment after segment, which is
a prefix scan over each root's segments (XOR for ``val``, the latest INIT's sender for ``owner``,
OR for ``failed``); the rule then decides after every segment.

A root decided in the middle of the group (its FAIL in one record, a sibling's ACK in a later
one: normal traffic) is decided at that record, as one by one. Its later segments begin a new
entry, exactly as if they came after the decision: the scan runs again over those segments
alone, from an empty state, in the same call. Nothing falls back to folding record by record
and nothing is looked up twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliable_kafka.core import acker_rule as rule
from reliable_kafka.core.acker_rule import ACK_BIT, FAIL_BIT, INIT_BIT, KIND_BITS
from reliable_kafka.core.kinds import OutcomeKind

__all__ = ["MIX", "Group", "Folded", "run_starts", "same_root"]

MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying permutes uint64, equal roots stay equal
_COMPLETED, _FAILED, _RESET = (
    np.uint8(k) for k in (OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.RESET_TIMEOUT)
)
_XOR_BITS = INIT_BIT | ACK_BIT
_EMPTY = np.empty(0, np.intp)


def run_starts(values: np.ndarray) -> np.ndarray:
    """True where a sorted array starts a run of equal values."""
    first = np.empty(len(values), dtype=bool)
    first[:1] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return first


def same_root(mixed: np.ndarray, *, scratch_bits: int | None = None) -> np.ndarray:
    """For each entry, the index of one entry with the same (mixed) root: its representative.

    Every entry writes its index into a scratch table at a hash of its key and reads back the
    index that stayed there; where that entry's key is its own, done. The rest (keys that met a
    different key) go round again on other bits of the key, fewer each round: every occupied
    slot settles at least its survivor's key. ``scratch_bits`` sizes the scratch (tests make it
    tiny to force meetings); by default it holds 8 to 16 slots an entry (4 bytes each: for 8,000
    entries 256 KB, which stays in cache), so that about one entry in 20 goes round again.
    """
    n = len(mixed)
    bits = scratch_bits or max(4, (8 * n - 1).bit_length())
    scratch = np.empty(1 << bits, np.int32)
    rep = np.empty(n, np.intp)
    todo, keys = np.arange(n, dtype=np.int32), mixed
    mask = np.uint64((1 << bits) - 1)
    shift = 64 - bits
    while True:
        at = ((keys >> np.uint64(shift)) & mask).astype(np.intp)
        scratch[at] = todo
        winner = scratch[at]
        rep[todo] = winner  # final where the winner holds the same key; the others go round again
        met = mixed[winner] != keys
        if not met.any():
            return rep
        todo, keys = todo[met], keys[met]
        shift = shift - bits if shift >= bits else 64 - bits + (shift + 7) % bits


@dataclass
class Folded:
    """A group's result per distinct root (parallel to :attr:`Group.roots`): the state of the
    root's last entry, and the decisions of entries that ended earlier in the group."""

    val: np.ndarray  # int64, the state after the root's last folded segment
    owner: np.ndarray  # owner index (0: no INIT yet)
    failed: np.ndarray  # bool
    bits: np.ndarray  # uint8, OR of the kind bits folded into this entry
    decision: np.ndarray  # uint8: COMPLETED or FAILED (the root is gone), else NOTHING
    first_record: np.ndarray  # record number of the entry's first segment
    fresh: np.ndarray | None  # bool: the entry began in this group after an earlier decision
    notices: np.ndarray  # indices of roots whose owner hears RESET_TIMEOUT ...
    notice_owner: np.ndarray  # ... and that owner index (one per record that reset the root)
    ended: np.ndarray  # indices of roots whose earlier entry was decided in the group ...
    ended_owner: np.ndarray  # ... its owner index ...
    ended_kind: np.ndarray  # ... and the decision (uint8, COMPLETED or FAILED)


class Group:
    """Entries of records folded together (in record order), grouped by root and record."""

    def __init__(
        self, kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray, record: np.ndarray | None, sender: np.ndarray
    ) -> None:
        """``record``: each entry's record number (non-decreasing), None for a single record;
        ``sender``: the owner index each record names for its INITs (indexed by record)."""
        mixed = roots.view(np.uint64) * MIX
        n = len(roots)
        rep = same_root(mixed)
        index = np.arange(n)
        first = rep == index
        if first.all():  # every root once (take() below: faster than indexing with an array)
            reps, self.roots, self.mixed, one_kinds, one_vals = index, roots, mixed, kinds, vals
        else:
            reps = first.nonzero()[0]
            self.roots, self.mixed = roots.take(reps), mixed.take(reps)
            one_kinds, one_vals = kinds.take(reps), vals.take(reps)
        bits = KIND_BITS.take(one_kinds)
        xor = np.where(bits & _XOR_BITS, one_vals, 0)
        record_of = np.zeros(len(reps), np.intp) if record is None else record.take(reps)
        self._one = (xor, bits, sender.take(record_of), record_of)  # each root's first entry
        self._multi = None
        if len(reps) == n:  # every root once: nothing to group
            return
        # Roots with several entries: sort only their entries, by root then record order.
        # theirs and their representatives, in order: a mask, not np.union1d (a sort, and in
        # NumPy 2.4 a first call that imports numpy.ma, tens of ms once per process)
        repeats = (~first).nonzero()[0]
        among = np.zeros(n, bool)
        among[repeats] = True
        among[rep[repeats]] = True
        entries = among.nonzero()[0]
        entries = entries[np.argsort(rep[entries], kind="stable")]
        root_first = run_starts(rep[entries])
        segment = root_first
        if record is not None:
            segment = root_first.copy()
            segment[1:] |= record[entries[1:]] != record[entries[:-1]]
        seg_starts = segment.nonzero()[0]
        e_bits = KIND_BITS[kinds[entries]]
        e_xor = np.where(e_bits & _XOR_BITS, vals[entries], 0)
        seg_record = np.zeros(len(seg_starts), np.intp) if record is None else record[entries[seg_starts]]
        self._multi = (
            np.searchsorted(reps, rep[entries[root_first]]),  # their root indices (reps is sorted)
            root_first[seg_starts],
            np.bitwise_xor.reduceat(e_xor, seg_starts),
            np.bitwise_or.reduceat(e_bits, seg_starts),
            sender[seg_record],
            seg_record,
        )

    def fold(self, val: np.ndarray, owner: np.ndarray, failed: np.ndarray) -> Folded:
        """Apply the rule segment by segment to the roots' stored state (zeros where absent)."""
        folded = _fold_once(val, owner, failed, *self._one)
        if self._multi is None:
            return folded
        multi, seg_first, xor, bits, sender, record = self._multi
        folded.notices = folded.notices[~_is_in(folded.notices, multi, len(val))]
        folded.notice_owner = folded.owner[folded.notices]
        folded.fresh = np.zeros(len(val), bool)
        folded.first_record = folded.first_record.copy()  # the Group's array stays as it was
        folded.first_record[multi] = record[seg_first]  # their representative may be a later one
        notices, notice_owner = [folded.notices], [folded.notice_owner]
        ended, ended_owner, ended_kind = [], [], []
        val0, owner0, failed0 = val[multi], owner[multi], failed[multi]
        while True:
            n_notice, n_owner, tail, end = _scan(
                folded, multi, val0, owner0, failed0, seg_first, xor, bits, sender, record
            )
            notices.append(n_notice)
            notice_owner.append(n_owner)
            if not tail.any():
                break
            # Roots decided before their last segment: that decision stands, and the segments
            # after it begin a new entry, folded again from an empty state.
            again = np.logical_or.reduceat(tail, seg_first.nonzero()[0]).nonzero()[0]
            ended.append(multi[again])
            ended_owner.append(end[0][again])
            ended_kind.append(end[1][again])
            tail_first = tail & ~np.append(False, tail[:-1])
            multi, seg_first = multi[again], tail_first[tail]
            xor, bits, sender, record = xor[tail], bits[tail], sender[tail], record[tail]
            val0 = np.zeros(len(multi), np.int64)
            owner0 = np.zeros(len(multi), folded.owner.dtype)
            failed0 = np.zeros(len(multi), bool)
            folded.fresh[multi] = True
            folded.first_record[multi] = record[seg_first]
            if len(multi) == len(xor):  # one segment each (a FAIL, then a sibling's ACK): the scan
                # over one segment is the rule applied once, as to the group's single entries
                last = _fold_once(val0, owner0, failed0, xor, bits, sender, record)
                folded.val[multi], folded.owner[multi], folded.failed[multi] = last.val, last.owner, last.failed
                folded.bits[multi], folded.decision[multi] = last.bits, last.decision
                notices.append(multi[last.notices])
                notice_owner.append(last.notice_owner)
                break
        folded.notices = np.concatenate(notices)
        folded.notice_owner = np.concatenate(notice_owner)
        if ended:
            folded.ended = np.concatenate(ended)
            folded.ended_owner = np.concatenate(ended_owner)
            folded.ended_kind = np.concatenate(ended_kind)
        return folded


def _is_in(indices: np.ndarray, members: np.ndarray, size: int) -> np.ndarray:
    """Which of ``indices`` (all below ``size``) are among ``members``."""
    mark = np.zeros(size, bool)
    mark[members] = True
    among: np.ndarray = mark[indices]
    return among


def _fold_once(
    val: np.ndarray,
    owner: np.ndarray,
    failed: np.ndarray,
    xor: np.ndarray,
    bits: np.ndarray,
    sender: np.ndarray,
    record: np.ndarray,
) -> Folded:
    """Each root's one segment: the rule's update, then its decision."""
    val, owner, failed = rule.update(val, owner, failed, xor, bits, sender)
    decision = rule.decide(val, owner, failed, bits)
    notices = (decision == _RESET).nonzero()[0]
    if len(notices):
        decision[notices] = rule.NOTHING  # notified, not ended (decide() made it: ours to change)
    return Folded(
        val,
        owner,
        failed,
        bits,
        decision,
        record,
        None,
        notices,
        owner[notices],
        _EMPTY,
        _EMPTY,
        np.empty(0, np.uint8),
    )


def _scan(
    folded: Folded,
    multi: np.ndarray,
    val0: np.ndarray,
    owner0: np.ndarray,
    failed0: np.ndarray,
    seg_first: np.ndarray,
    xor: np.ndarray,
    bits: np.ndarray,
    sender: np.ndarray,
    record: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The rule applied record by record to the roots ``multi`` (their state before and their
    segments, in order) up to each root's first decision; writes their results into
    ``folded``. Returns the notices (root indices, owners), which segments come after their
    root's decision (bool), and each root's owner and decision at its decisive segment."""
    n_seg = len(xor)
    run_first = seg_first.nonzero()[0]
    root = np.cumsum(seg_first) - 1
    index = np.arange(n_seg)
    start = run_first[root]
    acc = np.bitwise_xor.accumulate(xor)
    before = np.where(start > 0, acc[start - 1], 0)
    val = val0[root] ^ acc ^ before
    last_init = np.maximum.accumulate(np.where(bits & INIT_BIT, index, -1))
    owner = np.where(last_init >= start, sender[np.maximum(last_init, 0)], owner0[root])
    last_fail = np.maximum.accumulate(np.where(bits & FAIL_BIT, index, -1))
    failed = failed0[root] | (last_fail >= start)
    decision = rule.decide(val, owner, failed, bits)
    # The first decisive segment of each root ends its entry; later ones begin the next.
    decisive = decision <= _FAILED
    ends = np.minimum.reduceat(np.where(decisive, index, n_seg), run_first)
    end_of = ends[root]
    notices = ((decision == _RESET) & (index < end_of)).nonzero()[0]
    last = np.append(run_first[1:], n_seg) - 1
    at = np.where(ends < n_seg, ends, last)  # the segment whose state the root keeps
    folded.val[multi] = val[at]
    folded.owner[multi] = owner[at]
    folded.failed[multi] = failed[at]
    folded.bits[multi] = np.bitwise_or.reduceat(np.where(index <= end_of, bits, 0), run_first)
    folded.decision[multi] = _final(decision[at])
    return multi[root[notices]], owner[notices], index > end_of, (owner[at], decision[at])


def _final(decision: np.ndarray) -> np.ndarray:
    """Decisions that end an entry (COMPLETED, FAILED); NOTHING for the rest."""
    final: np.ndarray = decision.copy()
    final[decision == _RESET] = rule.NOTHING
    return final
