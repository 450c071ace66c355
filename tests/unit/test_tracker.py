"""In-flight tracker: commit points with gaps, retries, dead letters, backstop, rebalance.

The state machine at the end drives the tracker with random operations against a brute-force
model and a ground truth of which records are really done (invariant 1: nothing below a commit
point is pending or lost, also across revoke/assign with commit metadata).
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reliable_kafka.core.commit_metadata import decode_done_above, encode_done_above
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import (
    ActionKind,
    Backoff,
    InFlightTracker,
    OutcomeAction,
    Redelivery,
)
from reliable_kafka.errors import ArgumentError, ConfigError

TP = ("orders", 0)
TP2 = ("orders", 1)
COMPLETED, FAILED, TIMED_OUT = OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.TIMED_OUT


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make(**kwargs):
    clock = FakeClock()
    kwargs.setdefault("backoff", Backoff(initial_ms=100, multiplier=2.0, max_ms=1_000))
    return InFlightTracker(clock=clock, **kwargs), clock


# -- commit point ----------------------------------------------------------------------------


def test_commit_point_is_smallest_pending_offset_and_gaps_never_block():
    tracker, _ = make()
    roots = {off: tracker.emitted(TP, off) for off in (0, 1, 2, 5, 6, 9)}  # 3, 4, 7, 8: gaps
    assert tracker.commit_point(TP) == 0
    for off in (1, 5):
        tracker.on_outcome(roots[off], COMPLETED)
    assert tracker.commit_point(TP) == 0
    assert tracker.done_above(TP) == [1, 5]
    tracker.on_outcome(roots[0], COMPLETED)
    assert tracker.commit_point(TP) == 2
    assert tracker.done_above(TP) == [5]
    tracker.on_outcome(roots[2], COMPLETED)
    assert tracker.commit_point(TP) == 6
    tracker.on_outcome(roots[9], COMPLETED)
    tracker.on_outcome(roots[6], COMPLETED)
    assert tracker.commit_point(TP) == 10  # nothing pending: highest seen + 1
    assert tracker.done_above(TP) == []
    assert tracker.pending_offsets(TP) == []
    assert tracker.stats.emitted == 6 and tracker.stats.completed == 6


def test_unknown_partition_has_no_commit_point():
    tracker, _ = make()
    assert tracker.commit_point(TP) is None
    assert tracker.commit_points() == {}
    assert tracker.done_above(TP) == []
    assert not tracker.should_skip(TP, 0)
    assert tracker.revoke(TP) is None


def test_commit_points_of_all_partitions():
    tracker, _ = make()
    tracker.assign(TP, committed=40)
    tracker.assign(TP2, committed=None)
    tracker.emitted(TP, 40)
    assert tracker.commit_points() == {TP: 40}
    tracker.done_immediately(TP2, 7)
    assert tracker.commit_points() == {TP: 40, TP2: 8}
    assert sorted(tracker.partitions()) == [TP, TP2]


def test_done_immediately_moves_the_commit_point_and_forgets_a_pending_root():
    tracker, _ = make()
    tracker.done_immediately(TP, 0)
    root = tracker.emitted(TP, 1)
    tracker.done_immediately(TP, 2)
    assert tracker.commit_point(TP) == 1
    tracker.done_immediately(TP, 1)  # e.g. switched to at-most-once
    assert tracker.commit_point(TP) == 3
    assert tracker.pending_roots() == 0
    assert tracker.on_outcome(root, FAILED) is None


def test_outcome_for_unknown_or_already_decided_root_is_ignored():
    tracker, _ = make()
    root = tracker.emitted(TP, 0)
    assert tracker.on_outcome(12345, COMPLETED) is None
    done = OutcomeAction(ActionKind.DONE, TP, 0, 1, "COMPLETED")
    assert tracker.on_outcome(root, COMPLETED) == done
    assert tracker.on_outcome(root, FAILED) is None  # a replayed acker re-sends it
    assert tracker.stats.ignored_outcomes == 2
    assert tracker.commit_point(TP) == 1


@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["emit", "complete", "complete_unknown"])), max_size=60))
def test_complete_is_on_outcome_completed_without_the_action(steps):
    """The spout's hot path (``complete``) leaves the tracker as ``on_outcome(root, COMPLETED)`` does."""
    by_outcome, by_complete = make()[0], make()[0]
    roots: dict[int, int] = {}
    for offset, step in steps:
        if step == "emit":
            try:
                roots[offset] = by_outcome.emitted(TP, offset)
            except ArgumentError:  # out of offset order: refused by both
                with pytest.raises(ArgumentError, match="order"):
                    by_complete.emitted(TP, offset, root=99_998)
                continue
            by_complete.emitted(TP, offset, root=roots[offset])
            continue
        root = roots.get(offset, 0) if step == "complete" else 99_999
        action = by_outcome.on_outcome(root, COMPLETED)
        entry = by_complete.complete(root)
        if action is None:
            assert entry is None
        else:
            assert entry is not None and (entry.tp, entry.offset, entry.attempt) == (action.tp, action.offset, 1)
        assert by_outcome.commit_point(TP) == by_complete.commit_point(TP)
        assert by_outcome.stats == by_complete.stats
        assert by_outcome.pending_roots() == by_complete.pending_roots()


@given(
    st.lists(st.integers(0, 30), max_size=40),
    st.lists(st.lists(st.integers(-1, 30), max_size=12), max_size=6),
    st.integers(0, 50),
)
def test_complete_many_is_complete_of_each_root_in_order(emits, batches, wait_ms):
    """A spout's outcome batch (``complete_many``) leaves the tracker as ``complete`` of each root
    does, including roots not held (-1: a root never emitted) and a root given twice."""
    one_by_one, clock_one = make()
    batched, clock_batched = make()
    roots: dict[int, int] = {}
    for offset in emits:
        if offset < max(roots, default=-1) and offset not in roots:
            continue  # out of offset order: refused (test_registering_out_of_offset_order_is_refused)
        roots[offset] = one_by_one.emitted(TP, offset)
        batched.emitted(TP, offset, root=roots[offset])
    clock_one.now = clock_batched.now = wait_ms
    for batch in batches:
        given_roots = [roots.get(offset, 99_999) for offset in batch]
        expected = [one_by_one.complete(root) for root in given_roots]
        entries = batched.complete_many(given_roots)
        assert [(e.tp, e.offset, e.attempt) for e in entries] == [
            (e.tp, e.offset, e.attempt) for e in expected if e is not None
        ]
        assert batched.commit_point(TP) == one_by_one.commit_point(TP)
        assert batched.stats == one_by_one.stats
        assert batched.pending_roots() == one_by_one.pending_roots()
        got, want = batched.complete_latency.snapshot(), one_by_one.complete_latency.snapshot()
        assert got["counts"] == want["counts"] and got["count"] == want["count"]
        assert got["sum_s"] == pytest.approx(want["sum_s"])  # summed in another order


