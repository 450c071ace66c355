"""The Spark bolt's batch summary as the driver reads it (reliable_kafka.spark.bolt.batch_inputs)
and the final acks of inputs already folded per root: the same acks as from the inputs' pairs."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.errors import StateError
from reliable_kafka.spark.bolt import batch_inputs
from reliable_kafka.spark.job import final_acks
from reliable_kafka.spark.writer import fold_by_root

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
pair_lists = st.lists(st.tuples(st.integers(1, 5), longs), max_size=30)


def packed(pairs) -> bytes:
    return b"".join(struct.pack(">qq", root, val) for root, val in pairs)


@settings(deadline=None)
@given(st.lists(st.tuples(longs, longs), max_size=30))
def test_packed_acks_are_read_back_as_int64_pairs(pairs):
    row = {"acks": packed(pairs), "acked": len(pairs), "inputs": 7, "untracked": 2, "ends": []}
    summary = batch_inputs(row)
    assert summary.pairs.dtype == np.int64
    assert [tuple(p) for p in summary.pairs.tolist()] == pairs
    assert (summary.acked, summary.inputs, summary.untracked) == (len(pairs), 7, 2)


def test_an_empty_batch_reads_as_no_pairs_and_zero_counts():
    summary = batch_inputs({"acks": None, "acked": None, "inputs": None, "untracked": None, "ends": []})
    assert summary.pairs.shape == (0, 2)
    assert (summary.acked, summary.inputs, summary.untracked, summary.ends) == (0, 0, 0, {})
    assert final_acks(summary.pairs, (np.empty(0, np.int64), np.empty(0, np.int64))) == []


def test_ends_are_keyed_by_topic_and_partition():
    ends = [{"topic": "a", "partition": 0, "end": 11}, {"topic": "b", "partition": 3, "end": 5}]
    summary = batch_inputs({"acks": b"", "acked": 0, "inputs": 0, "untracked": 0, "ends": ends})
    assert summary.ends == {("a", 0): 11, ("b", 3): 5}


def test_acks_that_are_not_whole_pairs_are_refused():
    with pytest.raises(StateError, match="not 16-byte"):
        batch_inputs({"acks": b"\x00" * 24, "acked": 1, "inputs": 1, "untracked": 0, "ends": []})


@settings(deadline=None)
@given(pair_lists, pair_lists)
def test_inputs_folded_per_root_first_give_the_same_final_acks(inputs, children):
    """What Spark's bit_xor per root hands the driver (as packed bytes) acks exactly as the pairs."""
    roots = np.array([r for r, _ in children], dtype=np.int64)
    xors = np.array([x for _, x in children], dtype=np.int64)
    arr = np.array(inputs, dtype=np.int64).reshape(-1, 2)
    folded_roots, folded_xors = fold_by_root(arr[:, 0], arr[:, 1])
    summary = batch_inputs(
        {
            "acks": packed(zip(folded_roots.tolist(), folded_xors.tolist())),
            "acked": len(inputs),
            "inputs": len(inputs),
            "untracked": 0,
            "ends": [],
        }
    )
    assert sorted(final_acks(summary.pairs, (roots, xors))) == sorted(final_acks(inputs, (roots, xors)))
