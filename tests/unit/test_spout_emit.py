"""A spout's emits keep the XOR rule (docs/design.md section 2): each tuple carries ``{root: edge}`` with a fresh
edge, and the root's INIT entry is the XOR of its tuples' edges, on the one-tree fast path (no
headers of the user's) and on the general path (the record's own headers forwarded)."""

from __future__ import annotations

from functools import reduce

import pytest

from reliable_kafka import codec
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.spout import SourceRecord, Spout
from reliable_kafka.testing.recording_producer import RecordingProducer


def _spout(handler) -> tuple[Spout, RecordingProducer]:
    spout = Spout(topology="t", connection="127.0.0.1:1", source_topics="src", group_id="g", handler=handler)
    producer = RecordingProducer()
    spout._producer = producer
    spout._acks = AckSender(producer, acks_topic="t.acks", ack_partitions=1, sender=spout.task_id)
    spout.tracker.assign(("src", 0), committed=None, done_above=[])
    return spout, producer


@pytest.mark.parametrize("headers", [[], [("trace", b"t1")]])
@pytest.mark.parametrize("tuples", [1, 3])
def test_each_tuple_gets_a_fresh_edge_of_its_root_and_the_init_is_their_xor(headers, tuples):
    def handler(record, collector):
        for i in range(tuples):
            collector.emit("out", record.value, key=b"%d" % i, headers=record.headers)

    spout, producer = _spout(handler)
    spout._process(SourceRecord("src", 0, 5, b"k", b"v", headers, 1000))
    anchors = []
    for topic, value, _key, _partition, sent_headers in producer.sent:
        assert (topic, value) == ("out", b"v")
        as_dict = dict(sent_headers)
        assert [(k, v) for k, v in sent_headers if k != codec.ANCHORS_HEADER] == headers
        anchors.append(codec.decode_anchors(as_dict[codec.ANCHORS_HEADER]))
    roots = {root for a in anchors for root in a}
    assert len(roots) == 1 and len(anchors) == tuples
    [root] = roots
    edges = [a[root] for a in anchors]
    assert len(set(edges)) == tuples
    [(kinds, entry_roots, vals)] = spout._acks._packer.drain().values()
    assert kinds.tolist() == [EventKind.INIT] and entry_roots.tolist() == [root]
    assert vals.tolist() == [reduce(lambda a, b: a ^ b, edges)]
    assert spout.stats.emitted == tuples and spout.tracker.pending_roots() == 1


def test_unanchored_emits_carry_no_header_and_leave_the_record_done():
    spout, producer = _spout(lambda record, collector: collector.emit_unanchored("out", b"x"))
    spout._process(SourceRecord("src", 0, 5, None, b"v", [], 1000))
    assert producer.sent == [("out", b"x", None, -1, None)]
    assert len(spout._acks) == 0 and spout.tracker.pending_roots() == 0