@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 20)), max_size=50),
    st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 20)), max_size=15), max_size=6),
    st.booleans(),
)
def test_complete_many_over_partitions_is_complete_of_each_root_in_order(emits, batches, shared_keys):
    """``complete_many`` looks a partition up once per run of its entries: over several partitions,
    whose entries share their key object (``emitted_many``) or not, it is ``complete`` of each root."""
    tps = [("orders", 0), ("orders", 1), ("audit", 0)]
    one_by_one, _ = make()
    batched, _ = make()
    roots: dict[tuple[int, int], int] = {}
    for index, offset in emits:
        tp = tps[index] if shared_keys else (tps[index][0], tps[index][1])  # a fresh tuple per emit
        if offset < max((o for i, o in roots if i == index), default=-1) and (index, offset) not in roots:
            continue  # out of offset order: refused (test_registering_out_of_offset_order_is_refused)
        roots[(index, offset)] = one_by_one.emitted(tp, offset)
        batched.emitted(tp, offset, root=roots[(index, offset)])
    for batch in batches:
        given_roots = [roots.get(pair, 99_999) for pair in batch]
        expected = [one_by_one.complete(root) for root in given_roots]
        entries = batched.complete_many(given_roots)
        assert [(e.tp, e.offset) for e in entries] == [(e.tp, e.offset) for e in expected if e is not None]
        for tp in tps:
            assert batched.commit_point(tp) == one_by_one.commit_point(tp)
            assert batched.done_above(tp) == one_by_one.done_above(tp)
            assert batched.pending_offsets(tp) == one_by_one.pending_offsets(tp)
        assert batched.stats == one_by_one.stats


def test_outcome_kind_may_be_a_plain_int_from_the_wire():
    tracker, _ = make()
    root = tracker.emitted(TP, 0)
    assert tracker.on_outcome(root, 0).kind is ActionKind.DONE
    with pytest.raises(ValueError):
        tracker.on_outcome(tracker.emitted(TP, 1), 7)


def test_reemitting_a_pending_offset_forgets_the_old_root():
    tracker, _ = make()
    old = tracker.emitted(TP, 3)
    new = tracker.emitted(TP, 3)  # Kafka handed the record again after a seek or restart
    assert new != old
    assert tracker.pending_roots() == 1
    assert tracker.on_outcome(old, COMPLETED) is None
    assert tracker.commit_point(TP) == 3
    assert tracker.on_outcome(new, COMPLETED).kind is ActionKind.DONE
    assert tracker.commit_point(TP) == 4


def test_registering_out_of_offset_order_is_refused():
    # With nothing pending, registering 7 lets the commit point pass 3..6 as offsets Kafka never
    # handed out; a record at 3 registered after that could already be committed as done.
    tracker, _ = make()
    root = tracker.emitted(TP, 7)
    tracker.on_outcome(root, COMPLETED)
    assert tracker.commit_point(TP) == 8
    with pytest.raises(ArgumentError, match=r"orders', 0\)@3: .*out of offset order"):
        tracker.emitted(TP, 3)
    with pytest.raises(ArgumentError, match="out of offset order"):
        tracker.emitted_many(TP, [8, 9, 5], [81, 91, 51])  # refused whole: nothing of it registered
    with pytest.raises(ArgumentError, match="out of offset order"):
        tracker.emitted_many(TP, list(range(2, 102)), list(range(1_001, 1_101)))  # the bulk path
    assert tracker.pending_offsets(TP) == [] and tracker.commit_point(TP) == 8 and tracker.pending_roots() == 0
    assert tracker.stats.emitted == 1
    # a pending offset may be registered again below the position (a redelivery), and a re-assigned
    # partition starts again from its committed offset
    pending = tracker.emitted(TP, 10)
    tracker.emitted(TP, 11)
    tracker.on_outcome(pending, FAILED)
    (redelivery,) = tracker.due_redeliveries(10**6)
    tracker.emitted(TP, 10, attempt=redelivery.attempt)
    tracker.emitted_many(TP, [10, 12, 12, 15], [101, 121, 122, 151])  # re-emissions, then new offsets with a gap
    assert tracker.pending_offsets(TP) == [10, 11, 12, 15]
    tracker.assign(TP, committed=3, done_above=[5])
    tracker.emitted(TP, 3)
    assert tracker.should_skip(TP, 5) and not tracker.should_skip(TP, 6)
    tracker.emitted(TP, 6)
    with pytest.raises(ArgumentError, match="out of offset order"):
        tracker.emitted(TP, 4)  # Kafka handed 3 then 6: 4 and 5 were no records (5 restored done)


def test_given_roots_are_used_and_duplicates_refused():
    tracker, _ = make()
    assert tracker.emitted(TP, 0, root=77) == 77
    with pytest.raises(ValueError, match="already held"):
        tracker.emitted(TP, 1, root=77)
    assert tracker.emitted(TP, 0, root=77) == 77  # the same record again under the same root
    with pytest.raises(ValueError):
        tracker.emitted(TP, 1, root=0)
    with pytest.raises(ValueError):
        tracker.emitted(TP, 1, attempt=0)
    assert tracker.pending_offsets(TP) == [0]


# -- retries and dead letters ----------------------------------------------------------------


def test_due_redeliveries_limit_leaves_the_rest_due_in_order():
    tracker, clock = make(max_retries=5)
    roots = [tracker.emitted(TP, offset) for offset in range(5)]
    for root in roots:
        tracker.on_outcome(root, FAILED)
    clock.now = 10**6
    assert [r.offset for r in tracker.due_redeliveries(limit=2)] == [0, 1]
    assert [r.offset for r in tracker.due_redeliveries(limit=2)] == [2, 3]
    assert [r.offset for r in tracker.due_redeliveries()] == [4]
    assert tracker.due_redeliveries(limit=2) == []
    assert tracker.commit_point(TP) == 0  # all five still pending until emitted again


def test_failed_record_is_redelivered_after_backoff_then_dead_lettered():
    tracker, clock = make(max_retries=2)
    root = tracker.emitted(TP, 10)
    tracker.emitted(TP, 11)
    action = tracker.on_outcome(root, FAILED)
    assert action == OutcomeAction(ActionKind.REDELIVER, TP, 10, 1, "FAILED", due_ms=100)
    assert tracker.next_due_ms() == 100
    clock.now = 99
    assert tracker.due_redeliveries() == []
    clock.now = 100
    assert tracker.due_redeliveries() == [Redelivery(TP, 10, 2, "FAILED")]
    assert tracker.due_redeliveries() == []  # handed out once
    assert tracker.commit_point(TP) == 10  # still pending while redelivered
    root = tracker.emitted(TP, 10, attempt=2)
    action = tracker.on_outcome(root, TIMED_OUT)
    assert action.kind is ActionKind.REDELIVER and action.attempt == 2 and action.due_ms == 300
    assert tracker.due_redeliveries(now_ms=300) == [Redelivery(TP, 10, 3, "TIMED_OUT")]
    root = tracker.emitted(TP, 10, attempt=3)
    action = tracker.on_outcome(root, FAILED)
    assert action == OutcomeAction(ActionKind.DEAD_LETTER, TP, 10, 3, "FAILED")
    assert tracker.commit_point(TP) == 10  # parked until the DLQ write is confirmed
    assert tracker.due_redeliveries(now_ms=10**9) == []
    tracker.dead_lettered(TP, 10)
    assert tracker.commit_point(TP) == 11
    s = tracker.stats
    assert (s.failed, s.timed_out, s.redelivered, s.dead_lettered) == (2, 1, 2, 1)


