"""The single-query Spark spout's driver-side pieces, pure logic (no JVM): the outcomes held before
their batch is registered, the commit-log follower, a committed batch's offset ranges, the
row-wise plan check on plans captured from Spark, the sink's forced producer settings, the
transform's output columns, ``SparkOptions.real_time``, and ``RootOwner.on_unknown``.

The protocol itself (why the ordering is safe) is ``test_spark_single_query_protocol.py``; the
task side (``TrackedRows``) is ``tests/integration/test_spark_tracked_rows.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.config import Connection, Tracking
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import ConfigError, DecodeError
from reliable_kafka.spark import SparkOptions
from reliable_kafka.spark.batch_roots import OffsetLog
from reliable_kafka.spark.checkpoint import LocalFiles
from reliable_kafka.spark.single_query import (
    CommitFollower,
    EarlyOutcomes,
    check_outputs,
    check_row_wise,
    committed_ranges,
    not_row_wise,
    sink_options,
)
from reliable_kafka.spout.records import SourceRecord
from reliable_kafka.spout.roots import RootOwner
from reliable_kafka.testing import ManualClock
from reliable_kafka.topology import TopologyTopics

COMPLETED, FAILED, TIMED_OUT, RESET_TIMEOUT = (int(k) for k in OutcomeKind)
PLANS = Path(__file__).parent / "spark_plans"

# --- EarlyOutcomes ----------------------------------------------------------------------------


def test_the_first_outcome_of_a_root_is_kept():
    early = EarlyOutcomes(keep_s=60)
    early.hold(7, FAILED)
    early.hold(7, COMPLETED)  # a second tree of the same root (a zombie attempt's): ignored
    early.hold(8, COMPLETED)
    assert len(early) == 2
    assert early.take([7, 8]) == {7: FAILED, 8: COMPLETED}


def test_a_reset_timeout_is_no_outcome_and_is_not_held():
    # a bolt pushed the deadline of a tree whose batch the driver has not registered yet: held as
    # the "first outcome", it would hide the decision that follows (the root then waits for its
    # backstop and is replayed although it completed)
    early = EarlyOutcomes(keep_s=60)
    early.hold(7, RESET_TIMEOUT)
    assert len(early) == 0 and early.take([7]) == {}
    early.hold(7, RESET_TIMEOUT)
    early.hold(7, COMPLETED)
    early.hold(7, RESET_TIMEOUT)
    assert early.take([7]) == {7: COMPLETED}


def test_take_gives_the_held_outcomes_of_the_roots_asked_for_and_forgets_them():
    early = EarlyOutcomes(keep_s=60)
    for root, kind in ((1, COMPLETED), (2, FAILED), (3, TIMED_OUT)):
        early.hold(root, kind)
    assert early.take([3, 1, 99]) == {3: TIMED_OUT, 1: COMPLETED}, "a root not held is not in the answer"
    assert early.take([1, 3]) == {}, "taken once"
    assert len(early) == 1 and early.take([2]) == {2: FAILED} and len(early) == 0
    assert early.take([2]) == {} and early.dropped == 0


def test_expire_drops_only_outcomes_older_than_keep_s_and_counts_them():
    clock = ManualClock(start_ms=0)
    early = EarlyOutcomes(keep_s=10, clock=clock.monotonic)
    early.hold(1, COMPLETED)  # heard at 0 s
    clock.advance(5_000)
    early.hold(2, FAILED)  # heard at 5 s
    clock.advance(5_000)
    early.expire()  # at 10 s: 1 is exactly keep_s old, not older
    assert len(early) == 2 and early.dropped == 0
    clock.advance(1)
    early.expire()
    assert early.dropped == 1 and early.take([1, 2]) == {2: FAILED}
    early.hold(3, COMPLETED)
    clock.advance(60_000)
    early.expire()
    early.expire()  # nothing left to drop: not counted again
    assert early.dropped == 2 and len(early) == 0


_HOLD, _TAKE, _EXPIRE, _WAIT = range(4)
_EARLY_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just(_HOLD), st.integers(1, 6), st.sampled_from([COMPLETED, FAILED, TIMED_OUT, RESET_TIMEOUT])),
        st.tuples(st.just(_TAKE), st.lists(st.integers(1, 6), max_size=4), st.none()),
        st.tuples(st.just(_EXPIRE), st.none(), st.none()),
        st.tuples(st.just(_WAIT), st.integers(0, 4_000), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_EARLY_STEPS)
def test_early_outcomes_is_a_map_of_first_decisions_with_an_age(steps):
    """Against a plain model: a root's first outcome other than RESET_TIMEOUT, kept until it is
    taken or until it is older than keep_s when ``expire`` runs."""
    clock = ManualClock(start_ms=0)
    early = EarlyOutcomes(keep_s=5, clock=clock.monotonic)
    model: dict[int, tuple[int, float]] = {}
    dropped = 0
    for step, arg, kind in steps:
        if step == _HOLD:
            early.hold(arg, kind)
            if kind != RESET_TIMEOUT and arg not in model:
                model[arg] = (kind, clock.monotonic())
        elif step == _TAKE:
            wanted = {root: model.pop(root)[0] for root in arg if root in model}
            assert early.take(arg) == wanted
        elif step == _EXPIRE:
            early.expire()
            old = [root for root, (_, heard) in model.items() if heard < clock.monotonic() - 5]
            for root in old:
                del model[root]
            dropped += len(old)
        else:
            clock.advance(arg)
        assert len(early) == len(model) and early.dropped == dropped
    assert early.take(list(range(1, 7))) == {root: kind for root, (kind, _) in model.items()}


# --- CommitFollower ---------------------------------------------------------------------------


def _commit(root: Path, batch_id: int) -> None:
    (root / "commits").mkdir(parents=True, exist_ok=True)
    (root / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_follower_gives_committed_batches_in_order_once_each(tmp_path):
    follower = CommitFollower(str(tmp_path) + "/", LocalFiles())
    assert follower.committed() is None, "no commit log yet"
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n{}\n{}")  # planned, not committed
    assert follower.committed() is None
    _commit(tmp_path, 0)
    assert follower.committed() == 0
    assert follower.committed() == 0, "the same batch until the caller took it"
    follower.taken()
    assert follower.committed() is None
    _commit(tmp_path, 2)
    assert follower.committed() is None, "batch 1 first: a gap is waited on, never skipped"
    _commit(tmp_path, 1)
    assert follower.committed() == 1
    follower.taken()
    assert follower.committed() == 2
    follower.taken()
    assert follower.committed() is None and follower.next_id == 3


def test_a_restarted_follower_starts_after_the_last_batch_handled(tmp_path):
    for batch_id in range(4):
        _commit(tmp_path, batch_id)
    follower = CommitFollower(f"file:{tmp_path}", LocalFiles(), next_id=3)  # a file: URI as Spark's
    assert follower.committed() == 3
    follower.taken()
    assert follower.committed() is None


# --- committed_ranges -------------------------------------------------------------------------

_METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def _offset_log(tmp_path: Path, initial: str | None, batches: dict[int, str]) -> OffsetLog:
    (tmp_path / "offsets").mkdir(parents=True)
    if initial is not None:
        (tmp_path / "sources" / "0").mkdir(parents=True)
        (tmp_path / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + initial.encode())
    for batch_id, ends in batches.items():
        (tmp_path / "offsets" / str(batch_id)).write_text(f"v1\n{_METADATA}\n{ends}")
    return OffsetLog(str(tmp_path), LocalFiles())


def _no_watermark(tp):
    raise AssertionError(f"the low watermark of {tp} was asked for, though the offset log says where it starts")


def test_a_batch_runs_from_the_previous_batch_ends_to_its_own(tmp_path):
    ends = {0: '{"t":{"0":10,"1":5}}', 1: '{"t":{"0":25,"1":7}}', 2: '{"t":{"0":25,"1":7}}'}
    log = _offset_log(tmp_path, '{"t":{"0":0,"1":5}}', ends)
    assert committed_ranges(log, 1, _no_watermark) == {("t", 0): (10, 25), ("t", 1): (5, 7)}
    assert committed_ranges(log, 2, _no_watermark) == {}, "a batch that read nothing"


def test_batch_zero_starts_at_the_query_initial_offsets(tmp_path):
    log = _offset_log(tmp_path, '{"t":{"0":3,"1":5}}', {0: '{"t":{"0":10,"1":5}}'})
    assert committed_ranges(log, 0, _no_watermark) == {("t", 0): (3, 10)}, "partition 1 read nothing"


def test_a_partition_added_since_the_previous_batch_starts_at_its_low_watermark(tmp_path):
    log = _offset_log(
        tmp_path,
        '{"t":{"0":0}}',
        {0: '{"t":{"0":10}}', 1: '{"t":{"0":25,"1":7,"2":3,"3":4}}'},
    )
    watermarks = {("t", 1): 2, ("t", 2): 0, ("t", 3): 9}  # 3: retention passed its end: nothing to read
    asked = []

    def low_watermark(tp):
        asked.append(tp)
        return watermarks[tp]

    assert committed_ranges(log, 1, low_watermark) == {("t", 0): (10, 25), ("t", 1): (2, 7), ("t", 2): (0, 3)}
    assert sorted(asked) == [("t", 1), ("t", 2), ("t", 3)], "only the partitions without a start"


def test_batch_zero_without_initial_offsets_starts_every_partition_at_its_low_watermark(tmp_path):
    log = _offset_log(tmp_path, None, {0: '{"t":{"0":10,"1":4}}'})
    assert committed_ranges(log, 0, lambda tp: {("t", 0): 6, ("t", 1): 0}[tp]) == {("t", 0): (6, 10), ("t", 1): (0, 4)}


def test_a_committed_batch_without_its_offsets_file_is_a_decode_error(tmp_path):
    log = _offset_log(tmp_path, '{"t":{"0":0}}', {0: '{"t":{"0":10}}'})
    with pytest.raises(DecodeError, match=r"batch 3 is committed but offsets/3 is missing"):
        committed_ranges(log, 3, _no_watermark)


# --- the row-wise plan check ------------------------------------------------------------------
# Plans that DataFrame.explain(extended=True) printed in Spark 4.2 for streaming DataFrames over
# Spark's Kafka source (streaming nodes are printed with a ``~`` before their name), long lines cut.

REFUSED = {
    "aggregation": ["Aggregate"],  # groupBy().agg()
    "union": ["Union"],
    "join": ["Join"],
    "sort": ["Sort"],  # orderBy
    "sortWithinPartitions": ["Sort"],  # a task's rows reordered: a record's rows no longer together
    "repartition": ["Repartition"],
    "coalesce": ["Repartition"],
    "dropDuplicates": ["Deduplicate"],
    "mapInPandas": ["MapInPandas"],
    "limit": ["GlobalLimit", "LocalLimit"],
}
ACCEPTED = [
    "select",
    "filter",
    "explode",  # Generate
    "withColumn",
    "python_udf",  # BatchEvalPython
    "arrow_udf",  # ArrowEvalPython
    "union_empty",  # df.union(df.limit(0)): Union and GlobalLimit before the optimizer, none after it
]


def _plan(name: str) -> str:
    return (PLANS / f"{name}.txt").read_text()


@pytest.mark.parametrize("name", sorted(path.stem for path in PLANS.glob("*.txt")))
def test_the_plan_check_on_plans_spark_printed(name):
    assert name in REFUSED or name in ACCEPTED, f"spark_plans/{name}.txt: say whether it is row-wise"
    plan = _plan(name)
    assert "\n~" in plan, "a streaming plan: its nodes are printed after a ~"
    assert not_row_wise(plan) == REFUSED.get(name, [])


def test_only_the_optimized_logical_plan_is_read():
    parsed_union = _plan("union_empty")
    assert "~Union" in parsed_union.split("== Optimized Logical Plan ==")[0]
    assert not_row_wise(parsed_union) == []
    physical_sort = _plan("select").rstrip("\n") + "\n+- Sort [offset#11L ASC NULLS FIRST], true, 0\n"
    assert not_row_wise(physical_sort) == []
    no_physical = _plan("union").split("== Physical Plan ==")[0]
    assert not_row_wise(no_physical) == ["Union"]
    assert not_row_wise("~Aggregate [key#7]\n+- ~Project [key#7]\n") == ["Aggregate"], "no sections: all of it"


class _Explained:
    """A DataFrame as check_row_wise sees it: ``explain`` prints a captured plan."""

    def __init__(self, plan: str) -> None:
        self.plan = plan

    def explain(self, extended: bool = False) -> None:
        assert extended, "the optimized plan is printed only with extended=True"
        print(self.plan)


def words(df):
    return df


def test_check_row_wise_refuses_with_the_component_the_transform_and_the_nodes():
    with pytest.raises(ConfigError, match=r"spout-x: transform words is not row-wise \(its plan has Join\)"):
        check_row_wise(_Explained(_plan("join")), component="spout-x", transform=words)  # type: ignore[arg-type]
    check_row_wise(_Explained(_plan("explode")), component="spout-x", transform=words)  # type: ignore[arg-type]


# --- the sink's producer and the transform's outputs ------------------------------------------


def test_the_sink_is_an_idempotent_producer_with_every_other_option_kept():
    given_options = {"kafka.linger.ms": "5", "kafka.security.protocol": "SSL"}
    forced = sink_options(given_options, component="spout-x")
    assert forced == {**given_options, "kafka.enable.idempotence": "true", "kafka.acks": "all"}
    assert given_options == {"kafka.linger.ms": "5", "kafka.security.protocol": "SSL"}, "not changed in place"
    same = sink_options({"kafka.enable.idempotence": " True ", "kafka.acks": "ALL"}, component="spout-x")
    assert same == {"kafka.enable.idempotence": "true", "kafka.acks": "all"}, "the user's equal settings"


@pytest.mark.parametrize(("key", "value"), [("kafka.enable.idempotence", "false"), ("kafka.acks", "1")])
def test_a_user_setting_against_the_idempotent_sink_is_refused(key, value):
    with pytest.raises(ConfigError, match=rf"spout-x: spark_kafka_options {key}='{value}' is not allowed"):
        sink_options({key: value}, component="spout-x")


@pytest.mark.parametrize(
    "columns", [{"key", "value", "anchors"}, {"value", "anchors", "headers", "rk_fail"}, {"value", "anchors", "extra"}]
)
def test_outputs_with_value_and_anchors_are_taken(columns):
    check_outputs(columns, component="spout-x", transform=words)


@pytest.mark.parametrize(("columns", "message"), [({"key", "anchors"}, "'value'"), ({"key", "value"}, "'anchors'")])
def test_outputs_without_value_or_anchors_are_refused(columns, message):
    with pytest.raises(ConfigError, match=rf"spout-x: transform words must return .*{message}.*got \["):
        check_outputs(columns, component="spout-x", transform=words)


@pytest.mark.parametrize("column", ["rk_header", "rk_row"])
def test_a_column_the_output_paths_add_is_refused_as_the_foreach_batch_path_refuses_it(column):
    with pytest.raises(ConfigError, match=rf"transform words returned column\(s\) \['{column}'\].*adds itself"):
        check_outputs({"value", "anchors", column}, component="spout-x", transform=words)


@pytest.mark.parametrize("column", ["rk_fail_reason", "rk_fail_retry"])
def test_failure_details_a_single_query_cannot_write_are_refused(column):
    with pytest.raises(ConfigError, match=rf"transform words returned \['{column}'\].*rk_fail alone"):
        check_outputs({"value", "anchors", "rk_fail", column}, component="spout-x", transform=words)


# --- SparkOptions.real_time -------------------------------------------------------------------

_UNITS = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0}


@given(st.integers(1, 10**6), st.sampled_from(sorted(_UNITS)), st.booleans(), st.sampled_from(["", " ", "  "]))
def test_real_time_is_a_count_and_a_unit(count, unit, plural, pad):
    options = SparkOptions(real_time=f"{pad}{count}{pad}{unit}{'s' if plural else ''}{pad}")
    assert options.real_time_seconds == count * _UNITS[unit]
    assert options.one_query and not options.single_query


def test_without_real_time_there_is_no_duration_and_single_query_is_one_query():
    assert SparkOptions().real_time_seconds is None and not SparkOptions().one_query
    assert SparkOptions(single_query=True).one_query and SparkOptions(single_query=True).real_time_seconds is None
    assert SparkOptions(real_time="10 seconds").real_time_seconds == 10.0


@pytest.mark.parametrize(
    "bad", ["5 min", "fast", "", "-1 seconds", "1.5 seconds", "10", "seconds", "5 days", 5, "0 seconds"]
)
def test_a_real_time_that_is_not_a_duration_is_refused(bad):
    with pytest.raises(ConfigError, match=r"SparkOptions: real_time must be a batch duration .* got"):
        SparkOptions(real_time=bad)


def test_real_time_and_available_now_exclude_each_other():
    with pytest.raises(ConfigError, match="real_time and available_now"):
        SparkOptions(real_time="1 minute", available_now=True)


# --- RootOwner.on_unknown ---------------------------------------------------------------------

TP = ("src", 0)


class _Listener:
    """What :meth:`OutcomeListener.poll_batches` gives: ``(roots, kinds)`` per outcome record."""

    def __init__(self, batches) -> None:
        self.batches = batches

    def poll_batches(self, timeout=0.0, *, max_records=500):
        batches, self.batches = self.batches, []
        return [(roots, np.array(kinds, dtype=np.uint8)) for roots, kinds in batches]

    def close(self) -> None:
        pass


def _owner() -> RootOwner:
    owner = RootOwner(
        component="spout-t",
        topics=TopologyTopics("t"),
        connection=Connection("-"),
        tracking=Tracking(max_retries=1, backoff=Backoff(initial_ms=0)),
        clock=ManualClock(),
        read_failure_reasons=False,
    )
    owner.restore(TP, 0, None)
    return owner


def _track(owner: RootOwner, roots: dict[int, int]) -> list:
    completed: list = []
    owner._on_completed = completed.extend
    for offset, root in roots.items():
        owner.track(TP, offset, root, 1, SourceRecord(*TP, offset, b"k", b"v", [], 1))
    return completed


def _state(owner: RootOwner, completed: list) -> tuple:
    tracker = owner.tracker
    return (
        tracker.stats,
        owner.stats,
        tracker.commit_points(),
        tracker.pending_offsets(TP),
        [r.offset for r in completed],
        tracker.due_redeliveries(),
    )


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 10),
    st.lists(
        st.lists(st.tuples(st.integers(0, 14), st.sampled_from([COMPLETED, COMPLETED, FAILED, TIMED_OUT])), max_size=8),
        max_size=5,
    ),
)
def test_outcomes_of_roots_not_held_go_to_on_unknown_and_the_rest_are_applied_in_order(records, batches):
    """Offsets 0..records-1 are tracked (root 100 + offset); an outcome of another root goes to
    ``on_unknown`` in the order heard, and the tracker acts on the others as it would on each in
    turn without them."""
    owner, reference = _owner(), _owner()
    roots = {offset: 100 + offset for offset in range(records)}
    completed, reference_completed = _track(owner, roots), _track(reference, roots)
    unknown: list[tuple[int, int]] = []
    owner.on_unknown = lambda root, kind: unknown.append((root, kind))
    owner.listener = _Listener([([100 + o for o, _ in batch], [kind for _, kind in batch]) for batch in batches])
    owner.take_outcomes()
    expected_unknown = []
    for batch in batches:
        held = {100 + o for o, _ in batch if reference.tracker.holds(100 + o)}  # judged per record, as heard
        for offset, kind in batch:
            if 100 + offset in held:
                reference.on_outcome(100 + offset, kind)
            else:
                expected_unknown.append((100 + offset, kind))
    assert unknown == expected_unknown
    assert all(isinstance(kind, int) and not isinstance(kind, bool) for _, kind in unknown)
    assert _state(owner, completed) == _state(reference, reference_completed)


def test_without_on_unknown_an_outcome_of_a_root_not_held_is_ignored_and_counted():
    owner = _owner()
    completed = _track(owner, {0: 100})
    owner.listener = _Listener([([555, 100], [COMPLETED, COMPLETED])])
    owner.take_outcomes()
    assert [r.offset for r in completed] == [0] and owner.tracker.stats.ignored_outcomes == 1


def test_held_outcomes_applied_later_act_in_order_as_heard():
    """What the driver does when it registers a batch: ``apply_outcomes`` of the outcomes held."""
    owner, reference = _owner(), _owner()
    roots = {0: 100, 1: 101, 2: 102, 3: 103}
    completed, reference_completed = _track(owner, roots), _track(reference, roots)
    kinds = [FAILED, COMPLETED, TIMED_OUT, COMPLETED]
    owner.apply_outcomes([101, 100, 103, 102], np.array(kinds, dtype=np.uint8))
    for root, kind in zip([101, 100, 103, 102], kinds):
        reference.on_outcome(root, kind)
    assert _state(owner, completed) == _state(reference, reference_completed)
    assert [r.offset for r in completed] == [0, 2], "the COMPLETED ones, in the order given"
    assert owner.tracker.stats.failed == 1 and owner.tracker.stats.timed_out == 1


def test_a_jvm_without_tracked_rows_is_a_clear_error_at_start(monkeypatch):
    from reliable_kafka.spark import jvm_functions

    monkeypatch.setenv(jvm_functions.MODE_ENV, "auto")
    monkeypatch.setattr(jvm_functions, "_jvm_class", lambda session, name: None)
    missing = r"spout-x: single_query needs .*Java functions, but class reliablekafka.spark.TrackedRows is not"
    with pytest.raises(ConfigError, match=missing):
        jvm_functions.require_class(
            object(), "reliablekafka.spark.TrackedRows", component="spout-x", needs="single_query"
        )
    monkeypatch.setattr(jvm_functions, "_jvm_class", lambda session, name: "the class")
    assert jvm_functions.require_class(object(), "x", component="spout-x", needs="single_query") == "the class"
