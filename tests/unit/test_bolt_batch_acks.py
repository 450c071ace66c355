"""A basic bolt's batch loop: its one-tree emit path and the acks it packs once per batch keep the
XOR rule (docs/design.md section 2) exactly as the per-tuple ``collector.ack`` and ``anchor_child`` do."""

from __future__ import annotations

import time
from functools import reduce

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.bolt.runner import ACK_HOLD_ENTRIES, PROCESS_TIMED_RUN
from reliable_kafka.codec import anchors as anchors_codec
from reliable_kafka.core import ids
from reliable_kafka.core.ack_packer import AckPacker
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.errors import ArgumentError, DecodeError
from reliable_kafka.kafka.ack_sender import MAX_ENTRIES_PER_RECORD, AckSender
from reliable_kafka.kafka.produce import SEND_WAIT_S, ProducerUnusable
from reliable_kafka.testing.memory_broker import new_message
from reliable_kafka.testing.recording_producer import RecordingProducer

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
NONZERO = INT64.filter(bool)


def _bolt(handler) -> tuple[BasicBolt, RecordingProducer]:
    bolt = BasicBolt(topology="t", connection="127.0.0.1:1", source_topics="in", group_id="g", handler=handler)
    producer = RecordingProducer()
    bolt._producer = producer
    bolt._acks = AckSender(producer, acks_topic="t.acks", ack_partitions=1, sender=1)
    return bolt, producer


def _message(offset: int, anchors: dict[int, int] | None, headers=None):
    raw = [(codec.ANCHORS_HEADER, codec.encode_anchors(anchors))] if anchors else []
    return new_message(
        topic="in", partition=0, offset=offset, key=b"k", value=b"v", headers=(headers or []) + raw or None
    )


def _entries(bolt: BasicBolt) -> list[tuple[int, int, int]]:
    drained = bolt._acks._packer.drain()
    if not drained:
        return []
    kinds, roots, vals = drained[0]
    return list(zip(kinds.tolist(), roots.tolist(), vals.tolist()))


@given(root=NONZERO, edge=INT64, children=st.integers(min_value=0, max_value=5))
def test_one_tree_emits_balance_the_inputs_ack(root, edge, children):
    def split(tuple_, collector):
        for i in range(children):
            collector.emit("out", b"%d" % i, key=b"w")

    bolt, producer = _bolt(split)
    bolt._process_batch([_message(0, {root: edge})])
    outputs = [codec.decode_anchors(dict(headers)[codec.ANCHORS_HEADER]) for *_, headers in producer.sent]
    assert all(list(anchors) == [root] for anchors in outputs)
    child_edges = [anchors[root] for anchors in outputs]
    # the inlined header is byte for byte what encode_anchors writes
    assert [dict(headers)[codec.ANCHORS_HEADER] for *_, headers in producer.sent] == [
        codec.encode_anchors({root: child}) for child in child_edges
    ]
    assert len(set(child_edges)) == children  # one fresh edge per child
    [(kind, acked_root, val)] = _entries(bolt)
    assert (kind, acked_root) == (EventKind.ACK, root)
    # the tree's XOR: the input's edge, its ack and every child's edge cancel out
    assert reduce(lambda a, b: a ^ b, child_edges, edge ^ val) == 0
    assert bolt.stats.emitted == children and bolt.stats.acked == 1


def test_user_headers_or_several_trees_take_the_general_path_with_the_same_rule():
    def forward(tuple_, collector):
        collector.emit("out", b"x", headers=[("trace", b"t")])
        collector.emit("out", b"y")

    bolt, producer = _bolt(forward)
    bolt._process_batch([_message(0, {5: 50, 6: 60})])
    first, second = (dict(headers) for *_, headers in producer.sent)
    assert first["trace"] == b"t"
    a, b = codec.decode_anchors(first[codec.ANCHORS_HEADER]), codec.decode_anchors(second[codec.ANCHORS_HEADER])
    assert set(a) == set(b) == {5, 6}
    acks = {root: val for _, root, val in _entries(bolt)}
    for root, edge in ((5, 50), (6, 60)):
        assert edge ^ acks[root] ^ a[root] ^ b[root] == 0


def test_a_batch_acks_every_handled_tracked_tuple_in_order_and_fails_the_one_that_raised():
    def handler(tuple_, collector):
        if tuple_.offset == 2:
            raise ValueError("bad word")

    bolt, _ = _bolt(handler)
    bolt._failures = None
    bolt._process_batch([_message(0, {1: 10}), _message(1, None), _message(2, {3: 30}), _message(3, {4: 40})])
    assert _entries(bolt) == [(EventKind.FAIL, 3, 0), (EventKind.ACK, 1, 10), (EventKind.ACK, 4, 40)]
    assert bolt.stats.acked == 3 and bolt.stats.failed == 1 and bolt.stats.untracked == 1
    assert bolt.process_latency.count == 4  # every handler call, observed once per batch
    assert bolt._ends == {("in", 0): 4}