def test_max_retries_zero_dead_letters_at_first_failure():
    tracker, _ = make(max_retries=0)
    action = tracker.on_outcome(tracker.emitted(TP, 0), FAILED)
    assert action.kind is ActionKind.DEAD_LETTER and action.attempt == 1


def test_max_retries_none_retries_forever_with_capped_backoff():
    tracker, clock = make(max_retries=None)
    attempt = 1
    for _ in range(30):
        action = tracker.on_outcome(tracker.emitted(TP, 0, attempt=attempt), FAILED)
        assert action.kind is ActionKind.REDELIVER
        assert action.due_ms - clock.now <= 1_000
        clock.now = action.due_ms
        (redelivery,) = tracker.due_redeliveries()
        attempt = redelivery.attempt
    assert attempt == 31


@given(st.integers(0, 8), st.lists(st.sampled_from(["FAILED", "TIMED_OUT", "backstop"]), min_size=9, max_size=9))
def test_retries_respect_max_retries_then_dead_letter(max_retries, reasons):
    tracker, clock = make(max_retries=max_retries, message_timeout_ms=1_000, backstop_grace_ms=0)
    attempt, redelivers = 1, 0
    for reason in reasons:
        root = tracker.emitted(TP, 5, attempt=attempt)
        if reason == "backstop":
            clock.now += 1_000
            (action,) = tracker.expire_backstop()
            assert action.reason == "backstop_expired"
            assert tracker.on_outcome(root, COMPLETED) is None  # too late: already failed locally
        else:
            action = tracker.on_outcome(root, OutcomeKind[reason])
            assert action.reason == reason
        assert action.attempt == attempt
        if action.kind is ActionKind.DEAD_LETTER:
            break
        assert action.kind is ActionKind.REDELIVER
        redelivers += 1
        clock.now = action.due_ms
        (redelivery,) = tracker.due_redeliveries()
        assert redelivery.attempt == attempt + 1
        attempt = redelivery.attempt
    assert action.kind is ActionKind.DEAD_LETTER
    assert redelivers == max_retries and attempt == max_retries + 1
    assert tracker.commit_point(TP) == 5
    tracker.dead_lettered(TP, 5)
    assert tracker.commit_point(TP) == 6


def test_dead_lettered_ignores_an_offset_that_is_not_waiting_for_its_dead_letter():
    tracker, _ = make()
    tracker.emitted(TP, 0)
    tracker.dead_lettered(TP, 1)  # never read by this incarnation: must not count as done
    tracker.dead_lettered(TP, 0)  # in flight, not dead-lettered
    assert tracker.done_above(TP) == [] and tracker.commit_point(TP) == 0
    assert tracker.stats.dead_lettered == 0


def test_dead_letter_confirmation_after_revoke_is_ignored():
    tracker, _ = make(max_retries=0)
    tracker.on_outcome(tracker.emitted(TP, 4), FAILED)
    assert tracker.revoke(TP) == 4
    tracker.dead_lettered(TP, 4)  # the DLQ callback fires late
    assert tracker.partitions() == [] and tracker.commit_points() == {}


# -- backoff ---------------------------------------------------------------------------------


def test_backoff_defaults_are_exponential_and_capped():
    backoff = Backoff()
    assert [backoff.delay_ms(n) for n in range(1, 6)] == [1000, 2000, 4000, 8000, 16000]
    assert backoff.delay_ms(6) == 32_000
    assert backoff.delay_ms(7) == 60_000
    assert backoff.delay_ms(10_000) == 60_000  # no overflow
    with pytest.raises(ValueError):
        backoff.delay_ms(0)


@given(st.integers(0, 5_000), st.floats(1.0, 10.0), st.integers(0, 100_000), st.integers(1, 200))
def test_backoff_is_exponential_monotonic_and_capped(initial, multiplier, extra, attempts):
    cap = initial + extra
    backoff = Backoff(initial_ms=initial, multiplier=multiplier, max_ms=cap)
    delays = [backoff.delay_ms(n) for n in range(1, attempts + 1)]
    assert delays[0] == initial
    assert delays == sorted(delays)
    assert all(d <= cap for d in delays)
    for n, d in enumerate(delays, start=1):
        exact = initial * multiplier ** min(n - 1, 2000) if initial else 0
        assert d == round(min(exact, cap))


@given(st.floats(0.0, 1.0), st.integers(1, 20), st.integers(0, 2**32))
def test_backoff_jitter_stays_within_its_band(jitter, attempt, seed):
    backoff = Backoff(initial_ms=100, multiplier=2.0, max_ms=30_000, jitter=jitter, rng=random.Random(seed))
    base = min(100 * 2.0 ** (attempt - 1), 30_000)
    delay = backoff.delay_ms(attempt)
    assert round(base * (1 - jitter)) - 1 <= delay <= min(30_000, round(base * (1 + jitter)) + 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_ms": -1},
        {"multiplier": 0.5},
        {"initial_ms": 10, "max_ms": 5},
        {"jitter": 1.5},
    ],
)
def test_backoff_rejects_bad_configuration(kwargs):
    with pytest.raises(ConfigError):
        Backoff(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_pending": 0},
        {"max_retries": -1},
        {"message_timeout_ms": 0},
        {"backstop_grace_ms": -1},
    ],
)
def test_tracker_rejects_bad_configuration(kwargs):
    with pytest.raises(ConfigError):
        InFlightTracker(**kwargs)


# -- backstop --------------------------------------------------------------------------------


