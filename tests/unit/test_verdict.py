"""Verdicts over a window (Burrow's rules): plain samples, time passed in, nothing to tune."""

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.ops.verdict import (
    MIN_SAMPLES,
    STALE_GRACE_S,
    STALE_INTERVALS,
    Judgement,
    Sample,
    Verdict,
    judge_component,
    judge_replaced,
    judge_window,
    roll_up,
    worst,
)


def window(progress, backlog, *, t0=1000.0, step=5.0):
    return [Sample(t0 + i * step, p, b) for i, (p, b) in enumerate(zip(progress, backlog))]


def test_a_cleanly_stopped_component_is_stopped_whatever_its_samples_or_age():
    samples = window([1, 2, 3], [0, 0, 0])
    for now in (1010.0, 10**6):
        assert judge_component(samples, now=now, interval_s=5.0, stopped=True).verdict is Verdict.STOPPED


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


def settling(settled, given_up, *, backlog=0, t0=1000.0, step=5.0):
    """A window in which the component settles ``settled`` records (cumulative) and gives up on
    ``given_up`` of them, progress moving and the backlog caught up."""
    return [
        Sample(t0 + i * step, i + 1, backlog, settled=s, given_up=g) for i, (s, g) in enumerate(zip(settled, given_up))
    ]


def test_a_component_giving_up_on_every_record_is_a_warning_naming_the_share():
    judgement = judge_window(settling([0, 100, 200, 391], [0, 100, 200, 391]))
    assert judgement.verdict is Verdict.WARN
    assert "391 of 391" in judgement.reason and "100%" in judgement.reason


def test_dead_letters_before_the_window_do_not_count():
    # 50 given up since the start, none within the window
    assert judge_window(settling([100, 150, 200], [50, 50, 50])).verdict is Verdict.OK


def test_a_stall_outranks_the_dead_letter_warning():
    samples = [Sample(1000.0 + 5 * i, 7, 3, settled=10 * i, given_up=10 * i) for i in range(4)]
    assert judge_window(samples).verdict is Verdict.STALL


def test_a_call_running_longer_than_the_window_is_a_stall_even_with_progress():
    samples = [*window([1, 5, 9], [0, 0, 0])[:-1], Sample(1010.0, 9, 0, oldest_call_s=61.0)]
    assert judge_window(samples, window_s=60.0).verdict is Verdict.STALL
    assert "61 s" in judge_window(samples, window_s=60.0).reason
    shorter = [*samples[:-1], Sample(1010.0, 9, 0, oldest_call_s=59.0)]
    assert judge_window(shorter, window_s=60.0).verdict is Verdict.OK


def test_a_silent_member_whose_partitions_moved_is_a_warning_and_others_stay_down():
    down = Judgement(Verdict.DOWN, "silent for 30 s (reports every 5 s)")
    moved = judge_replaced(down, ["acker-2"])
    assert moved.verdict is Verdict.WARN and "acker-2" in moved.reason
    assert judge_replaced(down, []).verdict is Verdict.DOWN
    ok = Judgement(Verdict.OK, "making progress")
    assert judge_replaced(ok, ["acker-2"]) is ok


def test_the_topology_leaves_stopped_rows_out_and_names_the_worst():
    ok, stopped = Judgement(Verdict.OK, ""), Judgement(Verdict.STOPPED, "stopped cleanly")
    warn = Judgement(Verdict.WARN, "failed 5 of 5 settled")
    assert roll_up([("spout", ok), ("old", stopped)]).verdict is Verdict.OK
    assert roll_up([("old", stopped)]).verdict is Verdict.STOPPED
    topology = roll_up([("spout", ok), ("validate", warn), ("old", stopped)])
    assert topology.verdict is Verdict.WARN and "validate" in topology.reason and "5 of 5" in topology.reason
    assert roll_up([]).verdict is Verdict.OK


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=MIN_SAMPLES, max_size=15),
)
def test_any_record_given_up_within_a_moving_window_warns_and_none_never_does(steps):
    settled, given_up, s, g = [], [], 0, 0
    for more, failed in steps:
        s, g = s + more + failed, g + failed
        settled.append(s)
        given_up.append(g)
    judgement = judge_window(settling(settled, given_up))
    gave_up = given_up[-1] > given_up[0]
    assert (judgement.verdict is Verdict.WARN) == gave_up


@given(st.sampled_from(list(Verdict)), st.lists(st.sampled_from(list(Verdict)), max_size=8))
def test_a_stopped_row_never_changes_the_topology_verdict(extra, others):
    rows = [(f"c{i}", Judgement(v, "")) for i, v in enumerate(others)]
    with_stopped = [*rows, ("gone", Judgement(Verdict.STOPPED, ""))]
    if any(v is not Verdict.STOPPED for v in others):
        assert roll_up(with_stopped).verdict is roll_up(rows).verdict
