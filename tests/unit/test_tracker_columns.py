"""The tracker's columnar pending store decides exactly as the object-per-offset tracker it replaced.

``tracker_before_columns`` is the tracker as it was (a PendingOffset, heap, dict and backstop entry
per offset); both are driven with the same random operations, roots and clock, and every answer
and every observable (commit points, done offsets, pending offsets and roots, retries, backstop
expiries in order, unsettled offsets, stats) must be the same. The done prefix is dropped after a
few slots here, so that path runs too.
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from tracker_before_columns import InFlightTracker as TrackerBefore

from reliable_kafka.core import pending
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Backoff, InFlightTracker
from reliable_kafka.errors import ArgumentError

TPS = [("orders", 0), ("orders", 1)]


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _make(cls, clock, max_retries):
    return cls(
        max_pending=None,
        max_retries=max_retries,
        backoff=Backoff(initial_ms=10, multiplier=2, max_ms=50),
        message_timeout_ms=100,
        backstop_grace_ms=20,
        clock=clock,
    )


def _observed(tracker, tps):
    return {
        "points": tracker.commit_points(),
        "done_above": {tp: tracker.done_above(tp) for tp in tps},
        "pending": {tp: tracker.pending_offsets(tp) for tp in tps},
        "unsettled": {tp: tracker.unsettled(tp) for tp in tps},
        "summary": tracker.pending_summary(),
        "roots": tracker.pending_roots(),
        "stats": tracker.stats.as_dict(),
        "by_reason": dict(tracker.dead_letters_by_reason),
        "first_unseen": {tp: tracker.first_unseen(tp) for tp in tps},
        "latency": (tracker.complete_latency.count, tracker.complete_latency.counts),
    }


def _action(action):
    return (
        None
        if action is None
        else (action.kind, action.tp, action.offset, action.attempt, action.reason, action.due_ms, action.root)
    )


def _call(fn, *args, **kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except ArgumentError as error:
        return ("refused", str(error))


_shifts = st.sampled_from([-3, -2, -1, 0, 0, 0, 0, 1, 3])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("emit"), st.integers(0, 1), _shifts),
        st.tuples(st.just("emit_many"), st.integers(0, 1), st.lists(_shifts, max_size=12)),
        st.tuples(st.just("emit_many"), st.integers(0, 1), st.lists(_shifts, min_size=2, max_size=6)),
        st.tuples(st.just("complete"), st.lists(st.integers(0, 60), max_size=12), st.booleans()),
        st.tuples(st.sampled_from(["failed", "timed_out", "reset"]), st.integers(0, 60), st.none()),
        st.tuples(st.just("tick"), st.integers(0, 90), st.none()),
        st.tuples(st.just("due"), st.one_of(st.none(), st.integers(1, 3)), st.none()),
        st.tuples(
            st.sampled_from(["dead_lettered", "give_up", "done_immediately"]), st.integers(0, 1), st.integers(0, 40)
        ),
        st.tuples(st.just("rebalance"), st.integers(0, 1), st.integers(0, 2)),
    ),
    max_size=50,
)


@settings(max_examples=600, deadline=None)
@given(steps, st.integers(0, 2), st.booleans())
def test_columns_decide_as_the_tracker_before_them(script, max_retries, assign_first):
    run(script, max_retries, assign_first)


def run(script, max_retries, assign_first):
    clock = _Clock()
    new, old = _make(InFlightTracker, clock, max_retries), _make(TrackerBefore, clock, max_retries)
    if assign_first:
        for tracker in (new, old):
            tracker.assign(TPS[0], committed=3, done_above=[4, 5, 9])
    roots: list[int] = []  # every root handed out, in order (outcomes pick from them)
    fresh = iter(range(1, 10**9))
    cursor = {tp: 0 for tp in TPS}  # the next new offset a consumer would read
    kept: dict = {}  # (tp, offset) -> the record given with its last emit (the new tracker keeps it while pending)

    def offset_for(tp, shift):
        # shift > 0: a new offset after a gap; 0: the next one; < 0: an older one (re-emission or
        # refused); after an assign the cursor is the commit point, below offsets restored as done
        return max(cursor[tp] + shift, 0)

    for step, a, b in script:
        if step == "emit":
            tp, offset, root = TPS[a], offset_for(TPS[a], b), next(fresh)
            got = [_call(new.emitted, tp, offset, root=root, record=-root), _call(old.emitted, tp, offset, root=root)]
            if got[0][0] == "ok":
                kept[(tp, offset)] = -root
                roots.append(root)
                cursor[tp] = max(cursor[tp], offset + 1)
        elif step == "emit_many":
            tp = TPS[a]
            offsets, at = [], offset_for(tp, 0)
            for shift in b:
                at = max(at + shift, 0)
                offsets.append(at)
                at += 1
            batch = [next(fresh) for _ in offsets]
            records = [-root for root in batch]
            got = [
                _call(new.emitted_many, tp, offsets, batch, records=records),
                _call(old.emitted_many, tp, offsets, batch),
            ]
            if got[0][0] == "ok":
                kept.update(zip([(tp, offset) for offset in offsets], records))
                roots.extend(batch)
                if offsets:
                    cursor[tp] = max(cursor[tp], max(offsets) + 1)
        elif step == "complete":
            picked = [roots[i % len(roots)] if roots else 1 for i in a] + ([999_999_999_999] if b else [])
            got = [
                [tuple(e) for e in new.complete_many(picked)],
                [(e.tp, e.offset, e.attempt) for e in old.complete_many(picked)],
            ]
        elif step in ("failed", "timed_out", "reset"):
            kind = {
                "failed": OutcomeKind.FAILED,
                "timed_out": OutcomeKind.TIMED_OUT,
                "reset": OutcomeKind.RESET_TIMEOUT,
            }
            root = roots[a % len(roots)] if roots else 1
            got = [_action(t.on_outcome(root, kind[step])) for t in (new, old)]
        elif step == "tick":
            clock.now += a
            got = [[_action(x) for x in t.expire_backstop()] for t in (new, old)]
        elif step == "due":
            got = [list(t.due_redeliveries(limit=a)) for t in (new, old)]
        elif step == "dead_lettered":
            got = [t.dead_lettered(TPS[a], b) for t in (new, old)]
        elif step == "give_up":
            got = [_action(t.give_up(TPS[a], b, "poison pill")) for t in (new, old)]
        elif step == "done_immediately":
            tp = TPS[a]
            offset = b if b < offset_for(tp, 0) else offset_for(tp, 0)
            got = [t.done_immediately(tp, offset) for t in (new, old)]
            cursor[tp] = max(cursor[tp], offset + 1)
        else:  # rebalance: revoke, then assign from the commit point with what the metadata keeps
            tp = TPS[a]
            above = old.done_above(tp)[: [0, 2, 100][b]]
            got = [t.revoke(tp) for t in (new, old)]
            point = got[1]
            for t in (new, old):
                t.assign(tp, committed=point, done_above=above if point is not None else [])
            cursor[tp] = point or 0
        assert got[0] == got[1], (step, a, b)
        assert _observed(new, TPS) == _observed(old, TPS), (step, a, b)
        assert new.next_due_ms() == old.next_due_ms()
        for tp in TPS:
            top = max([cursor[tp], *old.pending_offsets(tp), *old.done_above(tp)]) + 2
            assert [new.should_skip(tp, o) for o in range(top)] == [old.should_skip(tp, o) for o in range(top)]
            assert new.skip_mask(tp, list(range(top))).tolist() == old.skip_mask(tp, list(range(top))).tolist()
            assert [new.is_pending(tp, o) for o in range(top)] == [old.is_pending(tp, o) for o in range(top)]
            assert [new.record(tp, o) for o in range(top)] == [
                kept.get((tp, o)) if old.is_pending(tp, o) else None for o in range(top)
            ]


_SHIPPED_DROP_FROM = pending._DROP_FROM


def setup_module():
    """Drop a done prefix from four slots on (1024 in the shipped code), so that the tests reach it."""
    pending._DROP_FROM = 4


def teardown_module():
    pending._DROP_FROM = _SHIPPED_DROP_FROM