def test_backstop_fails_roots_without_outcome_after_timeout_plus_grace():
    tracker, clock = make(message_timeout_ms=1_000, backstop_grace_ms=500)
    late = tracker.emitted(TP, 0)
    clock.now = 200
    answered = tracker.emitted(TP, 1)
    later = tracker.emitted(TP, 2)
    tracker.on_outcome(answered, COMPLETED)
    assert tracker.next_due_ms() == 1_500
    assert tracker.expire_backstop(now_ms=1_499) == []
    (action,) = tracker.expire_backstop(now_ms=1_500)
    assert action == OutcomeAction(ActionKind.REDELIVER, TP, 0, 1, "backstop_expired", due_ms=1_600)
    assert tracker.on_outcome(late, COMPLETED) is None  # the acker answered after all: ignored
    clock.now = 1_700
    (action,) = tracker.expire_backstop()  # offset 1 completed: only 2 expires
    assert action.offset == 2
    assert tracker.stats.backstop_expired == 2 and tracker.stats.timed_out == 0
    assert [r.offset for r in tracker.due_redeliveries()] == [0]
    assert tracker.commit_point(TP) == 0
    assert tracker.on_outcome(later, COMPLETED) is None


def test_reset_timeout_pushes_the_backstop_deadline():
    tracker, clock = make(message_timeout_ms=1_000, backstop_grace_ms=0)
    root = tracker.emitted(TP, 0)
    clock.now = 900
    assert tracker.reset_timeout(root)
    assert tracker.expire_backstop(now_ms=1_500) == []
    assert len(tracker.expire_backstop(now_ms=1_900)) == 1
    assert not tracker.reset_timeout(root)


def test_reset_timeout_notice_from_the_acker_pushes_the_backstop():
    # Issue 9 item 5: the acker forwards a bolt's RESET_TIMEOUT; before, the spout took it for
    # no outcome at all (or an error) and its backstop failed a tree the bolt kept alive.
    tracker, clock = make(message_timeout_ms=1_000, backstop_grace_ms=0)
    root = tracker.emitted(TP, 0)
    clock.now = 900
    assert tracker.on_outcome(root, OutcomeKind.RESET_TIMEOUT) is None
    assert tracker.expire_backstop(now_ms=1_500) == [] and tracker.pending_roots() == 1
    assert tracker.on_outcome(root, COMPLETED).kind is ActionKind.DONE
    assert tracker.on_outcome(root, OutcomeKind.RESET_TIMEOUT) is None  # no longer held
    assert tracker.stats.ignored_outcomes == 1 and tracker.stats.completed == 1


def test_backstop_can_be_disabled():
    tracker, _ = make(message_timeout_ms=None)
    tracker.emitted(TP, 0)
    assert tracker.next_due_ms() is None
    assert tracker.expire_backstop(now_ms=10**12) == []


def test_default_clock_is_monotonic_milliseconds():
    tracker = InFlightTracker()
    tracker.emitted(TP, 0)
    assert tracker.expire_backstop() == []  # 40 s have not passed
    assert tracker.next_due_ms() > 0


# -- backpressure ----------------------------------------------------------------------------


def test_over_max_pending_counts_roots_in_flight():
    tracker, _ = make(max_pending=3, max_retries=1)
    roots = [tracker.emitted(TP, off) for off in range(3)]
    assert tracker.pending_roots() == 3 and tracker.over_max_pending()
    tracker.on_outcome(roots[0], COMPLETED)
    assert not tracker.over_max_pending()
    tracker.on_outcome(roots[1], FAILED)  # waiting for redelivery: not a root in flight
    assert tracker.pending_roots() == 1
    assert not InFlightTracker(max_pending=None).over_max_pending()


# -- rebalance -------------------------------------------------------------------------------


def test_revoke_returns_commit_point_and_forgets_the_partition():
    tracker, clock = make(message_timeout_ms=1_000)
    roots = [tracker.emitted(TP, off) for off in range(4)]
    other = tracker.emitted(TP2, 0)
    tracker.on_outcome(roots[0], COMPLETED)
    tracker.on_outcome(roots[2], COMPLETED)
    tracker.on_outcome(roots[3], FAILED)
    assert tracker.revoke(TP) == 1
    assert tracker.partitions() == [TP2]
    assert tracker.pending_roots() == 1
    assert tracker.on_outcome(roots[1], COMPLETED) is None
    clock.now = 10**9
    assert tracker.due_redeliveries() == []  # its retries went with it
    assert [a.tp for a in tracker.expire_backstop()] == [TP2]  # and its backstop deadlines
    assert tracker.on_outcome(other, COMPLETED) is None


def test_assign_with_done_above_skips_recorded_offsets_on_replay():
    tracker, _ = make()
    tracker.assign(TP, committed=100, done_above=[99, 102, 103, 106])
    assert tracker.commit_point(TP) == 100
    assert tracker.done_above(TP) == [102, 103, 106]
    assert tracker.should_skip(TP, 99)  # below the committed offset: done
    replay = {}
    for off in range(100, 108):
        if not tracker.should_skip(TP, off):
            replay[off] = tracker.emitted(TP, off)
    assert sorted(replay) == [100, 101, 104, 105, 107]
    for off in (100, 101):
        tracker.on_outcome(replay[off], COMPLETED)
    assert tracker.commit_point(TP) == 104  # 102 and 103 count as done
    for off in (104, 105):
        tracker.on_outcome(replay[off], COMPLETED)
    assert tracker.commit_point(TP) == 107
    tracker.on_outcome(replay[107], COMPLETED)
    assert tracker.commit_point(TP) == 108 and tracker.done_above(TP) == []


def test_assign_when_recorded_offsets_follow_the_committed_one():
    tracker, _ = make()
    tracker.assign(TP, committed=10, done_above=[10, 11, 13])
    assert tracker.commit_point(TP) == 12
    assert tracker.should_skip(TP, 11) and tracker.should_skip(TP, 13)
    assert not tracker.should_skip(TP, 12)


def test_assigning_a_held_partition_drops_what_was_held():
    tracker, _ = make()
    root = tracker.emitted(TP, 5)
    tracker.assign(TP, committed=3)
    assert tracker.pending_roots() == 0 and tracker.commit_point(TP) == 3
    assert tracker.on_outcome(root, COMPLETED) is None


def test_assign_rejects_done_above_without_a_committed_offset():
    tracker, _ = make()
    with pytest.raises(ValueError):
        tracker.assign(TP, committed=None, done_above=[3])
    with pytest.raises(ValueError):
        tracker.assign(TP, committed=-1)


def test_revoke_and_metadata_round_trip_skip_exactly_the_done_records():
    tracker, _ = make()
    roots = {off: tracker.emitted(TP, off) for off in range(20)}
    for off in (0, 1, 5, 6, 7, 15):
        tracker.on_outcome(roots[off], COMPLETED)
    point, done = tracker.commit_point(TP), tracker.done_above(TP)
    metadata, truncated = encode_done_above(point, done)
    assert (point, done, truncated) == (2, [5, 6, 7, 15], False)
    assert tracker.revoke(TP) == 2
    successor, _ = make()
    successor.assign(TP, committed=2, done_above=decode_done_above(2, metadata))
    assert [o for o in range(2, 20) if successor.should_skip(TP, o)] == [5, 6, 7, 15]


# -- scale and bounded memory ----------------------------------------------------------------


