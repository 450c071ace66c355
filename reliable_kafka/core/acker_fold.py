"""The acker's rule (:mod:`reliable_kafka.core.acker_rule`) applied to a group of ack records at
once, deciding exactly what folding them one record at a time would. Pure: no storage.

The table hands over the group's entries in record order with each entry's record number, and
after :attr:`Group.roots` has told it which roots to look up, their stored state. Entries are
sorted by root (a mixed key, so that equal roots sit together); a *segment* is one root's entries
in one record. Folding record by record means the rule's update applied segment after segment,
which is a prefix scan over each root's segments (XOR for ``val``, the latest INIT's sender for
``owner``, OR for ``failed``); the rule then decides after every segment.

A root decided in the middle of the group (its FAIL in one record, a sibling's ACK in a later
one: normal traffic) is decided at that record, as one by one. Its later segments (the *tail*)
then belong to a new entry, exactly as if they came after the decision: the table folds the
tail entries again as a group of their own, once the decided roots are gone. Nothing falls back
to folding record by record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliable_kafka.core import acker_rule as rule
from reliable_kafka.core.acker_rule import ACK_BIT, FAIL_BIT, INIT_BIT, KIND_BITS
from reliable_kafka.core.kinds import OutcomeKind

__all__ = ["MIX", "Group", "Folded", "run_starts"]

MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying permutes uint64, equal roots stay equal
_COMPLETED, _FAILED, _RESET = (np.uint8(k) for k in (OutcomeKind.COMPLETED, OutcomeKind.FAILED,
                                                     OutcomeKind.RESET_TIMEOUT))


def run_starts(values: np.ndarray) -> np.ndarray:
    """True where a sorted array starts a run of equal values."""
    first = np.empty(len(values), dtype=bool)
    first[:1] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return first


@dataclass
class Folded:
    """A group's result per distinct root (parallel to :attr:`Group.roots`)."""

    val: np.ndarray        # int64, the state after the root's last folded segment
    owner: np.ndarray      # owner index (0: no INIT yet)
    failed: np.ndarray     # bool
    bits: np.ndarray       # uint8, OR of the kind bits folded into this entry
    decision: np.ndarray   # uint8: COMPLETED or FAILED (the root is gone), else NOTHING
    first_record: np.ndarray  # record number of the root's first segment
    notices: np.ndarray    # indices of roots whose owner hears RESET_TIMEOUT ...
    notice_owner: np.ndarray  # ... and that owner index (one per record that reset the root)
    tail: np.ndarray       # entry indices (into the group's input) to fold again, in order


