"""A Spark spout's batch made roots in the driver, without Spark: ids derived in NumPy from offset
ranges, the ranges read from a checkpoint's offset log, bulk registration with the tracker, and
reading the group's commit while a fresh broker's coordinator is not ready
(reliable_kafka.spark.batch_roots, derive.derive_ids, recovery.committed_offsets,
InFlightTracker.emitted_many)."""

import contextlib
from typing import Any
from unittest import mock

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.config import Connection, Tracking
from reliable_kafka.core import tracker as tracker_module
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import InFlightTracker, Redelivery
from reliable_kafka.errors import ArgumentError, WaitTimeoutError
from reliable_kafka.spark import batch_roots, derive
from reliable_kafka.spark.batch_roots import BatchRoots, OffsetLog, register_ranges
from reliable_kafka.spark.checkpoint import LocalFiles
from reliable_kafka.spark.derive import ZERO_REPLACEMENT, derive_edge, derive_ids, derive_root
from reliable_kafka.spark.recovery import committed_offsets
from reliable_kafka.spout.roots import RootOwner
from reliable_kafka.testing.memory_broker import ManualClock, MemoryKafka
from reliable_kafka.topology import TopologyTopics

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)


# --- ids in NumPy -----------------------------------------------------------------------------


def test_derive_ids_matches_values_spark_computed():
    roots, edges = derive_ids(7, "orders", 3, [1234567], 2)
    assert roots.tolist() == [1285762449740019174] and edges.tolist() == [4703857042546730475]


@settings(max_examples=60)
@given(
    longs,
    st.text(min_size=1, max_size=40),
    st.integers(0, 10_000),
    st.lists(st.integers(0, 2**62), min_size=0, max_size=20),
    st.integers(1, 50),
)
def test_derive_ids_is_the_python_port_vectorised(salt, topic, partition, offsets, attempt):
    roots, edges = derive_ids(salt, topic, partition, np.array(offsets, dtype=np.int64), attempt)
    assert roots.dtype == np.int64 and edges.dtype == np.int64
    assert roots.tolist() == [derive_root(salt, topic, partition, o, attempt) for o in offsets]
    assert edges.tolist() == [derive_edge(salt, topic, partition, o, attempt) for o in offsets]


def test_a_zero_hash_is_replaced_as_spark_does():
    ids = derive._signed_nonzero(np.array([0, 5, 2**64 - 1], dtype=np.uint64))
    assert ids.tolist() == [ZERO_REPLACEMENT, 5, -1]


# --- offset ranges from the offset log --------------------------------------------------------


def _checkpoint(tmp_path, initial: str | None, batches: dict[int, str]) -> str:
    (tmp_path / "offsets").mkdir(parents=True)
    if initial is not None:
        (tmp_path / "sources" / "0").mkdir(parents=True)
        (tmp_path / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + initial.encode())
    for batch_id, ends in batches.items():
        metadata = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
        (tmp_path / "offsets" / str(batch_id)).write_text(f"v1\n{metadata}\n{ends}")
    return str(tmp_path)


def test_offset_log_gives_each_batch_its_range(tmp_path):
    root = _checkpoint(
        tmp_path,
        '{"t":{"0":0,"1":5}}',
        {0: '{"t":{"0":10,"1":5}}', 1: '{"t":{"0":25,"1":7}}', 2: '{"t":{"0":25,"1":7,"2":3}}'},
    )
    log = OffsetLog(root, LocalFiles())
    assert log.ranges(0) == {("t", 0): (0, 10)}  # partition 1 read nothing
    assert log.ranges(1) == {("t", 0): (10, 25), ("t", 1): (5, 7)}
    assert log.ranges(2) is None, "a partition without a start must be collected"
    assert OffsetLog(root, LocalFiles()).ranges(1) == {("t", 0): (10, 25), ("t", 1): (5, 7)}  # no cache needed
    assert log.ranges(7) is None, "a batch the log does not hold is collected"