def test_hundred_thousand_pending_offsets_complete_in_random_order():
    tracker, _ = make(max_pending=None)
    offsets = [o for o in range(130_000) if o % 4 != 3][:100_000]  # with gaps
    roots = [tracker.emitted(TP, off) for off in offsets]
    order = list(range(len(offsets)))
    random.Random(7).shuffle(order)
    done = [False] * len(offsets)
    lowest = 0
    for step, i in enumerate(order):
        tracker.on_outcome(roots[i], COMPLETED)
        done[i] = True
        while lowest < len(offsets) and done[lowest]:
            lowest += 1
        if step % 997 == 0:
            expected = offsets[lowest] if lowest < len(offsets) else offsets[-1] + 1
            assert tracker.commit_point(TP) == expected
    assert tracker.commit_point(TP) == offsets[-1] + 1
    assert tracker.done_above(TP) == []


def test_one_stuck_offset_keeps_internal_queues_bounded():
    tracker, _ = make(max_pending=None)
    tracker.emitted(TP, 0)  # never answered
    for off in range(1, 20_001):
        tracker.on_outcome(tracker.emitted(TP, off), COMPLETED)
    assert tracker.commit_point(TP) == 0
    assert len(tracker.done_above(TP)) == 20_000  # inherent: they must be remembered
    assert tracker._partitions[TP].pending_count == 1
    assert len(tracker._backstop) <= 2 * tracker.pending_roots() + 1024


# -- all outcomes COMPLETED: every offset ends done --------------------------------------------


@given(st.lists(st.integers(0, 3), min_size=1, max_size=120), st.randoms(use_true_random=False), st.integers(0, 50))
def test_every_offset_is_eventually_done_when_all_complete(gaps, rnd, start):
    tracker, _ = make()
    tracker.assign(TP, committed=start)
    offsets, off = [], start
    for gap in gaps:
        off += gap
        offsets.append(off)
        off += 1
    roots = {o: tracker.emitted(TP, o) for o in offsets}
    pending = set(offsets)
    order = list(offsets)
    rnd.shuffle(order)
    for o in order:
        assert tracker.on_outcome(roots[o], COMPLETED).kind is ActionKind.DONE
        pending.discard(o)
        point = tracker.commit_point(TP)
        assert point == (min(pending) if pending else offsets[-1] + 1)
        done_above = sorted(x for x in offsets if x not in pending and x > point)
        assert tracker.done_above(TP) == done_above
    assert tracker.pending_roots() == 0 and tracker.pending_offsets(TP) == []


# -- the model-based state machine -----------------------------------------------------------

TPS = [TP, TP2]
TIMEOUT, GRACE = 100, 20
INITIAL, MULTIPLIER, CAP = 10, 2, 50


class _ModelEntry:
    def __init__(self, state, root, attempt, at):
        self.state, self.root, self.attempt, self.at = state, root, attempt, at


class _ModelPartition:
    """Brute force: plain dict and sets, recomputed from scratch on every question."""

    def __init__(self, base, done=()):
        self.base = base
        self.pending: dict[int, _ModelEntry] = {}
        self.done = set(done)
        self.max_seen = None

    def saw(self, offset):
        self.max_seen = offset if self.max_seen is None else max(self.max_seen, offset)

    def commit_point(self):
        if self.pending:
            return min(self.pending)
        starts = [s for s in (self.base, None if self.max_seen is None else self.max_seen + 1) if s is not None]
        if not starts:
            return None
        point = max(starts)
        while point in self.done:
            point += 1
        return point