def test_acks_of_a_batch_cut_short_by_an_error_are_still_packed():
    class Stop(BaseException):
        pass

    def handler(tuple_, collector):
        if tuple_.offset == 1:
            raise Stop

    bolt, _ = _bolt(handler)
    with pytest.raises(Stop):
        bolt._process_batch([_message(0, {1: 10}), _message(1, {2: 20})])
    assert _entries(bolt) == [(EventKind.ACK, 1, 10)]
    assert bolt._ack_pairs == [] and bolt._ack_owed == []  # the next batch starts empty


@given(root=INT64, edge=INT64)
def test_encode_one_anchor_is_encode_anchors_of_one_pair(root, edge):
    assert codec.encode_one_anchor(root, edge) == codec.encode_anchors({root: edge})


def test_encode_one_anchor_rejects_ids_outside_int64():
    with pytest.raises(ArgumentError):
        codec.encode_one_anchor(2**63, 1)


@given(st.lists(st.tuples(st.sampled_from(list(EventKind)), NONZERO, INT64), max_size=20))
def test_packer_extend_is_add_per_entry(entries):
    one, many = AckPacker(ack_partitions=3), AckPacker(ack_partitions=3)
    for kind, root, val in entries:
        one.add(kind, root, val)
    for kind in EventKind:
        chosen = [(root, val) for k, root, val in entries if k == kind]
        many.extend(kind, [root for root, _ in chosen], [val for _, val in chosen])
    drained_one, drained_many = one.drain(), many.drain()
    assert drained_one.keys() == drained_many.keys()
    for partition, (kinds, roots, vals) in drained_one.items():
        assert sorted(zip(kinds.tolist(), roots.tolist(), vals.tolist())) == sorted(
            zip(*(column.tolist() for column in drained_many[partition]))
        )


@given(st.lists(st.sampled_from(list(EventKind)), min_size=1, max_size=20))
def test_packer_drains_kinds_as_a_writable_uint8_column_of_their_values(kinds):
    packer = AckPacker(ack_partitions=1)
    for root, kind in enumerate(kinds, start=1):
        packer.add(kind, root)
    [(drained, _, _)] = packer.drain().values()
    assert drained.dtype == np.uint8 and drained.flags.writeable
    assert drained.tolist() == [int(kind) for kind in kinds]


def test_an_emptied_id_pool_is_refilled_by_the_inlined_emit(monkeypatch):
    """The basic collector takes edge ids from ids' pool itself; an empty pool falls back to new_id."""
    monkeypatch.setattr(ids, "_POOL_SIZE", 3)
    ids._pool.clear()

    def split(tuple_, collector):
        for i in range(7):
            collector.emit("out", b"%d" % i, key=b"w")

    bolt, producer = _bolt(split)
    bolt._process_batch([_message(0, {5: 9})])
    edges = [codec.decode_anchors(dict(headers)[codec.ANCHORS_HEADER])[5] for *_, headers in producer.sent]
    assert len(edges) == 7 and len(set(edges)) == 7 and all(edges)
    [(_, _, val)] = _entries(bolt)
    assert reduce(lambda a, b: a ^ b, edges, 9 ^ val) == 0


_ADDS = st.lists(  # how entries reach a packer: one at a time, a list batch, or a batch of NumPy columns
    st.tuples(
        st.sampled_from(["add", "lists", "columns"]),
        st.sampled_from(list(EventKind)),
        st.lists(st.tuples(NONZERO, INT64), max_size=6),
    ),
    max_size=8,
)


@given(_ADDS, st.sampled_from([1, 3]))
def test_packer_keeps_entries_in_the_order_added_whether_lists_or_columns(adds, partitions):
    """A bolt's batch of ACKs comes as int64 columns; FAILs and others come one at a time: the
    packer gives them back per partition in the order added, as if each had been added alone."""
    one, mixed = AckPacker(ack_partitions=partitions), AckPacker(ack_partitions=partitions)
    for how, kind, entries in adds:
        for root, val in entries:
            one.add(kind, root, val)
        roots, vals = [root for root, _ in entries], [val for _, val in entries]
        if how == "add":
            for root, val in entries:
                mixed.add(kind, root, val)
        elif how == "lists":
            mixed.extend(kind, roots, vals)
        else:
            mixed.extend(kind, np.array(roots, dtype=np.int64), np.array(vals, dtype=np.int64))
    assert len(mixed) == len(one)
    drained_one, drained_mixed = one.drain(), mixed.drain()
    assert len(mixed) == 0 and mixed.drain() == {}
    assert drained_one.keys() == drained_mixed.keys()
    for partition, columns in drained_one.items():
        assert [column.dtype for column in drained_mixed[partition]] == [np.uint8, np.int64, np.int64]
        assert [column.tolist() for column in drained_mixed[partition]] == [column.tolist() for column in columns]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["v2", "v1", "several"]),
            st.dictionaries(NONZERO, INT64, min_size=2, max_size=3),
            st.integers(min_value=0, max_value=3),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_loops_ack_entries_are_collector_ack_of_each_tuple(records):
    """The per-tuple loop keeps each acked tree as its one-pair v2 value and reads the batch's
    entries as columns: the same entries, in the same order, as ``collector.ack`` per tuple."""
    messages, expected = [], []

    def emit_some(tuple_, collector):
        for i in range(records[tuple_.offset][2]):
            collector.emit("out", b"%d" % i)
        expected.extend((int(EventKind.ACK), root, edge ^ tuple_.ack_val) for root, edge in tuple_.anchors.items())

    for offset, (how, anchors, _) in enumerate(records):
        one = dict(list(anchors.items())[:1])
        if how == "v2":
            raw = codec.encode_anchors(one)
        elif how == "v1":
            raw = anchors_codec._encode_anchors_v1(one)
        else:
            raw = codec.encode_anchors(anchors)
        headers = [(codec.ANCHORS_HEADER, raw)]
        messages.append(new_message(topic="in", partition=0, offset=offset, key=b"k", value=b"v", headers=headers))
    bolt, _ = _bolt(emit_some)
    bolt._process_batch(messages)
    assert _entries(bolt) == expected
    assert bolt._ack_pairs == [] and bolt._ack_owed == []  # the next batch starts empty