def test_offset_log_without_initial_offsets_or_going_backwards_is_not_trusted(tmp_path):
    assert OffsetLog(_checkpoint(tmp_path / "a", None, {0: '{"t":{"0":3}}'}), LocalFiles()).ranges(0) is None
    backwards = _checkpoint(tmp_path / "b", '{"t":{"0":9}}', {0: '{"t":{"0":3}}'})
    assert OffsetLog(backwards, LocalFiles()).ranges(0) is None
    unresolved = _checkpoint(tmp_path / "c", '{"t":{"0":-2}}', {0: '{"t":{"0":3}}'})
    assert OffsetLog(unresolved, LocalFiles()).ranges(0) is None


def test_ranges_wider_than_the_limit_are_collected(tmp_path):
    root = _checkpoint(tmp_path, '{"t":{"0":0}}', {0: '{"t":{"0":150000}}', 1: '{"t":{"0":150001}}'})
    batches = BatchRoots(component="c", owner=None, offset_log=OffsetLog(root, LocalFiles()), low_watermark=None)
    assert batches.stream_ranges(0) is None
    assert batches.stream_ranges(1) == {("t", 0): (150000, 150001)}
    assert batches.stream_ranges(None) is None
    wide = BatchRoots(
        component="c",
        owner=None,
        offset_log=OffsetLog(root, LocalFiles()),
        low_watermark=None,
        max_offsets_per_trigger=200_000,
    )
    assert wide.stream_ranges(0) == {("t", 0): (0, 150000)}


# --- registration -----------------------------------------------------------------------------

emissions = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 3)), max_size=40)


@given(emissions, st.integers(1, 3))
def test_emitted_many_is_emitted_one_by_one(emitted, attempt):
    """Same roots, pending offsets, commit points, counters and outcomes, re-emissions included."""
    clock = [0]
    one, many = (InFlightTracker(max_pending=None, clock=lambda: clock[0]) for _ in range(2))
    next_root = iter(range(1, 10_000))
    accepted: list[tuple[int, int]] = []  # the tracker's order: a new highest offset, or a repeat (pending here)
    for offset, count in emitted:
        if offset > max((o for o, _ in accepted), default=-1) or offset in {o for o, _ in accepted}:
            accepted.append((offset, count))
    emitted = accepted
    for chunk in (emitted[: len(emitted) // 2], emitted[len(emitted) // 2 :]):
        offsets = [offset for offset, _ in chunk]
        roots = [next(next_root) for _ in chunk]
        for offset, root in zip(offsets, roots):
            one.emitted(("t", 0), offset, root=root, attempt=attempt)
        many.emitted_many(("t", 0), offsets, roots, attempt=attempt)
        clock[0] += 10
    assert many.pending_offsets(("t", 0)) == one.pending_offsets(("t", 0))
    assert many.commit_points() == one.commit_points()
    assert many.stats.emitted == one.stats.emitted and many.pending_roots() == one.pending_roots()
    for root in range(1, 50):
        assert many.on_outcome(root, OutcomeKind.COMPLETED) == one.on_outcome(root, OutcomeKind.COMPLETED)
    assert many.commit_points() == one.commit_points()
    assert [a.offset for a in many.expire_backstop(10**9)] == [a.offset for a in one.expire_backstop(10**9)]


def test_emitted_many_refuses_what_emitted_refuses():
    tracker = InFlightTracker()
    tracker.emitted_many(("t", 0), [1], [11])
    with pytest.raises(ArgumentError, match="already held"):
        tracker.emitted_many(("t", 0), [2], [11])
    with pytest.raises(ArgumentError, match="non-zero"):
        tracker.emitted_many(("t", 0), [3], [0])
    with pytest.raises(ArgumentError, match="attempt"):
        tracker.emitted_many(("t", 0), [4], [44], attempt=0)


# A tracker's state before a batch: assigned (or not) with done offsets above its commit, some
# offsets emitted, then some completed or failed; a batch is then a range, maybe overlapping them.
tracker_histories = st.fixed_dictionaries(
    {
        "committed": st.none() | st.integers(0, 20),
        "done_above": st.lists(st.integers(0, 60), max_size=8),
        "emitted": st.lists(st.integers(0, 60), max_size=25),
        "settled": st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["COMPLETED", "FAILED"])), max_size=25),
    }
)


def _tracker_after(history, clock) -> InFlightTracker:
    tracker = InFlightTracker(max_pending=None, max_retries=1, clock=lambda: clock[0])
    _replay(tracker, history)
    clock[0] += 5
    return tracker