class TrackerMachine(RuleBasedStateMachine):
    @initialize(max_retries=st.integers(0, 3), max_pending=st.integers(1, 6))
    def setup(self, max_retries, max_pending):
        self.clock = FakeClock()
        self.max_retries = max_retries
        self.max_pending = max_pending
        self.tracker = InFlightTracker(
            max_pending=max_pending,
            max_retries=max_retries,
            backoff=Backoff(initial_ms=INITIAL, multiplier=MULTIPLIER, max_ms=CAP),
            message_timeout_ms=TIMEOUT,
            backstop_grace_ms=GRACE,
            clock=self.clock,
        )
        # TP is assigned with a committed offset; TP2 is tracked from its first emit.
        self.tracker.assign(TP, committed=0)
        self.model = {TP: _ModelPartition(0), TP2: _ModelPartition(None)}
        self.log = {tp: [] for tp in TPS}  # offsets that exist in the source partition
        self.cursor = {tp: 0 for tp in TPS}  # next log index the consumer reads
        self.truly_done = {tp: set() for tp in TPS}
        self.flights: dict[int, tuple] = {}  # root -> (tp, offset)
        self.stale: list[int] = []
        self.handed: list[Redelivery] = []

    # helpers

    def _emit(self, tp, offset, attempt):
        m = self.model[tp]
        old = m.pending.get(offset)
        if old is not None and old.root is not None:
            del self.flights[old.root]
            self.stale.append(old.root)
        root = self.tracker.emitted(tp, offset, attempt=attempt)
        m.pending[offset] = _ModelEntry("flight", root, attempt, self.clock.now + TIMEOUT + GRACE)
        m.done.discard(offset)
        m.saw(offset)
        self.flights[root] = (tp, offset)

    def _fail(self, tp, offset, reason, action):
        entry = self.model[tp].pending[offset]
        assert (action.tp, action.offset, action.attempt, action.reason) == (tp, offset, entry.attempt, reason)
        entry.root = None
        if entry.attempt <= self.max_retries:
            entry.state = "retry"
            entry.at = self.clock.now + min(INITIAL * MULTIPLIER ** (entry.attempt - 1), CAP)
            entry.reason = reason
            assert action.kind is ActionKind.REDELIVER and action.due_ms == entry.at
        else:
            entry.state = "dlq"
            assert action.kind is ActionKind.DEAD_LETTER

    def _finish(self, tp, offset):
        m = self.model[tp]
        m.pending.pop(offset, None)
        m.done.add(offset)
        m.saw(offset)
        self.truly_done[tp].add(offset)

    # rules

    @rule(
        tp=st.sampled_from(TPS),
        gap=st.sampled_from([0, 0, 0, 1, 3]),
        tracked=st.sampled_from([True, True, True, False]),
    )
    def read(self, tp, gap, tracked):
        log = self.log[tp]
        if self.cursor[tp] == len(log):
            log.append(log[-1] + 1 + gap if log else gap)
        offset = log[self.cursor[tp]]
        self.cursor[tp] += 1
        skip = self.tracker.should_skip(tp, offset)
        assert skip == (offset in self.model[tp].done)
        if skip:
            assert offset in self.truly_done[tp]
        elif tracked:
            self._emit(tp, offset, 1)
        else:
            self.tracker.done_immediately(tp, offset)
            self._finish(tp, offset)

    @precondition(lambda self: self.flights or self.stale)
    @rule(data=st.data(), kind=st.sampled_from([k for k in OutcomeKind if k is not OutcomeKind.RESET_TIMEOUT]))
    def outcome(self, data, kind):
        # Insertion order, not sorted: roots are random, and draws must replay the same way.
        root = data.draw(st.sampled_from(list(self.flights) + self.stale[-4:]))
        action = self.tracker.on_outcome(root, kind)
        if root not in self.flights:
            assert action is None
            return
        tp, offset = self.flights.pop(root)
        self.stale.append(root)
        if kind is COMPLETED:
            assert action == OutcomeAction(
                ActionKind.DONE, tp, offset, self.model[tp].pending[offset].attempt, "COMPLETED"
            )
            self._finish(tp, offset)
        else:
            self._fail(tp, offset, kind.name, action)

    @rule(dt=st.integers(0, 80))
    def redeliveries_due(self, dt):
        self.clock.now += dt
        expected = {
            (tp, off, e.attempt + 1, e.reason)
            for tp in TPS
            for off, e in self.model[tp].pending.items()
            if e.state == "retry" and e.at <= self.clock.now
        }
        got = self.tracker.due_redeliveries()
        assert len(got) == len(expected)
        assert {(r.tp, r.offset, r.attempt, r.reason) for r in got} == expected
        for r in got:
            self.model[r.tp].pending[r.offset].state = "handed"
        self.handed.extend(got)

    @precondition(lambda self: self.handed)
    @rule(data=st.data())
    def redeliver(self, data):
        r = self.handed.pop(data.draw(st.integers(0, len(self.handed) - 1)))
        entry = self.model[r.tp].pending.get(r.offset)
        if entry is not None and entry.state == "handed":  # not revoked or re-read meanwhile
            self._emit(r.tp, r.offset, r.attempt)

    @precondition(lambda self: self.flights or self.stale)
    @rule(data=st.data())
    def reset_timeout_notice(self, data):
        # An acker forwards a bolt's RESET_TIMEOUT: the backstop deadline moves, nothing else.
        root = data.draw(st.sampled_from(list(self.flights) + self.stale[-4:]))
        assert self.tracker.on_outcome(root, OutcomeKind.RESET_TIMEOUT) is None
        if root in self.flights:
            tp, offset = self.flights[root]
            self.model[tp].pending[offset].at = self.clock.now + TIMEOUT + GRACE

    @rule(dt=st.integers(0, 150))
    def backstop(self, dt):
        self.clock.now += dt
        expected = {
            (tp, off) for root, (tp, off) in self.flights.items() if self.model[tp].pending[off].at <= self.clock.now
        }
        actions = self.tracker.expire_backstop()
        assert {(a.tp, a.offset) for a in actions} == expected and len(actions) == len(expected)
        for action in actions:
            root = self.model[action.tp].pending[action.offset].root
            del self.flights[root]
            self.stale.append(root)
            self._fail(action.tp, action.offset, "backstop_expired", action)

    @precondition(lambda self: any(e.state == "dlq" for tp in TPS for e in self.model[tp].pending.values()))
    @rule(data=st.data())
    def dead_letter_confirmed(self, data):
        parked = sorted((tp, off) for tp in TPS for off, e in self.model[tp].pending.items() if e.state == "dlq")
        tp, offset = data.draw(st.sampled_from(parked))
        self.tracker.dead_lettered(tp, offset)
        self._finish(tp, offset)

    @precondition(lambda self: any(self.model[tp].pending for tp in TPS))
    @rule(data=st.data())
    def kafka_delivers_a_pending_record_again(self, data):
        pending = sorted((tp, off) for tp in TPS for off in self.model[tp].pending)
        tp, offset = data.draw(st.sampled_from(pending))
        self._emit(tp, offset, 1)

    @rule(tp=st.sampled_from(TPS), max_bytes=st.sampled_from([4096, 4096, 16, 10, 0]))
    def rebalance(self, tp, max_bytes):
        point, above = self.tracker.commit_point(tp), self.tracker.done_above(tp)
        metadata = "" if point is None else encode_done_above(point, above, max_bytes=max_bytes)[0]
        assert self.tracker.revoke(tp) == point
        decoded = [] if point is None else decode_done_above(point, metadata)
        assert decoded == above[: len(decoded)]
        assert set(decoded) <= self.truly_done[tp]
        for root, (t, _) in list(self.flights.items()):
            if t == tp:
                del self.flights[root]
                self.stale.append(root)
        self.tracker.assign(tp, committed=point, done_above=decoded)
        self.model[tp] = _ModelPartition(point, decoded)
        # The next owner resumes reading at the commit point.
        self.cursor[tp] = (
            0 if point is None else next((i for i, o in enumerate(self.log[tp]) if o >= point), len(self.log[tp]))
        )

    # invariants

    @invariant()
    def commit_point_never_passes_a_pending_or_undone_record(self):
        if not hasattr(self, "tracker"):
            return
        for tp in TPS:
            m = self.model[tp]
            point = self.tracker.commit_point(tp)
            assert point == m.commit_point()
            assert self.tracker.pending_offsets(tp) == sorted(m.pending)
            if point is None:
                continue
            assert all(off >= point for off in m.pending)
            # Invariant 1: every record below the commit point really is done.
            assert all(off in self.truly_done[tp] for off in self.log[tp] if off < point)
            assert self.tracker.done_above(tp) == sorted(o for o in m.done if o > point)

    @invariant()
    def nothing_from_first_unseen_on_is_skipped(self):
        # a spout's consumed batch asks should_skip only below first_unseen
        if not hasattr(self, "tracker"):
            return
        for tp in TPS + [("orders", 9)]:  # an assigned, a tracked-from-emit and an unknown partition
            first = self.tracker.first_unseen(tp)
            point = self.tracker.commit_point(tp)
            done = set(self.tracker.done_above(tp))
            top = max([first, *done, point or 0, *self.log.get(tp, [])]) + 3
            for offset in range(first, top):
                assert not self.tracker.should_skip(tp, offset), (tp, offset, first)

    @invariant()
    def roots_and_backpressure_match(self):
        if not hasattr(self, "tracker"):
            return
        assert self.tracker.pending_roots() == len(self.flights)
        assert self.tracker.over_max_pending() == (len(self.flights) >= self.max_pending)
        times = [e.at for tp in TPS for e in self.model[tp].pending.values() if e.state in ("flight", "retry")]
        assert self.tracker.next_due_ms() == (min(times) if times else None)


TrackerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_tracker_matches_model = TrackerMachine.TestCase


