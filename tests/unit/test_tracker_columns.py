"""The in-flight tracker decides as its reference model (tracker_model.py) on random operations.

The tracker and the model are driven with the same operations, roots and clock; every answer and
every observable (commit points, done offsets, pending offsets and roots, records, retries and
redeliveries, backstop expiries in order, unsettled offsets, stats, the latency histogram) must be
the same, and the tracker must keep its invariants on its own (commit points never move back nor
past an offset not done). The only thing not compared is the wording of a refusal: the model
names the refused offset, the tracker's message must name the same one. The done prefix is
dropped after a few slots here, so that path runs too.
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from tracker_model import TrackerModel

from reliable_kafka.core import pending
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.latency import BOUNDS_S
from reliable_kafka.core.tracker import Backoff, InFlightTracker
from reliable_kafka.errors import ArgumentError

TPS = [("orders", 0), ("orders", 1)]
BACKOFF = Backoff(initial_ms=10, multiplier=2, max_ms=50)
KINDS = {
    "failed": OutcomeKind.FAILED,
    "timed_out": OutcomeKind.TIMED_OUT,
    "reset": OutcomeKind.RESET_TIMEOUT,
    "completed": OutcomeKind.COMPLETED,
}
ACTION_FIELDS = ("kind", "tp", "offset", "attempt", "reason", "due_ms", "root")  # OutcomeAction's


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _observed(tracker, tps):
    """What the shell, the status snapshot and the commit read from the tracker."""
    return {
        "points": tracker.commit_points(),
        "partitions": sorted(tracker.partitions()),
        "done_above": {tp: tracker.done_above(tp) for tp in tps},
        "pending": {tp: tracker.pending_offsets(tp) for tp in tps},
        "unsettled": {tp: tracker.unsettled(tp) for tp in tps},
        "summary": tracker.pending_summary(),
        "roots": tracker.pending_roots(),
        "over_max_pending": tracker.over_max_pending(),
        "records_held": sorted(tracker.records_held()),
        "stats": tracker.stats.as_dict(),
        "by_reason": dict(tracker.dead_letters_by_reason),
        "first_unseen": {tp: tracker.first_unseen(tp) for tp in tps},
        "latency": (tracker.complete_latency.count, tracker.complete_latency.counts),
        "next_due_ms": tracker.next_due_ms(),
    }


def _expected(model, tps):
    """The same from the model."""
    return {
        "points": model.commit_points(),
        "partitions": sorted(model.parts),
        "done_above": {tp: model.done_above(tp) for tp in tps},
        "pending": {tp: model.pending_offsets(tp) for tp in tps},
        "unsettled": {tp: model.unsettled(tp) for tp in tps},
        "summary": model.pending_summary(),
        "roots": len(model.roots),
        "over_max_pending": model.over_max_pending(),
        "records_held": model.records_held(),
        "stats": model.stats,
        "by_reason": model.by_reason,
        "first_unseen": {tp: model.first_unseen(tp) for tp in tps},
        "latency": (len(model.latencies), model.latency_counts(BOUNDS_S)),
        "next_due_ms": model.next_due_ms(),
    }


def _action(action):
    return None if action is None else tuple(getattr(action, f) for f in ACTION_FIELDS)


def _call(fn, *args, **kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except ArgumentError as error:
        return ("refused", error)


def _same_call(tp, got, want):
    """The same answer, or both refused for the same offset."""
    if got[0] == "refused" and want[0] == "refused":
        return f"emitted {tp}@{want[1].args[0]}:" in str(got[1])
    return got == want


_shifts = st.sampled_from([-3, -2, -1, 0, 0, 0, 0, 1, 3])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("emit"), st.integers(0, 1), _shifts),
        st.tuples(st.just("emit_many"), st.integers(0, 1), st.lists(_shifts, max_size=12)),
        st.tuples(st.just("emit_many"), st.integers(0, 1), st.lists(_shifts, min_size=2, max_size=6)),
        st.tuples(st.just("complete"), st.lists(st.integers(0, 60), max_size=12), st.booleans()),
        # outcomes, time and redeliveries weigh more than one branch each: failures and retries are
        # what most examples would otherwise never reach
        st.tuples(st.sampled_from(["failed", "timed_out"]), st.integers(0, 60), st.none()),
        st.tuples(st.sampled_from(["failed", "timed_out", "reset", "completed"]), st.integers(0, 60), st.none()),
        st.tuples(st.just("tick"), st.integers(0, 90), st.none()),
        st.tuples(st.just("tick"), st.integers(0, 90), st.none()),
        st.tuples(st.just("due"), st.one_of(st.none(), st.integers(1, 3)), st.booleans()),
        st.tuples(st.just("due"), st.none(), st.just(True)),
        st.tuples(
            st.sampled_from(["dead_lettered", "give_up", "done_immediately"]), st.integers(0, 1), st.integers(0, 40)
        ),
        st.tuples(st.sampled_from(["dead_lettered", "give_up"]), st.integers(0, 1), st.integers(0, 40)),
        st.tuples(st.just("rebalance"), st.integers(0, 1), st.integers(0, 2)),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=600, deadline=None)
@given(steps, st.sampled_from([0, 1, 2, None]), st.sampled_from([None, None, 1, 4]), st.booleans())
def test_tracker_decides_as_its_model(script, max_retries, max_pending, assign_first):
    run(script, max_retries, max_pending, assign_first)


def run(script, max_retries, max_pending, assign_first):
    clock = _Clock()
    tracker = InFlightTracker(
        max_pending=max_pending,
        max_retries=max_retries,
        backoff=BACKOFF,
        message_timeout_ms=100,
        backstop_grace_ms=20,
        clock=clock,
    )
    model = TrackerModel(
        max_pending=max_pending, max_retries=max_retries, backoff=BACKOFF, backstop_ms=120, clock=clock
    )
    if assign_first:
        for t in (tracker, model):
            t.assign(TPS[0], committed=3, done_above=[4, 5, 9])
    roots: list[int] = []  # every root handed out, in order (outcomes pick from them)
    fresh = iter(range(1, 10**9))
    cursor = {tp: 0 for tp in TPS}  # the next new offset a consumer would read
    last_point: dict = {}  # tp -> its commit point after the step before (within one assignment)

    def offset_for(tp, shift):
        # shift > 0: a new offset after a gap; 0: the next one; < 0: an older one (re-emission or
        # refused); after an assign the cursor is the commit point, below offsets restored as done
        return max(cursor[tp] + shift, 0)

    for step, a, b in script:
        if step == "emit":
            tp, offset, root = TPS[a], offset_for(TPS[a], b), next(fresh)
            got = _call(tracker.emitted, tp, offset, root=root, record=-root)
            want = _call(model.emitted, tp, offset, root=root, record=-root)
            assert _same_call(tp, got, want), (step, a, b, got, want)
            if want[0] == "ok":
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
            got = _call(tracker.emitted_many, tp, offsets, batch, records=records)
            want = _call(model.emitted_many, tp, offsets, batch, records=records)
            assert _same_call(tp, got, want), (step, a, b, got, want)
            if want[0] == "ok":
                roots.extend(batch)
                if offsets:
                    cursor[tp] = max(cursor[tp], max(offsets) + 1)
        elif step == "complete":
            picked = [_pick(roots, model, i) for i in a] + ([999_999_999_999] if b else [])
            got, want = [tuple(e) for e in tracker.complete_many(picked)], model.complete_many(picked)
        elif step in KINDS:
            root = _pick(roots, model, a)
            got, want = _action(tracker.on_outcome(root, KINDS[step])), model.on_outcome(root, KINDS[step].name)
        elif step == "tick":
            clock.now += a
            got, want = [_action(x) for x in tracker.expire_backstop()], model.expire_backstop()
        elif step == "due":  # then, if b, the shell re-reads each record and emits it again
            got = [(r.tp, r.offset, r.attempt, r.reason) for r in tracker.due_redeliveries(limit=a)]
            want = model.due_redeliveries(limit=a)
            assert got == want, (step, a, b, got, want)
            for tp, offset, attempt, _ in want if b else ():
                root = next(fresh)
                assert tracker.emitted(tp, offset, root=root, attempt=attempt) == root
                model.emitted(tp, offset, root=root, attempt=attempt)
                roots.append(root)
        elif step == "dead_lettered":
            tp, offset = _pick_offset(model, TPS[a], b, "dead letter")
            got, want = tracker.dead_lettered(tp, offset), model.dead_lettered(tp, offset)
        elif step == "give_up":
            tp, offset = _pick_offset(model, TPS[a], b, "retry", "redelivering")
            got, want = _action(tracker.give_up(tp, offset, "poison pill")), model.give_up(tp, offset, "poison pill")
        elif step == "done_immediately":
            tp = TPS[a]
            offset = b if b < offset_for(tp, 0) else offset_for(tp, 0)
            got, want = tracker.done_immediately(tp, offset), model.done_immediately(tp, offset)
            cursor[tp] = max(cursor[tp], offset + 1)
        else:  # rebalance: revoke, then assign from the commit point with what the metadata keeps
            tp = TPS[a]
            above = model.done_above(tp)[: [0, 2, 100][b]]
            got, want = tracker.revoke(tp), model.revoke(tp)
            for t in (tracker, model):
                t.assign(tp, committed=want, done_above=above if want is not None else [])
            cursor[tp] = want or 0
            last_point.pop(tp, None)
        if step not in ("emit", "emit_many"):
            assert got == want, (step, a, b, got, want)
        assert _observed(tracker, TPS) == _expected(model, TPS), (step, a, b)
        _check_invariants(tracker, cursor, last_point)
        for tp in TPS:
            top = max([cursor[tp], *model.pending_offsets(tp), *model.done_above(tp)]) + 2
            skips = [model.should_skip(tp, o) for o in range(top)]
            assert [tracker.should_skip(tp, o) for o in range(top)] == skips
            assert tracker.skip_mask(tp, list(range(top))).tolist() == skips
            pending_now = set(model.pending_offsets(tp))
            assert [tracker.is_pending(tp, o) for o in range(top)] == [o in pending_now for o in range(top)]
            assert [tracker.record(tp, o) for o in range(top)] == [model.record(tp, o) for o in range(top)]


def _pick(roots, model, i):
    """A root for an outcome: even ``i`` one in flight (if any), odd ``i`` any handed out (mostly settled)."""
    live = list(model.roots) if i % 2 == 0 else roots
    return live[i // 2 % len(live)] if live else 1


def _pick_offset(model, tp, i, *states):
    """``(tp, offset)`` for a dead-letter step: even ``i`` a pending offset of any partition in one of
    ``states`` (if any), as a shell that acts on the tracker's actions; odd ``i`` ``tp`` and one of 0..20."""
    found = model.pending_in(*states)
    return found[i // 2 % len(found)] if i % 2 == 0 and found else (tp, i // 2)


def _check_invariants(tracker, cursor, last_point):
    """What the tracker must keep whatever the model says (DESIGN invariant 1 and the commit's rules)."""
    stats = tracker.stats
    assert stats.redelivered <= stats.failed + stats.timed_out + stats.backstop_expired
    assert stats.completed + stats.dead_lettered <= stats.emitted
    for tp, point in tracker.commit_points().items():
        pending_now = tracker.pending_offsets(tp)
        assert all(offset >= point for offset in pending_now)  # never past an offset not done
        assert not pending_now or pending_now[0] == point
        assert all(offset > point and offset not in pending_now for offset in tracker.done_above(tp))
        assert point >= last_point.get(tp, point), (tp, point, last_point)  # never moves back
        last_point[tp] = point
        start = tracker.first_unseen(tp)
        assert not any(tracker.should_skip(tp, o) for o in range(start, max(start, cursor[tp]) + 3))


_SHIPPED_DROP_FROM = pending._DROP_FROM


def setup_module():
    """Drop a done prefix from four slots on (1024 in the shipped code), so that the tests reach it."""
    pending._DROP_FROM = 4


def teardown_module():
    pending._DROP_FROM = _SHIPPED_DROP_FROM