class Group:
    """Entries of records folded together (in record order), grouped by root and record."""

    def __init__(self, kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray,
                 record: np.ndarray | None, sender: np.ndarray) -> None:
        """``record``: each entry's record number (non-decreasing), None for a single record;
        ``sender``: the owner index each record names for its INITs (indexed by record)."""
        mixed = roots.view(np.uint64) * MIX
        order = np.argsort(mixed)
        mixed = mixed[order]
        first = run_starts(mixed)
        segment = first
        if record is not None and not first.all():  # some root more than once
            rec = record[order]
            across = ~first[1:] & (rec[1:] != rec[:-1])
            if across.any():  # roots in several records: put their entries in record order
                run = np.cumsum(first) - 1
                spans = np.zeros(run[-1] + 1, bool)
                spans[run[1:][across]] = True
                at = np.flatnonzero(spans[run])  # whole runs, sorted in place
                order[at] = order[at[np.lexsort((order[at], run[at]))]]
                rec = record[order]
                segment = first.copy()
                segment[1:] |= rec[1:] != rec[:-1]
        self.order = order
        self.several_segments = segment is not first
        starts = np.flatnonzero(first)
        self.mixed = mixed[starts]
        self.roots = roots[order[starts]]
        bits = KIND_BITS[kinds[order]]
        xvals = np.where(bits & (INIT_BIT | ACK_BIT), vals[order], 0)
        seg_starts = np.flatnonzero(segment) if self.several_segments else starts
        if len(seg_starts) == len(order):  # every segment one entry: no reductions
            self._seg_xor, self._seg_bits = xvals, bits
        else:
            self._seg_xor = np.bitwise_xor.reduceat(xvals, seg_starts)
            self._seg_bits = np.bitwise_or.reduceat(bits, seg_starts)
        self._seg_record = (np.zeros(len(seg_starts), np.intp) if record is None
                            else record[order[seg_starts]])
        self._seg_sender = sender[self._seg_record]
        self._segment = segment
        self._first = first

    def fold(self, val: np.ndarray, owner: np.ndarray, failed: np.ndarray) -> Folded:
        """Apply the rule segment by segment to the roots' stored state (zeros where absent)."""
        xor, bits, sender, record = (self._seg_xor, self._seg_bits, self._seg_sender,
                                     self._seg_record)
        if not self.several_segments:  # one segment a root: the rule as it stands
            return _fold_once(val, owner, failed, xor, bits, sender, record)
        seg_first = self._first[self._segment]
        run_first = np.flatnonzero(seg_first)
        seg_root = np.cumsum(seg_first) - 1
        once = np.ones(len(run_first), bool)
        once[seg_root[~seg_first]] = False
        folded = _fold_once(val, owner, failed, xor[run_first], bits[run_first],
                            sender[run_first], record[run_first])
        folded.notices = folded.notices[once[folded.notices]]
        folded.notice_owner = folded.owner[folded.notices]
        # Roots heard from in several records: the rule after each, as a prefix scan.
        multi = np.flatnonzero(~once)
        segs = np.flatnonzero(~once[seg_root])
        notices, notice_owner, tail_segs = _scan(
            folded, multi, val[multi], owner[multi], failed[multi], seg_first[segs], xor[segs],
            bits[segs], sender[segs])
        folded.notices = np.concatenate([folded.notices, notices])
        folded.notice_owner = np.concatenate([folded.notice_owner, notice_owner])
        if len(tail_segs):
            tail = np.zeros(len(seg_first), bool)
            tail[segs[tail_segs]] = True
            folded.tail = np.sort(self.order[tail[np.cumsum(self._segment) - 1]])
        return folded


def _fold_once(val, owner, failed, xor, bits, sender, record) -> Folded:
    """Each root in one record: the rule's update, then its decision."""
    val, owner, failed = rule.update(val, owner, failed, xor, bits, sender)
    decision = rule.decide(val, owner, failed, bits)
    notices = np.flatnonzero(decision == _RESET)
    return Folded(val, owner, failed, bits, _final(decision), record, notices, owner[notices],
                  np.empty(0, np.intp))


def _scan(folded: Folded, multi, val0, owner0, failed0, seg_first, xor, bits, sender):
    """The rule applied record by record to the roots ``multi`` (their stored state and their
    segments, in order); writes their results into ``folded``. Returns the notices (root
    indices, owners) and the segments (indices into those given) after each root's decision."""
    n_seg = len(xor)
    run_first = np.flatnonzero(seg_first)
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
    # The first decisive segment of each root ends its entry; later ones are the tail.
    decisive = decision <= _FAILED
    ends = np.minimum.reduceat(np.where(decisive, index, n_seg), run_first)
    end_of = ends[root]
    notices = np.flatnonzero((decision == _RESET) & (index < end_of))
    last = np.append(run_first[1:], n_seg) - 1
    at = np.where(ends < n_seg, ends, last)  # the segment whose state the root keeps
    folded.val[multi] = val[at]
    folded.owner[multi] = owner[at]
    folded.failed[multi] = failed[at]
    folded.bits[multi] = np.bitwise_or.reduceat(np.where(index <= end_of, bits, 0), run_first)
    folded.decision[multi] = _final(decision[at])
    return multi[root[notices]], owner[notices], np.flatnonzero(index > end_of)


def mixed_of(roots: np.ndarray) -> np.ndarray:
    """The hash-mixed key of each root (a permutation of uint64)."""
    return roots.view(np.uint64) * MIX


def _final(decision: np.ndarray) -> np.ndarray:
    """Decisions that end an entry (COMPLETED, FAILED); NOTHING for the rest."""
    final = decision.copy()
    final[decision == _RESET] = rule.NOTHING
    return final