def test_a_dead_letter_confirmation_from_before_a_rebalance_moves_nothing():
    # an eager rebalance gives the partition back while the dead-letter write's delivery report is
    # still on its way: the report belongs to the partition's earlier incarnation and counts nothing
    tracker = InFlightTracker(max_retries=0, message_timeout_ms=None, clock=lambda: 0)
    tp = ("orders", 0)
    tracker.assign(tp, committed=0)
    tracker.emitted(tp, 0)
    late = tracker.emitted(tp, 1)
    assert tracker.on_outcome(late, OutcomeKind.FAILED).kind is ActionKind.DEAD_LETTER
    tracker.revoke(tp)
    tracker.assign(tp, committed=0)
    tracker.dead_lettered(tp, 1)
    assert tracker.commit_point(tp) == 0
    assert not tracker.should_skip(tp, 0)


def test_unsettled_lists_retried_and_failed_offsets_for_a_successor():
    tracker = InFlightTracker(max_retries=3, message_timeout_ms=None, clock=lambda: 0)
    tp = ("orders", 0)
    tracker.assign(tp, committed=0)
    tracker.emitted(tp, 0)
    failed_root = tracker.emitted(tp, 1)
    tracker.emitted(tp, 2, attempt=3)
    tracker.on_outcome(failed_root, OutcomeKind.TIMED_OUT)
    assert tracker.unsettled(tp) == [(1, 1, True), (2, 3, False)]


# -- what the operators' tools read (reliable_kafka.ops) ----------------------------------------------


def test_complete_latency_is_emit_to_completed_of_the_attempt_that_completed():
    tracker, clock = make(backoff=Backoff(initial_ms=10))
    clock.now = 1_000
    root = tracker.emitted(TP, 0)
    clock.now = 1_250
    assert tracker.on_outcome(root, COMPLETED).kind is ActionKind.DONE
    assert tracker.complete_latency.count == 1
    assert tracker.complete_latency.sum_s == pytest.approx(0.25)
    failed = tracker.emitted(TP, 1)
    clock.now = 2_000
    tracker.on_outcome(failed, FAILED)  # not a completion: no latency
    assert tracker.complete_latency.count == 1
    clock.now = 3_000
    (redelivery,) = tracker.due_redeliveries()
    again = tracker.emitted(TP, 1, attempt=redelivery.attempt)
    clock.now = 3_040
    tracker.on_outcome(again, COMPLETED)
    assert tracker.complete_latency.sum_s == pytest.approx(0.25 + 0.04)  # from the second emit


def test_pending_summary_names_the_oldest_pending_offset_and_counts_retries():
    tracker, clock = make(backoff=Backoff(initial_ms=10_000))
    clock.now = 100
    first = tracker.emitted(TP, 5)
    clock.now = 200
    tracker.emitted(TP, 6)
    tracker.emitted(TP2, 0)
    tracker.on_outcome(first, FAILED)  # waits for its redelivery: still pending, and retrying
    clock.now = 900
    assert tracker.pending_summary() == {TP: (2, 1, 5, 100), TP2: (1, 0, 0, 200)}
    assert tracker.now_ms() == 900


def test_dead_letters_are_counted_by_the_reason_of_their_last_attempt():
    tracker, clock = make(max_retries=0)
    root = tracker.emitted(TP, 0)
    assert tracker.on_outcome(root, TIMED_OUT).kind is ActionKind.DEAD_LETTER
    tracker.dead_lettered(TP, 0)
    other = tracker.emitted(TP, 1)
    tracker.on_outcome(other, FAILED)
    tracker.dead_lettered(TP, 1)
    assert tracker.dead_letters_by_reason == {"TIMED_OUT": 1, "FAILED": 1}


@given(
    st.integers(0, 20),
    st.sets(st.integers(0, 40), max_size=15),
    st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=40),
)
def test_should_skip_is_exactly_done_or_below_the_commit_point(committed, done_above, steps):
    # should_skip answers new offsets (at or past everything seen) without computing the commit
    # point; it must agree with its definition for every offset, before and after any history
    tracker, _ = make()
    tracker.assign(TP, committed=committed, done_above=sorted(done_above))
    for offset, complete in steps:
        if tracker.should_skip(TP, offset):
            continue
        try:
            root = tracker.emitted(TP, offset)
        except ArgumentError:  # out of offset order: refused
            continue
        if complete:
            tracker.on_outcome(root, COMPLETED)
    point = tracker.commit_point(TP)
    done = set(tracker.done_above(TP))
    pending = set(tracker.pending_offsets(TP))
    for offset in range(0, 50):
        expected = offset not in pending and (offset in done or (point is not None and offset < point))
        assert tracker.should_skip(TP, offset) == expected, offset
        if offset >= tracker.first_unseen(TP):  # a consumed batch checks only below it
            assert not expected, offset


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(st.none(), st.integers(0, 5)),
    st.sets(st.integers(0, 3000), max_size=1500),
    st.lists(st.tuples(st.integers(0, 3005), st.integers(0, 1500)), max_size=5),
)
def test_columns_registered_in_bulk_and_done_in_batches_are_slot_by_slot(committed, pending, batches):
    """A partition's columns filled with one ``extend`` and marked done a batch at a time, with one
    ``commit_point`` after each batch, hold what ``append`` and ``mark_done`` plus ``commit_point``
    of each offset give: commit point, pending and done offsets, position (the done prefix dropped
    or not)."""
    from reliable_kafka.core.pending import PartitionOffsets

    each, batched = PartitionOffsets(committed), PartitionOffsets(committed)
    offsets = sorted(o for o in pending if committed is None or o >= committed)
    for offset in offsets:
        each.append(offset, offset + 1, 1, 1, 0)
    if offsets:
        batched.extend(offsets, [offset + 1 for offset in offsets], 1, 1, 0)
    for start, length in batches:
        for offset in range(start, start + length):
            each.mark_done(offset)
            each.commit_point()
            batched.mark_done(offset)
        point = batched.commit_point()
        assert point == each.commit_point()
        assert batched.pending_offsets() == each.pending_offsets()
        assert batched.done_above(point) == each.done_above(point)
        assert batched.position == each.position and batched.pending_count == each.pending_count


# -- registration order ------------------------------------------------------------------------

registration_steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["emit", "complete", "fail", "dead_letter", "done_immediately"]), st.integers(0, 40)),
        st.tuples(st.just("emit_many"), st.lists(st.integers(0, 40), max_size=6)),
        st.tuples(st.sampled_from(["redeliver", "revoke"]), st.none()),
        st.tuples(st.just("assign"), st.tuples(st.integers(0, 30), st.sets(st.integers(0, 45), max_size=5))),
    ),
    max_size=60,
)


def _registration_state(tracker):
    return (
        tracker.pending_offsets(TP),
        tracker.commit_point(TP),
        tracker.done_above(TP),
        tracker.pending_roots(),
        tracker.stats.emitted,
    )