def test_packer_extend_refuses_columns_of_different_lengths_and_drops_without_ackers():
    with pytest.raises(ArgumentError):
        AckPacker(ack_partitions=1).extend(EventKind.ACK, [1, 2], [3])
    off = AckPacker(ack_partitions=0)
    off.extend(EventKind.ACK, [1], [2])
    assert len(off) == 0


@given(  # a third all in the first bucket (<= 1 ms, its bound included): the common case, counted at once
    st.sampled_from([500.0, 0.003, 0.001]).flatmap(
        lambda top: st.lists(st.floats(min_value=0, max_value=top), max_size=200)
    )
    # or a batch of fast calls with a few slow ones among them (a busy machine): only those searched;
    # or with many (a slow handler's batch: NumPy searches them)
    | st.sampled_from([(0, 5), (64, 100)])
    .flatmap(
        lambda slow: st.tuples(
            st.lists(st.floats(min_value=0, max_value=0.001), min_size=1, max_size=200),
            st.lists(st.floats(min_value=0.001, max_value=500.0), min_size=slow[0], max_size=slow[1]),
            st.randoms(use_true_random=False),
        )
    )
    .map(lambda parts: parts[2].sample(parts[0] + parts[1], len(parts[0]) + len(parts[1])))
)
def test_observe_many_is_observe_each(values):  # short lists bisect, long ones (>= 64) use NumPy
    one, many = LatencyHistogram(), LatencyHistogram()
    for value in values:
        one.observe(value)
    many.observe_many(values)
    assert one.counts == many.counts and one.count == many.count
    assert one.sum_s == pytest.approx(many.sum_s)


class _Consumer:
    """Hands out the scripted batches, one per consume call (confluent-kafka's batch consume)."""

    def __init__(self, batches) -> None:
        self.batches = list(batches)

    def consume(self, num_messages, timeout):
        return self.batches.pop(0) if self.batches else []

    def store_offsets(self, *, offsets):
        pass

    def commit(self, asynchronous=True):
        pass


class _Quarantine:
    unsent = 0


def _ack_records(producer: RecordingProducer) -> int:
    return sum(1 for topic, *_ in producer.sent if topic == "t.acks")


def _polling_bolt(batches, batch_size: int) -> tuple[BasicBolt, RecordingProducer]:
    bolt, producer = _bolt(lambda tuple_, collector: None)
    bolt.batch_size, bolt.commit_interval_ms, bolt._last_commit = batch_size, 3_600_000, time.monotonic()
    bolt._consumer, bolt._quarantine, bolt._failures = _Consumer(batches), _Quarantine(), None
    return bolt, producer


def test_while_full_batches_come_acks_wait_for_more_and_go_when_the_bolt_catches_up(monkeypatch):
    monkeypatch.setattr("reliable_kafka.bolt.runner.ACK_HOLD_S", 3600.0)
    full = [[_message(10 * b + i, {10 * b + i + 1: 7}) for i in range(2)] for b in range(3)]
    bolt, producer = _polling_bolt([*full, [_message(99, {100: 7})]], batch_size=2)
    bolt._acks_sent_at = float("inf")  # as if just sent
    for _ in full:
        bolt.poll_once(0)
    assert _ack_records(producer) == 0 and len(bolt._acks) == 6  # behind: held
    bolt.poll_once(0)  # a short batch: caught up, everything goes in one record
    assert _ack_records(producer) == 1 and len(bolt._acks) == 0
    assert bolt._acks.entries_sent == 7