def _owner_after(history) -> RootOwner:
    owner = _owner(max_pending=None, max_retries=1)
    _replay(owner.tracker, history)
    return owner


def _replay(tracker: InFlightTracker, history) -> None:
    tp = ("t", 0)
    if history["committed"] is not None:
        tracker.assign(tp, committed=history["committed"], done_above=history["done_above"])
    roots = {}
    for offset in history["emitted"]:
        try:
            roots[offset] = tracker.emitted(tp, offset, root=1000 + len(roots) + offset * 100)
        except ArgumentError:  # registered out of offset order: refused, nothing changed
            continue
    for offset, kind in history["settled"]:
        if offset in roots:
            tracker.on_outcome(roots[offset], OutcomeKind[kind])


def _state(tracker: InFlightTracker):
    tp = ("t", 0)
    return (
        tracker.pending_offsets(tp),
        tracker.commit_points(),
        tracker.done_above(tp),
        tracker.unsettled(tp),
        tracker.pending_summary(),
        tracker.stats.as_dict(),
        tracker.pending_roots(),
        tracker.next_due_ms(),
    )


@settings(max_examples=300)
@given(tracker_histories, st.integers(0, 80), st.integers(0, 30))
def test_skip_mask_is_should_skip_per_offset(history, start, length):
    tracker = _tracker_after(history, [0])
    offsets = np.arange(start, start + length, dtype=np.int64)
    expected = [tracker.should_skip(("t", 0), o) for o in offsets.tolist()]
    assert tracker.skip_mask(("t", 0), offsets).tolist() == expected
    assert tracker.skip_mask(("t", 9), offsets).tolist() == [False] * length  # a partition not tracked


@settings(max_examples=300)
@given(
    tracker_histories,
    st.integers(0, 80),
    st.integers(1, 30),
    st.booleans(),
    st.integers(1, 3),
    st.sampled_from([1, 64]),
)
def test_emitted_many_in_bulk_is_emitted_one_by_one(history, start, length, skip_done, attempt, bulk_min):
    """A batch's range after random replays, completions and failures: the bulk path (fresh offsets)
    and the fallback (an offset pending, a root held) leave the same state as emitted per record."""
    clock = [0]
    one, many = _tracker_after(history, clock), _tracker_after(history, [0])
    offsets = np.arange(start, start + length, dtype=np.int64)
    if skip_done:  # as register_ranges does
        offsets = offsets[~one.skip_mask(("t", 0), offsets)]
    roots = offsets * 7 + 100_003  # distinct from the history's roots, unless an offset repeats one
    before = _state(many)
    try:
        for offset, root in zip(offsets.tolist(), roots.tolist()):
            one.emitted(("t", 0), offset, root=root, attempt=attempt)
    except ArgumentError:  # an offset out of order: emitted_many refuses the whole batch
        with mock.patch.object(tracker_module, "BULK_MIN", bulk_min), pytest.raises(ArgumentError, match="order"):
            many.emitted_many(("t", 0), offsets, roots, attempt=attempt)
        assert _state(many) == before
        return
    with mock.patch.object(tracker_module, "BULK_MIN", bulk_min):  # 1: the bulk path when fresh
        many.emitted_many(("t", 0), offsets, roots, attempt=attempt)
    assert _state(many) == _state(one)
    for root in roots.tolist() + list(range(1000, 8000)):
        assert many.on_outcome(root, OutcomeKind.COMPLETED) == one.on_outcome(root, OutcomeKind.COMPLETED)
    assert _state(many) == _state(one)
    assert many.expire_backstop(10**9) == one.expire_backstop(10**9)
    assert many.due_redeliveries(10**10) == one.due_redeliveries(10**10)


def test_a_fresh_range_is_registered_without_a_call_per_record(monkeypatch):
    tracker = InFlightTracker(max_pending=None)
    tracker.assign(("t", 0), committed=10, done_above=[12])
    monkeypatch.setattr(tracker, "emitted", lambda *a, **k: pytest.fail("bulk path expected"))
    monkeypatch.setattr(tracker_module, "BULK_MIN", 10)
    tracker.emitted_many(("t", 0), np.arange(10, 20), np.arange(1, 11))
    assert tracker.pending_offsets(("t", 0)) == list(range(10, 20)) and tracker.commit_point(("t", 0)) == 10
    assert all(type(o) is int for o in tracker.pending_offsets(("t", 0)))  # no NumPy scalars kept