@settings(max_examples=500)
@given(registration_steps)
def test_the_commit_point_never_passes_an_offset_registered_and_not_finished(steps):
    """For any registration order the tracker accepts, interleaved with outcomes, redeliveries, dead
    letters, revokes and assigns (commit metadata included): every offset registered and not finished
    is at or above every commit point reported since its partition was assigned, so no commit could
    have passed it. A refused registration changes nothing."""
    tracker, _ = make(max_retries=1)
    roots: dict[int, int] = {}
    fresh = iter(range(1, 10**6))
    passed = 0  # the highest commit point reported in this incarnation of the partition
    for step, arg in steps:
        before = _registration_state(tracker)
        try:
            if step == "emit":
                roots[arg] = tracker.emitted(TP, arg, root=next(fresh))
            elif step == "emit_many":
                batch = [next(fresh) for _ in arg]
                tracker.emitted_many(TP, arg, batch)
                roots.update(zip(arg, batch))
        except ArgumentError as error:
            assert "out of offset order" in str(error)
            assert _registration_state(tracker) == before
            continue
        if step == "complete":
            tracker.on_outcome(roots.get(arg, 0) or 99_999_999, COMPLETED)
        elif step == "fail":
            tracker.on_outcome(roots.get(arg, 0) or 99_999_999, FAILED)
        elif step == "redeliver":  # a redelivery of a pending offset is never refused
            for redelivery in tracker.due_redeliveries(10**9):
                roots[redelivery.offset] = tracker.emitted(TP, redelivery.offset, attempt=redelivery.attempt)
        elif step == "dead_letter":
            tracker.dead_lettered(TP, arg)
        elif step == "done_immediately":
            tracker.done_immediately(TP, arg)
        elif step == "revoke":
            tracker.revoke(TP)
            passed = 0
        elif step == "assign":
            committed, done_above = arg
            tracker.assign(TP, committed=committed, done_above=sorted(done_above))
            passed = committed
        point = tracker.commit_point(TP)
        passed = max(passed, point or 0)
        assert all(offset >= passed for offset in tracker.pending_offsets(TP)), (passed, tracker.pending_offsets(TP))


@settings(max_examples=300)
@given(
    st.none() | st.integers(0, 10),
    st.sets(st.integers(0, 60), max_size=8),
    st.lists(st.tuples(st.sets(st.integers(0, 60), max_size=8), st.integers(0, 3)), max_size=8),
)
def test_a_shell_registering_in_consumed_order_is_never_refused(committed, done_above, polls):
    """Kafka hands a partition's records ascending, with gaps (transaction markers, compaction), from
    the committed offset; a shell skips what the tracker says is done and registers the rest, one by
    one or in a batch, while outcomes fail, complete and redeliver records: nothing is refused."""
    tracker, _ = make(max_retries=2)
    tracker.assign(TP, committed=committed, done_above=sorted(done_above) if committed is not None else ())
    roots: dict[int, int] = {}
    fresh = iter(range(1, 10**6))
    consumed = -1 if committed is None else committed - 1
    for index, (offsets, settle) in enumerate(polls):
        batch = [o for o in sorted(offsets) if o > consumed and not tracker.should_skip(TP, o)]
        consumed = max([consumed, *offsets])
        if index % 2:
            batch_roots = [next(fresh) for _ in batch]
            tracker.emitted_many(TP, batch, batch_roots)
            roots.update(zip(batch, batch_roots))
        else:
            roots.update((offset, tracker.emitted(TP, offset)) for offset in batch)
        for redelivery in tracker.due_redeliveries(10**9):
            roots[redelivery.offset] = tracker.emitted(TP, redelivery.offset, attempt=redelivery.attempt)
        for offset in tracker.pending_offsets(TP)[:settle]:
            action = tracker.on_outcome(roots[offset], FAILED if (offset + index) % 3 == 0 else COMPLETED)
            if action is not None and action.kind is ActionKind.DEAD_LETTER:
                tracker.dead_lettered(TP, offset)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(0, 2)), min_size=1, max_size=30),
    st.integers(1, 6),
    st.floats(0.0, 0.3),
    st.randoms(use_true_random=False),
)
def test_a_dropped_done_prefix_keeps_every_root_on_its_offset(batches, window, fail_share, rnd):
    """A partition drops its done prefix of slots now and then (from 1,024 slots; from 4 here): the
    offsets registered behind it must keep their roots, attempts and states. Batches are registered
    with gaps and completed nearly in order (shuffled within a small window, as outcomes arrive);
    some fail, wait, are emitted again after their backoff and complete later. Every answer is
    checked against a plain model."""
    from collections import deque

    from reliable_kafka.core import pending

    shipped, pending._DROP_FROM = pending._DROP_FROM, 4
    try:
        tracker, clock = make(max_pending=None, max_retries=None)
        root_of: dict[int, int] = {}  # pending offset -> its current root (0 while failed)
        attempt_of: dict[int, int] = {}
        offset, order, fresh = 0, [], iter(range(1, 10**9))
        for size, gap in batches:
            offset += gap
            offsets = list(range(offset, offset + size))
            offset += size
            roots = [next(fresh) for _ in offsets]
            tracker.emitted_many(TP, offsets, roots)
            root_of.update(zip(offsets, roots))
            attempt_of.update(dict.fromkeys(offsets, 1))
            order.extend(offsets)
        arrivals: deque[int] = deque()
        for start in range(0, len(order), window):  # nearly in order: each window arrives shuffled
            chunk = order[start : start + window]
            rnd.shuffle(chunk)
            arrivals.extend(chunk)

        def redeliver() -> None:
            clock.now += 1_000
            for redelivery in tracker.due_redeliveries():
                off = redelivery.offset
                assert root_of[off] == 0 and redelivery.attempt == attempt_of[off] + 1, redelivery
                attempt_of[off] = redelivery.attempt
                root_of[off] = tracker.emitted(TP, off, attempt=redelivery.attempt)

        while arrivals:
            off = arrivals.popleft()
            if rnd.random() < 0.3:
                redeliver()
            if root_of[off] == 0:  # failed and not emitted again yet
                redeliver()
            if attempt_of[off] == 1 and rnd.random() < fail_share:
                action = tracker.on_outcome(root_of[off], OutcomeKind.FAILED)
                assert action is not None and (action.offset, action.attempt) == (off, 1), (off, action)
                root_of[off] = 0
                arrivals.append(off)  # its next attempt's outcome comes later
            else:
                entry = tracker.complete(root_of.pop(off))
                assert entry is not None and (entry.offset, entry.attempt) == (off, attempt_of.pop(off)), (off, entry)
            assert tracker.commit_point(TP) == (min(root_of) if root_of else offset)
            assert tracker.pending_offsets(TP) == sorted(root_of)
            assert tracker.unsettled(TP) == [
                (o, attempt_of[o], root_of[o] == 0) for o in sorted(root_of) if attempt_of[o] > 1 or root_of[o] == 0
            ]
        assert tracker.stats.ignored_outcomes == 0
    finally:
        pending._DROP_FROM = shipped