def test_held_acks_go_at_the_entry_bound_the_time_bound_and_before_a_forced_commit(monkeypatch):
    monkeypatch.setattr("reliable_kafka.bolt.runner.ACK_HOLD_S", 3600.0)
    monkeypatch.setattr("reliable_kafka.bolt.runner.ACK_HOLD_ENTRIES", 4)
    full = [[_message(10 * b + i, {10 * b + i + 1: 7}) for i in range(2)] for b in range(3)]
    bolt, producer = _polling_bolt(full, batch_size=2)
    bolt._acks_sent_at = float("inf")
    bolt.poll_once(0)
    assert _ack_records(producer) == 0
    bolt.poll_once(0)  # 4 entries: the bound
    assert _ack_records(producer) == 1
    bolt.poll_once(0)
    assert len(bolt._acks) == 2
    bolt._flush_and_commit(force=True)  # close and revoke: nothing stays held
    assert _ack_records(producer) == 2 and len(bolt._acks) == 0
    monkeypatch.setattr("reliable_kafka.bolt.runner.ACK_HOLD_S", 0.0)
    bolt._consumer = _Consumer([[_message(50, {51: 7}), _message(51, {52: 7})]])
    bolt.poll_once(0)  # held past ACK_HOLD_S: sent although still behind
    assert _ack_records(producer) == 3


def test_a_poll_that_produced_sends_its_outputs_and_acks_at_once_and_an_idle_poll_sends_nothing():
    bolt, producer = _polling_bolt([[_message(0, {1: 7})], [_message(1, {2: 7})], []], batch_size=10)
    flushes = []

    def flush(timeout=0):
        flushes.append(timeout)
        producer.queued = 0
        return 0

    producer.flush = flush
    bolt.poll_once(0)  # the last stage: acks only
    assert _ack_records(producer) == 1 and flushes == [SEND_WAIT_S]
    bolt.handler = lambda tuple_, collector: collector.emit("out", b"x")
    bolt.poll_once(0)  # outputs too: the whole batch goes now, not in linger.ms pieces
    assert _ack_records(producer) == 2 and flushes == [SEND_WAIT_S] * 2
    bolt.poll_once(0)  # nothing read, nothing produced: no flush
    assert flushes == [SEND_WAIT_S] * 2


def test_children_of_an_untracked_input_are_untracked_and_nothing_is_acked():
    bolt, producer = _bolt(lambda tuple_, collector: collector.emit("out", b"x", key=b"k", partition=1))
    bolt._process_batch([_message(0, None)])
    assert producer.sent == [("out", b"x", b"k", 1, None)]
    assert _entries(bolt) == [] and bolt.stats.emitted == 1 and bolt.stats.untracked == 1


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2)), max_size=40))
def test_a_batch_notes_each_partitions_next_offset_in_any_order(order):
    """The loop notes a partition's next offset once per run of its records: any interleaving of
    topics and partitions gives each one's last offset + 1."""
    expected: dict[tuple[str, int], int] = {}
    messages = []
    for topic, partition in order:
        offset = expected.get((topic, partition), 10 * partition)
        expected[(topic, partition)] = offset + 1
        messages.append(new_message(topic=topic, partition=partition, offset=offset, key=b"k", value=b"v"))
    bolt, _ = _bolt(lambda tuple_, collector: None)
    bolt._ends = {}
    bolt._process_batch(messages)
    assert bolt._ends == expected


class _Parked:
    def __init__(self) -> None:
        self.offsets: list[int] = []

    def decode_error(self, message, error) -> None:
        self.offsets.append(message.offset())


_ONE_PAIR_VALUES = st.one_of(
    st.builds(lambda root, edge: anchors_codec._encode_anchors_v1({root: edge}), NONZERO, INT64),  # one tree, v1
    st.dictionaries(NONZERO, INT64, max_size=3).map(codec.encode_anchors),  # none or several trees
    st.builds(codec.encode_one_anchor, INT64, INT64),  # root 0 included: a bad header
    st.builds(lambda body: b"\x02\x20" + body, st.binary(min_size=16, max_size=16)),
    st.binary(max_size=20),
)


@given(raw=_ONE_PAIR_VALUES)
def test_the_bolts_inlined_one_pair_read_is_decode_anchors(raw):
    """The batch loop reads one v2 pair itself: the same anchors as ``decode_anchors``, and the
    same records parked (root 0, bad bytes) instead of handed to the handler."""
    seen: list[dict[int, int]] = []
    bolt, _ = _bolt(lambda tuple_, collector: seen.append(dict(tuple_.anchored.anchors)))
    bolt._quarantine = parked = _Parked()
    bolt._ends = {}
    bolt._process_batch(
        [new_message(topic="in", partition=0, offset=7, key=b"k", value=b"v", headers=[(codec.ANCHORS_HEADER, raw)])]
    )
    try:
        expected = codec.decode_anchors(raw)
    except DecodeError:
        assert seen == [] and parked.offsets == [7] and bolt.stats.quarantined == 1
    else:
        assert seen == [expected] and parked.offsets == []
        # the ack entry too: made from the pair read inline (one tree) or from the dict (several)
        assert _entries(bolt) == [(EventKind.ACK, root, edge) for root, edge in expected.items()]


class _FullQueue(RecordingProducer):
    """Refuses the first ``full`` produce calls as librdkafka does when its local queue is full."""

    def __init__(self, full: int) -> None:
        super().__init__()
        self.full, self.polls = full, 0

    def produce(self, *args, **kwargs):
        if self.full:
            self.full -= 1
            raise BufferError("Local: Queue full")
        super().produce(*args, **kwargs)

    def poll(self, timeout=0):
        self.polls += 1
        return 0


