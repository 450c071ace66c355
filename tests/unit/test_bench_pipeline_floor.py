"""bench/pipeline_floor.py writes the library's wire bytes: the floor it measures is the tracking
protocol's cost only if its headers and ack records are the ones the library and the acker read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.codec import decode_ack_batch
from reliable_kafka.codec.anchors import decode_anchors, encode_one_anchor
from reliable_kafka.core.kinds import EventKind

_PATH = Path(__file__).parents[2] / "bench" / "pipeline_floor.py"
_SPEC = importlib.util.spec_from_file_location("pipeline_floor", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
floor = importlib.util.module_from_spec(_SPEC)
sys.modules["pipeline_floor"] = floor
_SPEC.loader.exec_module(floor)

ids = st.integers(min_value=-(2**63), max_value=2**63 - 1).filter(bool)


class _Message:
    def __init__(self, headers):
        self._headers = headers

    def headers(self):
        return self._headers


@given(ids, ids)
def test_header_is_the_librarys_and_reads_back(root, edge):
    value = floor.ONE.pack(2, 32, root, edge)
    assert value == encode_one_anchor(root, edge)
    assert decode_anchors(value) == {root: edge}
    assert floor._anchor(_Message([(floor.HEADER, encode_one_anchor(root, edge))])) == (root, edge)


@given(st.lists(st.tuples(ids, ids), min_size=1, max_size=20))
def test_ack_record_is_an_ack_batch_of_the_sender(entries):
    class _Producer:
        def produce(self, topic, value, partition):
            self.sent = (topic, value, partition)

    producer = _Producer()
    roots, vals = [r for r, _ in entries], [v for _, v in entries]
    floor._send_acks(producer, "t.acks", 7, floor.ACK, roots, vals)
    topic, value, partition = producer.sent
    batch = decode_ack_batch(value)
    assert (topic, partition, batch.sender) == ("t.acks", 0, 7)
    assert batch.kinds.tolist() == [int(EventKind.ACK)] * len(entries)
    assert batch.roots.tolist() == roots and batch.vals.tolist() == vals
    assert batch.roots.dtype == np.int64
