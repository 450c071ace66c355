"""A basic bolt's ``batch_handler``: one call per consumed batch, records in columns, tuples made on
demand. Its acks, fails, quarantines, offsets and counters are those of the per-tuple handler doing
the same work, and the XOR rule (docs/design.md section 2) holds for the children it emits."""

from __future__ import annotations

from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.bolt import BasicBolt, Bolt, TupleBatch
from reliable_kafka.codec import anchors as anchors_codec
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import ConfigError
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.testing.memory_broker import new_message
from reliable_kafka.testing.recording_producer import RecordingProducer

NONZERO = st.integers(min_value=-(2**63), max_value=2**63 - 1).filter(bool)


class _Quarantine:
    def __init__(self) -> None:
        self.offsets: list[int] = []

    def decode_error(self, message, error) -> None:
        self.offsets.append(message.offset())


def _bolt(**handlers) -> tuple[BasicBolt, RecordingProducer]:
    bolt = BasicBolt(topology="t", connection="127.0.0.1:1", source_topics="in", group_id="g", **handlers)
    producer = RecordingProducer()
    bolt._producer = producer
    bolt._acks = AckSender(producer, acks_topic="t.acks", ack_partitions=1, sender=1)
    bolt._quarantine = _Quarantine()  # type: ignore[assignment]
    bolt._failures = None
    bolt._ends = {}
    return bolt, producer


def _entries(bolt) -> list[tuple[int, int, int]]:
    drained = bolt._acks._packer.drain()
    if not drained:
        return []
    kinds, roots, vals = drained[0]
    return list(zip(kinds.tolist(), roots.tolist(), vals.tolist()))


# what a record carries: no header, a v2 header of one tree, a v1 header of one tree, several trees,
# a user's header beside one tree, or a header that does not decode
KINDS = ("untracked", "v2", "v1", "several", "user", "bad")


def _record(offset: int, kind: str, roots: list[int], partition: int = 0):
    anchors = {root: root ^ 0x5A5A for root in roots}
    header = {
        "untracked": None,
        "v2": lambda: codec.encode_anchors(dict(list(anchors.items())[:1])),
        "v1": lambda: anchors_codec._encode_anchors_v1(dict(list(anchors.items())[:1])),
        "several": lambda: codec.encode_anchors(anchors),
        "user": lambda: codec.encode_anchors(dict(list(anchors.items())[:1])),
        "bad": lambda: b"\x02\x07",
    }[kind]
    headers = [] if header is None else [(codec.ANCHORS_HEADER, header())]
    if kind == "user":
        headers.insert(0, ("trace", b"t%d" % offset))
    return new_message(
        topic="in",
        partition=partition,
        offset=offset,
        key=b"k%d" % offset,
        value=b"v%d" % offset,
        headers=headers or None,
        timestamp=(1, 1000 + offset),
    )


RECORDS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.lists(NONZERO, min_size=2, max_size=2, unique=True), st.integers(0, 3)),
    min_size=1,
    max_size=12,
)