def test_an_emit_into_a_full_queue_waits_for_room_and_is_produced_once():
    """The inlined emit leaves a full local queue (BufferError) to produce_headers' slow path."""
    bolt, _ = _bolt(lambda tuple_, collector: collector.emit("out", b"x", key=b"w"))
    producer = bolt._producer = _FullQueue(3)
    bolt._process_batch([_message(0, {5: 9})])
    [(topic, value, key, _partition, headers)] = producer.sent
    assert (topic, value, key) == ("out", b"x", b"w") and producer.polls >= 1
    [(root, edge)] = codec.decode_anchors(dict(headers)[codec.ANCHORS_HEADER]).items()
    assert root == 5 and _entries(bolt) == [(EventKind.ACK, 5, 9 ^ edge)]


def test_an_untracked_emit_into_a_full_queue_waits_for_room_and_is_produced_once():
    """The untracked emit's inlined produce leaves a full local queue to produce_headers too."""
    bolt, _ = _bolt(lambda tuple_, collector: collector.emit("out", b"x", key=b"w"))
    producer = bolt._producer = _FullQueue(2)
    bolt._process_batch([_message(0, None)])
    assert producer.sent == [("out", b"x", b"w", -1, None)] and bolt.stats.emitted == 1 and _entries(bolt) == []


class _StepClock:
    """A monotonic clock that moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def _bad_message(offset: int):
    """A record whose rk-anchors cannot be decoded: quarantined, never handled."""
    return new_message(
        topic="in", partition=0, offset=offset, key=b"k", value=b"v", headers=[(codec.ANCHORS_HEADER, b"\x02")]
    )


class _SlowQuarantine:
    """A quarantine whose copy takes 7 s of ``clock``: not a handler's time."""

    def __init__(self, clock: _StepClock) -> None:
        self.clock = clock

    def decode_error(self, message, error):
        self.clock.now += 7.0


def test_process_latency_gives_each_handler_call_its_runs_average_and_leaves_out_quarantine_copies():
    """The clock is read once per run of PROCESS_TIMED_RUN records: each handled tuple of a run is
    observed at the run's average (a run all within 1 ms is exact); a quarantine copy's time is not
    a handler's, and a quarantined record is not observed."""
    clock = _StepClock()
    size = PROCESS_TIMED_RUN
    took = dict.fromkeys(range(2 * size + 5), 0.0001)  # offset -> seconds its handler takes
    took[size + 3] = 0.2  # one slow call in the second run: its run's average is 0.0063
    for offset in range(2 * size, 2 * size + 5):  # the last, short run: 3 ms each
        took[offset] = 0.003
    bad = {1, size + 7}  # quarantined: one in the first run, one in the second

    def handler(tuple_, collector):
        clock.now += took[tuple_.offset]

    bolt, _ = _bolt(handler)
    bolt._clock = clock
    bolt._quarantine = _SlowQuarantine(clock)
    bolt._process_batch(
        [_bad_message(offset) if offset in bad else _message(offset, {1: 10}) for offset in sorted(took)]
    )
    expected = LatencyHistogram()
    for at in range(0, len(took), size):
        run = [took[offset] for offset in range(at, min(at + size, len(took))) if offset not in bad]
        for _ in run:
            expected.observe(sum(run) / len(run))
    histogram = bolt.process_latency
    assert histogram.counts == expected.counts
    assert histogram.counts[0] == size - 1  # the first run, exact: every call within 1 ms
    assert histogram.count == len(took) - len(bad) == bolt.stats.acked
    assert histogram.sum_s == pytest.approx(sum(s for offset, s in took.items() if offset not in bad))
    assert bolt.stats.received == len(took) and bolt.stats.quarantined == len(bad)


@pytest.mark.parametrize("anchors", [{1: 10}, None])  # tracked records, or untracked ones
def test_a_call_that_raises_through_leaves_the_tuples_handled_before_it_observed(anchors):
    """ProducerUnusable ends the batch in its handler call: the tuples handled before it (in its
    run too, quarantined ones left out) are counted handled, that one and the rest are not."""
    clock = _StepClock()
    stop_at = PROCESS_TIMED_RUN + 9  # in the second run, after a quarantined record

    def handler(tuple_, collector):
        clock.now += 0.002
        if tuple_.offset == stop_at:
            raise ProducerUnusable("fenced")

    bolt, _ = _bolt(handler)
    bolt._clock = clock
    bolt._quarantine = _SlowQuarantine(clock)
    bad = PROCESS_TIMED_RUN + 4
    messages = [_bad_message(o) if o == bad else _message(o, anchors) for o in range(3 * PROCESS_TIMED_RUN)]
    with pytest.raises(ProducerUnusable):
        bolt._process_batch(messages)
    histogram = bolt.process_latency
    assert histogram.count == stop_at - 1 == bolt.stats.acked  # every record before it but the quarantined
    assert histogram.counts[1] == stop_at - 1  # 2 ms each, 2.25 in the partial run (9 calls' time over 8)
    assert histogram.sum_s == pytest.approx(0.002 * stop_at)  # the last call's time goes to those before it