def test_emitted_many_with_a_repeated_root_in_one_batch_raises_as_emitted_does():
    tracker = InFlightTracker()
    with pytest.raises(ArgumentError, match="already held"):
        tracker.emitted_many(("t", 0), [1, 2], [5, 5])


def _owner(**tracking: Any) -> RootOwner:
    """An owner on a clock that stands still: two owners given the same history compare equal."""
    return RootOwner(
        component="c",
        topics=TopologyTopics("tp"),
        connection=Connection("-"),
        tracking=Tracking(**tracking),
        clock=ManualClock(),
    )


def test_register_ranges_tracks_every_offset_except_those_done():
    owner = _owner(max_pending=None)
    owner.tracker.assign(("t", 0), committed=10, done_above=[12, 13])
    entries, skipped = register_ranges(owner, {("t", 0): (8, 15), ("t", 1): (0, 2)}, salt=99)
    expected_skipped = [derive_root(99, "t", 0, o, 1) for o in (8, 9, 12, 13)]
    assert sorted(skipped) == sorted(expected_skipped)
    kept = [(0, 10), (0, 11), (0, 14), (1, 0), (1, 1)]
    assert entries == [(derive_root(99, "t", p, o, 1), derive_edge(99, "t", p, o, 1)) for p, o in kept]
    assert owner.tracker.pending_offsets(("t", 0)) == [10, 11, 14]
    assert owner.tracker.pending_offsets(("t", 1)) == [0, 1]
    # an offset with no record (a transaction marker) completes by its final ack like any root
    for root, _ in entries:
        owner.on_outcome(root, OutcomeKind.COMPLETED)
    assert owner.tracker.commit_points() == {("t", 0): 15, ("t", 1): 2}


collected_rows = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.sampled_from([1, 1, 1, 2])), max_size=40)


@settings(max_examples=300)
@given(tracker_histories, collected_rows, st.booleans(), st.lists(st.integers(0, 60), max_size=4), st.booleans())
def test_register_collected_in_bulk_is_record_by_record(history, rows, ascending, unread, held):
    """Collected batches (first attempts, redeliveries, repeats, any order) after random replays:
    the same entries, skips, missing redeliveries and tracker state as registering each record."""
    if ascending:
        rows = sorted(set(rows), key=lambda row: (row[0], row[1]))
    columns = {
        "topic": ["t"] * len(rows),
        "partition": [p for p, _, _ in rows],
        "offset": [o for _, o, _ in rows],
        "attempt": [a for _, _, a in rows],
        "root": [500_000 + i for i in range(len(rows))],
        "edge": [900_000 + i for i in range(len(rows))],
    }
    asked = [(("t", p), o, a) for p, o, a in rows if a > 1] + [(("t", 0), o, 2) for o in unread]
    redeliveries = [Redelivery(tp, o, a, "FAILED") for tp, o, a in dict.fromkeys(asked)]
    bulk, one = (_owner_after(history) for _ in range(2))
    for owner in (bulk, one) if held else ():  # as due_redeliveries leaves them: pending
        for i, r in enumerate(redeliveries):
            if not owner.tracker.is_pending(r.tp, r.offset):
                with contextlib.suppress(ArgumentError):  # out of offset order: refused, not pending
                    owner.tracker.emitted(r.tp, r.offset, root=700_000 + i)
    try:
        expected = batch_roots._register_one_by_one(one, columns, redeliveries)
    except ArgumentError:  # a record out of offset order (not skipped): refused either way
        with mock.patch.object(tracker_module, "BULK_MIN", 1), pytest.raises(ArgumentError, match="order"):
            batch_roots.register_collected(bulk, columns, redeliveries)
        return
    with mock.patch.object(tracker_module, "BULK_MIN", 1):
        got = batch_roots.register_collected(bulk, columns, redeliveries)
    assert sorted(got[0]) == sorted(expected[0]) and sorted(got[1]) == sorted(expected[1])
    assert got[2] == expected[2]
    assert _state(bulk.tracker) == _state(one.tracker)
    assert bulk.tracker.pending_offsets(("t", 1)) == one.tracker.pending_offsets(("t", 1))
    assert bulk.tracker.commit_points() == one.tracker.commit_points()


