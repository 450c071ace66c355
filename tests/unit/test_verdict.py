"""Verdicts over a window (Burrow's rules): plain samples, time passed in, nothing to tune."""

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.ops.verdict import (
    MIN_SAMPLES,
    STALE_GRACE_S,
    STALE_INTERVALS,
    Sample,
    Verdict,
    judge_component,
    judge_window,
    worst,
)


def window(progress, backlog, *, t0=1000.0, step=5.0):
    return [Sample(t0 + i * step, p, b) for i, (p, b) in enumerate(zip(progress, backlog))]


def test_a_stopped_component_is_down_whatever_its_samples():
    samples = window([1, 2, 3], [0, 0, 0])
    assert judge_component(samples, now=1010.0, interval_s=5.0, stopped=True).verdict is Verdict.DOWN


def test_a_silent_component_goes_down_after_three_of_its_own_intervals_and_a_grace():
    samples = window([1, 2, 3], [0, 0, 0])  # last sample at t=1010
    limit = 1010.0 + STALE_INTERVALS * 5.0 + STALE_GRACE_S
    fresh = judge_component(samples, now=limit, interval_s=5.0, stopped=False)
    stale = judge_component(samples, now=limit + 0.1, interval_s=5.0, stopped=False)
    assert fresh.verdict is Verdict.OK
    assert stale.verdict is Verdict.DOWN and "silent" in stale.reason


def test_too_few_samples_are_not_enough_to_blame():
    assert judge_window(window([5] * (MIN_SAMPLES - 1), [9] * (MIN_SAMPLES - 1))).verdict is Verdict.OK


def test_no_progress_with_work_waiting_is_a_stall():
    judgement = judge_window(window([7, 7, 7, 7], [3, 3, 4, 5]))
    assert judgement.verdict is Verdict.STALL and "no progress" in judgement.reason


def test_progress_with_a_backlog_growing_at_every_step_is_a_warning():
    assert judge_window(window([1, 5, 9, 12], [10, 20, 30, 31])).verdict is Verdict.WARN


def test_progress_with_a_backlog_that_did_not_always_grow_is_ok():
    assert judge_window(window([1, 5, 9, 12], [10, 20, 20, 31])).verdict is Verdict.OK


def test_unknown_backlog_never_stalls_or_warns():
    assert judge_window(window([7, 7, 7], [None, None, None])).verdict is Verdict.OK


def test_worst_orders_down_stall_warn_ok():
    assert worst([Verdict.OK, Verdict.WARN]) is Verdict.WARN
    assert worst([Verdict.STALL, Verdict.WARN, Verdict.OK]) is Verdict.STALL
    assert worst([Verdict.OK, Verdict.DOWN, Verdict.STALL]) is Verdict.DOWN
    assert worst([]) is Verdict.OK


backlogs = st.lists(st.integers(0, 1000), min_size=MIN_SAMPLES, max_size=15)


@given(backlogs, st.data())
def test_a_window_that_caught_up_once_is_ok(backlog, data):
    backlog[data.draw(st.integers(0, len(backlog) - 1))] = 0
    progress = sorted(data.draw(st.lists(st.integers(0, 10**6), min_size=len(backlog), max_size=len(backlog))))
    assert judge_window(window(progress, backlog)).verdict is Verdict.OK


@given(st.lists(st.integers(1, 1000), min_size=MIN_SAMPLES, max_size=15), st.integers(0, 10**9))
def test_flat_progress_with_a_backlog_in_every_sample_is_always_a_stall(backlog, progress):
    assert judge_window(window([progress] * len(backlog), backlog)).verdict is Verdict.STALL


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), min_size=1, max_size=15),
    st.floats(-1e6, 1e6),
    st.integers(0, 10**6),
)
def test_verdicts_do_not_depend_on_the_clock_origin_or_the_counters_origin(steps, shift, base):
    progress, total = [], base
    for increment, _ in steps:
        total += increment
        progress.append(total)
    backlog = [b for _, b in steps]
    one = judge_window(window(progress, backlog, t0=1000.0))
    other = judge_window(window([p + 17 for p in progress], backlog, t0=1000.0 + shift))
    assert one.verdict is other.verdict


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 1000)), min_size=MIN_SAMPLES, max_size=15))
def test_moving_progress_is_never_a_stall(steps):
    progress, total = [], 0
    for increment, _ in steps:
        total += increment
        progress.append(total)
    assert judge_window(window(progress, [b for _, b in steps])).verdict in (Verdict.OK, Verdict.WARN)