def test_a_tuple_is_its_own_anchored_and_emits_xor_into_its_ack_val():
    from reliable_kafka.bolt import Tuple
    from reliable_kafka.core.anchors import Anchored, anchor_child

    tuple_ = Tuple("in", 0, 3, b"k", b"v", [], 5, {7: 70})
    assert tuple_.anchored is tuple_ and isinstance(tuple_, Anchored) and tuple_.tracked
    child = anchor_child([tuple_])
    assert set(child) == {7} and tuple_.ack_val == child[7]
    old_style = Tuple("in", 0, 4, b"k", b"v", [], 5, Anchored({8: 80}))  # the signature before
    assert old_style.anchors == {8: 80} and old_style.ack_val == 0 and old_style.roots == [8]
    assert not Tuple("in", 0, 5, b"k", b"v", [], 5, {}).tracked


@pytest.mark.parametrize(
    "headers, anchors",
    [
        (None, {}),
        ([("trace", b"t1")], {}),
        ([(codec.ANCHORS_HEADER, codec.encode_one_anchor(7, 70))], {7: 70}),
        ([(codec.ANCHORS_HEADER, anchors_codec._encode_anchors_v1({7: 70}))], {7: 70}),  # one tree, read by decode
        ([(codec.ANCHORS_HEADER, codec.encode_anchors({7: 70, 8: 80}))], {7: 70, 8: 80}),
    ],
)
def test_the_loops_tuple_is_the_one_tuples_constructor_makes(headers, anchors):
    """The loop sets a tuple's fields itself (no ``__init__`` call per tuple): every slot, as
    ``Tuple(...)`` sets it, whatever the record carries."""
    from reliable_kafka.bolt import Tuple
    from reliable_kafka.core.anchors import Anchored

    seen = []
    bolt, _ = _bolt(lambda tuple_, collector: seen.append(tuple_))
    bolt._ends = {}
    message = new_message(topic="in", partition=2, offset=9, key=b"k", value=b"v", headers=headers, timestamp=(1, 55))
    bolt._process_batch([message])
    user_headers = [(k, v) for k, v in headers or [] if k != codec.ANCHORS_HEADER]
    tracked = any(k == codec.ANCHORS_HEADER for k, _ in headers or [])
    expected = Tuple("in", 2, 9, b"k", b"v", user_headers, 55, anchors if tracked else {})
    [got] = seen
    # timestamp_ms is read from the message (_record) when asked for, or from _timestamp_ms for Tuple(...)
    # _anchors is the anchors dict once made (the loop leaves it None for a one-pair value): compared as anchors
    # _settled is unset until a collector acks or fails the tuple
    skipped = ("_record", "_timestamp_ms", "_anchors", "_settled")
    fields = [n for n in Tuple.__slots__ + Anchored.__slots__ if n not in skipped]
    fields.append("timestamp_ms")
    assert type(got) is Tuple and {n: getattr(got, n) for n in fields} == {n: getattr(expected, n) for n in fields}


def test_a_tuple_in_its_handler_is_counted_received_and_not_handled():
    """The status page finds a stuck handler as ``received - quarantined - handled >= 1``: a batch
    is counted received when it is taken, before its handlers run, not at its end."""
    in_hand = []

    def handler(tuple_, collector):
        in_hand.append(bolt.stats.received - bolt.stats.quarantined - bolt.process_latency.count)

    bolt, _ = _bolt(handler)
    bolt._process_batch([_message(0, {1: 10}), _message(1, None), _message(2, {3: 30})])
    assert in_hand == [3, 3, 3]  # received moves once per batch, before it; handled once, after it
    assert bolt.stats.received == 3 and bolt.process_latency.count == 3


def test_acks_held_over_several_full_batches_go_in_one_record(monkeypatch):
    # fewer ack records is fewer produce requests, acker polls and outcome records (the time bound
    # still caps how long an ack waits)
    monkeypatch.setattr("reliable_kafka.bolt.runner.ACK_HOLD_S", 3600.0)
    full = [[_message(500 * b + i, {500 * b + i + 1: 7}) for i in range(500)] for b in range(12)]
    bolt, producer = _polling_bolt([*full, [_message(9999, {10_000: 7})]], batch_size=500)
    bolt._acks_sent_at = float("inf")
    for _ in range(len(full) + 1):
        bolt.poll_once(0)
    assert _ack_records(producer) == 1 and bolt._acks.entries_sent == 6001


def test_the_largest_ack_record_fits_the_default_message_size():
    entries = MAX_ENTRIES_PER_RECORD
    value = codec.encode_ack_batch(-(2**63), [int(EventKind.ACK)] * entries, [-(2**63)] * entries, [-1] * entries)
    assert len(value) < 1_000_000  # librdkafka's message.max.bytes and the broker's default limit
    assert ACK_HOLD_ENTRIES <= MAX_ENTRIES_PER_RECORD  # what a bolt holds goes in one record