def test_a_collected_batch_in_offset_order_is_registered_a_partition_at_a_time(monkeypatch):
    owner = _owner(max_pending=None)
    monkeypatch.setattr(owner, "track", lambda *a, **k: pytest.fail("bulk path expected"))
    columns = {"topic": ["t"] * 4, "partition": [0, 1, 0, 1], "offset": [3, 0, 4, 1], "attempt": [1] * 4}
    columns |= {"root": [11, 12, 13, 14], "edge": [21, 22, 23, 24]}
    entries, skipped, missing = batch_roots.register_collected(owner, columns, [])
    assert sorted(entries) == [(11, 21), (12, 22), (13, 23), (14, 24)] and skipped == [] and missing == []
    assert owner.tracker.pending_offsets(("t", 0)) == [3, 4] and owner.tracker.pending_offsets(("t", 1)) == [0, 1]


def test_a_partition_collected_out_of_offset_order_is_registered_in_order():
    """A Kafka partition read by several Spark tasks can come back a chunk at a time, later chunk
    first: every record is registered (the tracker refuses registrations out of offset order), and
    the commit point waits for the earliest."""
    owner = _owner(max_pending=None)
    owner.tracker.assign(("t", 0), committed=0, done_above=[])
    columns = {"topic": ["t"] * 6, "partition": [0] * 6, "offset": [3, 4, 5, 0, 1, 2], "attempt": [1] * 6}
    columns |= {"root": [13, 14, 15, 10, 11, 12], "edge": [23, 24, 25, 20, 21, 22]}
    entries, skipped, missing = batch_roots.register_collected(owner, columns, [])
    assert entries == [(10, 20), (11, 21), (12, 22), (13, 23), (14, 24), (15, 25)]
    assert skipped == [] and missing == []
    assert owner.tracker.pending_offsets(("t", 0)) == [0, 1, 2, 3, 4, 5]
    for root in (13, 14, 15, 11, 12):
        owner.on_outcome(root, OutcomeKind.COMPLETED)
    assert owner.tracker.commit_points().get(("t", 0), 0) == 0  # offset 0 still pending
    owner.on_outcome(10, OutcomeKind.COMPLETED)
    assert owner.tracker.commit_points() == {("t", 0): 6}


# --- the group's commit on a fresh broker -----------------------------------------------------


def _group_consumer():
    kafka = MemoryKafka()
    kafka.create_topic("src", 2)
    consumer = kafka.consumer({"group.id": "g"})
    consumer.commit(offsets=[TopicPartition("src", 0, 7)], asynchronous=False)
    return kafka, consumer


@pytest.mark.parametrize("code", [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
def test_committed_offsets_waits_out_a_coordinator_that_is_not_ready(code):
    kafka, consumer = _group_consumer()
    kafka.fail_next("committed", 3, error=code)
    with pytest.raises(KafkaException):  # what the spout's start met before
        consumer.committed([TopicPartition("src", 0)])
    sleeps = []
    found = committed_offsets(consumer, [("src", 0), ("src", 1)], component="c", group_id="g", sleep=sleeps.append)
    assert [(tp.partition, tp.offset) for tp in found] == [(0, 7), (1, -1001)]
    assert len(sleeps) == 2


def test_committed_offsets_gives_up_after_its_deadline_with_a_clear_error():
    kafka, consumer = _group_consumer()
    kafka.fail_next("committed", 10_000, error=KafkaError.NOT_COORDINATOR)
    with pytest.raises(WaitTimeoutError, match=r"group 'g'.*NOT_COORDINATOR.*start the job again"):
        committed_offsets(consumer, [("src", 0)], component="c", group_id="g", timeout=0.3)


def test_committed_offsets_raises_other_errors_at_once():
    kafka, consumer = _group_consumer()
    kafka.fail_next("committed", 1, error=KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException, match="injected"):
        committed_offsets(consumer, [("src", 0)], component="c", group_id="g", sleep=lambda s: None)
