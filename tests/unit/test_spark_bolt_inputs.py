"""The Spark bolt's batch summary as the driver reads it (reliable_kafka.spark.bolt.batch_inputs)
and its final acks: the collected pairs folded per root ack exactly as the pairs themselves."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.errors import StateError
from reliable_kafka.spark.bolt import batch_inputs
from reliable_kafka.spark.job import final_acks

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
pair_lists = st.lists(st.tuples(st.integers(1, 5), longs), max_size=30)


def packed(pairs) -> bytes:
    return b"".join(struct.pack(">qq", root, val) for root, val in pairs)


def row(pairs=(), **counts):
    return {"pairs": packed(pairs), "inputs": 0, "untracked": 0, "ends": [], **counts}


@settings(deadline=None)
@given(pair_lists, pair_lists)
def test_the_collected_pairs_give_the_same_final_acks_as_the_pairs_themselves(inputs, children):
    roots = np.array([r for r, _ in children], dtype=np.int64)
    xors = np.array([x for _, x in children], dtype=np.int64)
    summary = batch_inputs(row(inputs, inputs=len(inputs)))
    assert summary.pairs.dtype == np.int64
    assert len(set(summary.pairs[:, 0].tolist())) == len(summary.pairs), "each root once"
    assert summary.acked == len(inputs)
    assert sorted(final_acks(summary.pairs, (roots, xors))) == sorted(final_acks(inputs, (roots, xors)))


def test_pairs_of_one_root_are_folded_with_xor_and_a_cancelled_root_stays():
    summary = batch_inputs(row([(5, 3), (9, -1), (5, 6), (7, 4), (7, 4)], inputs=4, untracked=1))
    assert sorted(map(tuple, summary.pairs.tolist())) == [(5, 3 ^ 6), (7, 0), (9, -1)]
    assert (summary.acked, summary.inputs, summary.untracked) == (5, 4, 1)


def test_an_empty_batch_reads_as_no_pairs_and_zero_counts():
    summary = batch_inputs({"pairs": None, "inputs": None, "untracked": None, "ends": []})
    assert summary.pairs.shape == (0, 2)
    assert (summary.acked, summary.inputs, summary.untracked, summary.ends) == (0, 0, 0, {})
    assert final_acks(summary.pairs, (np.empty(0, np.int64), np.empty(0, np.int64))) == []


def test_ends_are_keyed_by_topic_and_partition():
    ends = [{"topic": "a", "partition": 0, "end": 11}, {"topic": "b", "partition": 3, "end": 5}]
    assert batch_inputs(row(ends=ends)).ends == {("a", 0): 11, ("b", 3): 5}


def test_pairs_that_are_not_whole_pairs_are_refused():
    with pytest.raises(StateError, match="not 16-byte"):
        batch_inputs({"pairs": b"\x00" * 24, "inputs": 1, "untracked": 0, "ends": []})