def test_error_messages_in_a_batch_are_left_out_and_the_rest_handled_and_stored():
    """A consumed batch may carry error messages (end of partition): they are not tuples; the good
    messages around them are handled and their offsets stored. A batch without one is used as is."""
    from confluent_kafka import KafkaError

    handled = []
    eof = new_message(topic="in", partition=0, offset=2, error=KafkaError(KafkaError._PARTITION_EOF))
    batches = [[_message(0, {1: 7}), _message(1, None), eof, _message(2, {3: 7})], [_message(3, None)]]
    bolt, _ = _polling_bolt(batches, batch_size=10)
    bolt.handler = lambda tuple_, collector: handled.append(tuple_.offset)
    stored = []
    bolt._consumer.store_offsets = lambda *, offsets: stored.append([(tp.partition, tp.offset) for tp in offsets])
    bolt.poll_once(0)
    bolt.poll_once(0)
    assert handled == [0, 1, 2, 3] and bolt.stats.received == 4
    assert stored == [[(0, 3)], [(0, 4)]]


def test_error_messages_among_messages_of_another_class_are_left_out_as_well():
    """The batch is scanned for errors with confluent-kafka's ``Message.error``; messages of another
    class (a test double, an older confluent-kafka's stand-in) are checked one by one instead."""
    from confluent_kafka import KafkaError

    from reliable_kafka.testing.memory_broker import PlainMessage

    eof = PlainMessage(topic="in", partition=0, offset=1, error=KafkaError(KafkaError._PARTITION_EOF))
    good = [PlainMessage(topic="in", partition=0, offset=o, key=b"k", value=b"v") for o in (0, 1)]
    handled: list[int] = []
    bolt, _ = _polling_bolt([[good[0], eof, good[1]]], batch_size=10)
    bolt.handler = lambda tuple_, collector: handled.append(tuple_.offset)
    bolt.poll_once(0)
    assert handled == [0, 1] and bolt.stats.received == 2