def _run(records, *, together: bool):
    """The same work both ways: each record emits ``children`` outputs anchored to it."""
    messages = [_record(i, kind, roots, partition=i // 5) for i, (kind, roots, _) in enumerate(records)]
    children = {i: n for i, (_, _, n) in enumerate(records)}
    seen = []

    def per_tuple(tuple_, collector):
        seen.append((tuple_.offset, tuple_.key, tuple_.value, tuple_.headers, tuple_.anchors, tuple_.timestamp_ms))
        for c in range(children[tuple_.offset]):
            collector.emit("out", b"%d.%d" % (tuple_.offset, c))

    def per_batch(batch, collector):
        assert batch.keys() == [t.key for t in batch] and batch.values() == [t.value for t in batch]
        for tuple_ in batch:
            seen.append((tuple_.offset, tuple_.key, tuple_.value, tuple_.headers, tuple_.anchors, tuple_.timestamp_ms))
            for c in range(children[tuple_.offset]):
                collector.emit("out", b"%d.%d" % (tuple_.offset, c), anchors=tuple_)

    bolt, producer = _bolt(**({"batch_handler": per_batch} if together else {"handler": per_tuple}))
    bolt._process_batch(messages)
    return bolt, producer, seen


@given(records=RECORDS)
def test_a_batch_handler_acks_quarantines_and_counts_as_the_per_tuple_handler(records):
    one, one_out, one_seen = _run(records, together=False)
    batch, batch_out, batch_seen = _run(records, together=True)
    assert batch_seen == one_seen  # the same tuples, fields and order
    assert batch._ends == one._ends and batch._quarantine.offsets == one._quarantine.offsets
    assert batch.stats == one.stats
    assert batch.process_latency.count == one.process_latency.count == len(one_seen)
    assert [value for _, value, *_ in batch_out.sent] == [value for _, value, *_ in one_out.sent]
    # the same entries up to the children's edges, which are random: same kinds and roots, in order
    assert [(k, r) for k, r, _ in _entries(batch)] == [(k, r) for k, r, _ in _entries(one)]


@given(records=RECORDS)
def test_each_trees_xor_balances_with_a_batch_handler(records):
    """For every tracked input and each of its roots: its edge, its ack and its children's edges XOR
    to zero (the tree completes once the children are acked, and not before)."""
    bolt, producer, seen = _run(records, together=True)
    children_edges: dict[tuple[int, int], list[int]] = {}
    for sent in producer.sent:
        parent = int(sent.value.split(b".")[0])
        raw = dict(sent.headers or []).get(codec.ANCHORS_HEADER)
        assert raw is None or raw == codec.encode_anchors(codec.decode_anchors(raw))  # as the writer writes it
        for root, edge in (codec.decode_anchors(raw) if raw else {}).items():
            children_edges.setdefault((parent, root), []).append(edge)
    # one ACK entry per (input, root), in the order of the inputs
    expected = [(offset, root, edge) for offset, *_, anchors, _ in seen for root, edge in anchors.items()]
    entries = _entries(bolt)
    assert [(kind, root) for kind, root, _ in entries] == [(EventKind.ACK, root) for _, root, _ in expected]
    for (offset, root, edge), (_, _, val) in zip(expected, entries):
        assert reduce(lambda a, b: a ^ b, children_edges.get((offset, root), []), edge ^ val) == 0
    # an untracked input's children are untracked: no header
    anchors_of = {offset: anchors for offset, *_, anchors, _ in seen}
    for sent in producer.sent:
        assert (not sent.headers) == (not anchors_of[int(sent.value.split(b".")[0])])


def test_a_batch_is_columns_and_makes_each_tuple_once():
    got = {}

    def handler(batch, collector):
        got.update(keys=batch.keys(), values=batch.values(), n=len(batch), same=batch[1] is batch[1] is batch[-1])
        got["offsets"] = [t.offset for t in batch]

    bolt, _ = _bolt(batch_handler=handler)
    bolt._process_batch([_record(0, "v2", [7, 8]), _record(1, "bad", [9, 10]), _record(2, "untracked", [1, 2])])
    assert got == {"keys": [b"k0", b"k2"], "values": [b"v0", b"v2"], "n": 2, "same": True, "offsets": [0, 2]}
    assert isinstance(TupleBatch([], [], [], []), TupleBatch) and len(TupleBatch([], [], [], [])) == 0


def test_a_raise_fails_every_tuple_of_the_batch():
    def handler(batch, collector):
        raise ValueError("bad batch")

    bolt, producer = _bolt(batch_handler=handler)
    bolt._process_batch([_record(0, "v2", [7, 8]), _record(1, "untracked", [1, 2]), _record(2, "several", [3, 4])])
    assert sorted(_entries(bolt)) == sorted([(EventKind.FAIL, 7, 0), (EventKind.FAIL, 3, 0), (EventKind.FAIL, 4, 0)])
    assert bolt.stats.failed == 3 and bolt.stats.handler_errors == 3 and bolt.stats.acked == 0
    assert bolt._ends == {("in", 0): 3}  # failed inputs are done here: their trees replay from the spout


def test_an_emit_that_names_no_input_fails_the_batch_and_sends_nothing_untracked():
    def handler(batch, collector):
        collector.emit("out", b"x")  # no current tuple: anchoring it to nothing would untrack it

    bolt, producer = _bolt(batch_handler=handler)
    bolt._process_batch([_record(0, "v2", [7, 8])])
    assert producer.sent == [] and _entries(bolt) == [(EventKind.FAIL, 7, 0)]
    assert bolt.stats.handler_errors == 1


def test_exactly_one_handler_and_batch_handlers_only_for_basic_bolts():
    on = {"topology": "t", "connection": "127.0.0.1:1", "source_topics": "in", "group_id": "g"}
    with pytest.raises(ConfigError):
        BasicBolt(**on)
    with pytest.raises(ConfigError):
        BasicBolt(**on, handler=lambda t, c: None, batch_handler=lambda b, c: None)
    with pytest.raises(ConfigError):
        Bolt(**on, batch_handler=lambda b, c: None)
    with pytest.raises(ConfigError):
        BasicBolt(**on, batch_handler="count")