def test_a_refused_read_in_a_batch_stops_the_bolt():
    from confluent_kafka import KafkaError

    from reliable_kafka.errors import AuthorizationError

    refused = new_message(topic="in", partition=0, offset=0, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    bolt, _ = _polling_bolt([[_message(0, None), refused]], batch_size=10)
    with pytest.raises(AuthorizationError):
        bolt.poll_once(0)


def test_emits_are_counted_once_per_batch_with_their_topics():
    """A basic bolt's emits note their topic; the runner counts them into ``stats.emitted`` and
    ``output_topics`` after each batch, each once."""

    def split(tuple_, collector):
        collector.emit("a", b"1", key=b"k")
        collector.emit("b" if tuple_.tracked else "c", b"2", key=b"k")
        collector.emit("d", b"3", headers=[("trace", b"t")])  # the general path counts as well

    bolt, producer = _bolt(split)
    bolt._process_batch([_message(0, {1: 10}), _message(1, None)])
    assert bolt.stats.emitted == 6 == len(producer.sent)
    assert bolt.output_topics == {"a", "b", "c", "d"}
    bolt._process_batch([])
    bolt._process_batch([_message(2, None)])
    assert bolt.stats.emitted == 9 == len(producer.sent) and bolt.stats.acked == 3


def test_acked_counts_the_basic_handler_calls_that_returned():
    """A basic bolt counts acked per batch: the calls handled, less those that raised (failed);
    a quarantined record is neither."""

    def handler(tuple_, collector):
        if tuple_.offset in (2, 40):
            raise ValueError("bad tuple")

    bolt, _ = _bolt(handler)
    bolt._quarantine = _SlowQuarantine(_StepClock())
    messages = [_bad_message(o) if o == 5 else _message(o, {1: 10} if o % 2 else None) for o in range(50)]
    bolt._process_batch(messages)
    assert bolt.stats.acked == 47 and bolt.stats.failed == 2 and bolt.stats.handler_errors == 2
    assert bolt.stats.quarantined == 1 and bolt.process_latency.count == 49


def _any_bolt(kind: str, seen: list):
    """A rich bolt (acks each tuple itself), a basic bolt or a basic bolt's batch_handler, each
    emitting one child anchored to its input and noting the input's public tracking state."""
    from reliable_kafka.bolt import Bolt

    def note(tuple_, collector) -> None:
        collector.emit("out", b"c", anchors=tuple_)  # the child's edge goes into the input's ack val
        seen.append((tuple_.tracked, tuple_.roots, dict(tuple_.anchors), tuple_.anchored.anchors is tuple_.anchors))

    def rich(tuple_, collector) -> None:
        note(tuple_, collector)
        collector.ack(tuple_)

    def together(batch, collector) -> None:
        for tuple_ in batch:
            note(tuple_, collector)

    common = dict(topology="t", connection="127.0.0.1:1", source_topics="in", group_id="g")
    if kind == "rich":
        bolt = Bolt(handler=rich, **common)
    elif kind == "batch":
        bolt = BasicBolt(batch_handler=together, **common)
    else:
        bolt = BasicBolt(handler=note, **common)
    producer = RecordingProducer()
    bolt._producer = producer
    bolt._acks = AckSender(producer, acks_topic="t.acks", ack_partitions=1, sender=1)
    bolt._quarantine = _Parked()
    bolt._ends = {}
    return bolt, producer


@pytest.mark.parametrize("kind", ["rich", "basic", "batch"])
@given(raws=st.lists(_ONE_PAIR_VALUES, min_size=1, max_size=5))
def test_a_tuple_made_without_its_anchors_dict_reads_and_acks_as_decoded(kind, raws):
    """A one-tree tuple keeps its root and edge and makes ``anchors`` when read: whatever the
    record carries, rich, basic and batch bolts see the anchors, roots and ``tracked`` of
    ``decode_anchors``, park what it refuses, and ack each tree ``(root, edge ^ ack_val)`` with
    the child's edge (a rich ``collector.ack`` of one tree reads no dict)."""
    seen: list = []
    bolt, producer = _any_bolt(kind, seen)
    messages = [
        new_message(topic="in", partition=0, offset=i, key=b"k", value=b"v", headers=[(codec.ANCHORS_HEADER, raw)])
        for i, raw in enumerate(raws)
    ]
    expected, parked = [], []
    for i, raw in enumerate(raws):
        try:
            expected.append(codec.decode_anchors(raw))
        except DecodeError:
            parked.append(i)
    bolt._process_batch(messages)
    assert bolt._quarantine.offsets == parked
    assert seen == [(bool(a), list(a), a, True) for a in expected]
    children = [dict(sent.headers or []).get(codec.ANCHORS_HEADER) for sent in producer.sent]  # one per input
    assert len(children) == len(expected)
    wanted = []
    for anchors, raw in zip(expected, children):
        assert (raw is None) == (not anchors)  # an untracked input's child is untracked
        child = codec.decode_anchors(raw) if raw else {}
        wanted += [(EventKind.ACK, root, edge ^ child[root]) for root, edge in anchors.items()]
    assert _entries(bolt) == wanted


def test_a_one_tree_tuples_anchors_dict_is_made_once_and_kept():
    from reliable_kafka.bolt import Tuple

    seen: list = []
    bolt, _ = _bolt(lambda tuple_, collector: seen.append(tuple_))
    bolt._ends = {}
    bolt._process_batch([_message(0, {7: 70})])
    [tuple_] = seen
    assert tuple_._anchors is None and tuple_._one_root == 7  # not made by the loop
    assert tuple_.anchors == {7: 70} and tuple_.anchors is tuple_.anchors and tuple_.roots == [7]
    made = Tuple("in", 0, 1, b"k", b"v", [], 5, {7: 70})
    made.anchors = {8: 80, 9: 90}  # set (never by the runner): the one root follows
    assert made._one_root == 0 and made.anchors == {8: 80, 9: 90} and made.tracked
    made.anchors = {}
    assert not made.tracked and made.roots == []


@pytest.mark.parametrize("kind", ["rich", "basic", "batch"])
def test_an_untracked_tuples_anchors_are_an_empty_dict_made_once_and_nothing_is_acked(kind):
    """A record without ``rk-anchors`` (tracking off upstream): the loop makes no anchors dict for
    its tuple; rich, basic and batch bolts read ``anchors`` as ``{}`` (the same dict on every
    read), ``tracked`` False and no roots; its child carries no header and no entry is packed."""
    seen: list = []
    bolt, producer = _any_bolt(kind, seen)
    messages = [new_message(topic="in", partition=0, offset=i, key=b"k", value=b"v") for i in range(3)]
    bolt._process_batch(messages)
    assert seen == [(False, [], {}, True)] * 3
    assert [dict(sent.headers or []) for sent in producer.sent] == [{}] * 3
    assert _entries(bolt) == [] and bolt.stats.untracked == 3


def test_untracked_tuples_among_tracked_ones_emit_untracked_children_and_leave_the_others_acks_alone():
    """A batch mixing records with and without ``rk-anchors``: each tuple's child is anchored to
    its own input (an untracked input's child carries no header), and only the tracked inputs are
    acked, each with its own child's edge."""
    bolt, producer = _bolt(lambda tuple_, collector: collector.emit("out", tuple_.value, key=tuple_.key))
    bolt._ends = {}
    bolt._process_batch([_message(0, {1: 10}), _message(1, None), _message(2, None), _message(3, {3: 30})])
    children = [dict(sent.headers or []).get(codec.ANCHORS_HEADER) for sent in producer.sent]
    assert [raw is not None for raw in children] == [True, False, False, True]
    first, last = codec.decode_anchors(children[0]), codec.decode_anchors(children[3])
    assert _entries(bolt) == [(EventKind.ACK, 1, 10 ^ first[1]), (EventKind.ACK, 3, 30 ^ last[3])]
    assert bolt.stats.untracked == 2 and bolt.stats.acked == 4 and bolt.stats.emitted == 4
