"""The pure parts of Spark's JVM output path (reliable_kafka.spark.writer), without Spark: the
Python port of the child edges, the observed children read back and folded, the driver's fold of
final acks, the Kafka sink's V2 setting and the rows failed with ``rk_fail``. The Spark SQL expressions are checked
against these in tests/integration/test_spark_sql_expressions.py."""

import struct
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.errors import StateError
from reliable_kafka.spark.derive import derive_child_edge
from reliable_kafka.spark.failed_rows import FailedRow, failed_from_metrics
from reliable_kafka.spark.job import final_ack_columns, final_acks
from reliable_kafka.spark.writer import children_from_metrics, fold_by_root, without_kafka

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
row_ids = st.integers(min_value=0, max_value=2**62)


@settings(deadline=None)  # a busy shared machine: no timing in tests
@given(longs, longs, st.sets(row_ids, min_size=2, max_size=200))
def test_child_edges_of_one_root_are_distinct_and_never_zero(salt, root, rows):
    edges = [derive_child_edge(salt, row, root) for row in rows]
    assert 0 not in edges
    assert len(set(edges)) == len(edges)


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), longs), max_size=60))
def test_fold_by_root_equals_the_xor_per_root(entries):
    roots = np.array([r for r, _ in entries], dtype=np.int64)
    vals = np.array([v for _, v in entries], dtype=np.int64)
    folded_roots, folded = fold_by_root(roots, vals)
    expected: dict[int, int] = {}
    for root, val in entries:
        expected[root] = expected.get(root, 0) ^ val
    assert dict(zip(folded_roots.tolist(), folded.tolist())) == expected


@settings(deadline=None)
@given(st.lists(longs, min_size=1, max_size=30), longs, longs)
def test_an_input_ack_folded_with_its_children_cancels_only_once_every_child_is_acked(children, edge, root):
    # One spout root: INIT(edge); the driver's final ack edge ^ XOR(children); each downstream
    # ack of a child cancels it. With all children acked the tree's XOR is zero.
    xor = reduce(lambda a, b: a ^ b, children, 0)
    _, (final,) = fold_by_root(np.array([root, root], dtype=np.int64), np.array([edge, xor], dtype=np.int64))
    assert reduce(lambda a, b: a ^ b, children, edge ^ int(final)) == 0


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), longs), max_size=60), st.integers(0, 100))
def test_observed_pairs_give_each_roots_xor_of_child_edges(pairs, rows):
    raw = b"".join(struct.pack(">qq", root, edge) for root, edge in pairs)
    written, roots, xors = children_from_metrics({"rows": rows, "pairs": bytearray(raw)}, what="test")
    expected: dict[int, int] = {}
    for root, edge in pairs:
        expected[root] = expected.get(root, 0) ^ edge
    assert written == rows
    assert dict(zip(roots.tolist(), xors.tolist())) == expected


def test_no_observed_rows_means_no_children():
    written, roots, xors = children_from_metrics({"rows": 0, "pairs": None}, what="test")  # listagg of nothing
    assert written == 0 and len(roots) == len(xors) == 0


@pytest.mark.parametrize("metrics", [{}, {"rows": 3}, {"rows": 1, "pairs": b"\x00" * 15}])
def test_metrics_that_do_not_name_every_child_fail_the_batch(metrics):
    # Acking the inputs without their children's edges would complete their trees early.
    with pytest.raises(StateError, match="spark output: test"):
        children_from_metrics(metrics, what="test")


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ("avro,csv,json,kafka,orc,parquet,text", "avro,csv,json,orc,parquet,text"),
        ("parquet, Kafka ", "parquet"),
        ("parquet", "parquet"),
        ("", ""),
    ],
)
def test_the_v1_source_list_loses_kafka_and_only_kafka(sources, expected):
    assert without_kafka(sources) == expected


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 5), longs), max_size=30),
    st.lists(st.tuples(st.integers(1, 5), longs), max_size=30),
)
def test_final_acks_cancel_every_input_edge_and_child_edge_once_per_root(inputs, children):
    roots = np.array([r for r, _ in children], dtype=np.int64)
    xors = np.array([x for _, x in children], dtype=np.int64)
    acks = final_acks(inputs, (roots, xors))
    assert len({root for root, _ in acks}) == len(acks), "one ACK entry per root"
    expected: dict[int, int] = {}
    for root, val in [*inputs, *children]:
        expected[root] = expected.get(root, 0) ^ val
    assert dict(acks) == expected
    acked, vals = final_ack_columns(inputs, (roots, xors))  # the spout's columns: the same entries
    assert list(zip(acked, vals)) == acks


def test_rows_failed_with_rk_fail_are_read_from_the_observed_metrics():
    metrics = {
        "failed": 3,
        "rows": [
            {"roots": [12, 13], "reason": "no such customer", "retry": True},
            {"roots": [14], "reason": None, "retry": False},
            {"roots": [], "reason": None, "retry": True},  # untracked: counted, fails no tree
        ],
    }
    assert failed_from_metrics(metrics, what="test") == (
        3,
        [
            FailedRow(roots=(12, 13), reason="no such customer", retry=True),
            FailedRow(roots=(14,), reason=None, retry=False),
            FailedRow(roots=(), reason=None, retry=True),
        ],
    )
    assert failed_from_metrics({"failed": 0, "rows": None}, what="test") == (0, [])


@pytest.mark.parametrize("metrics", [{}, {"failed": 1}])
def test_metrics_without_the_failed_rows_fail_the_batch(metrics):
    # Acking the inputs without failing those rows' roots would complete trees the transform failed.
    with pytest.raises(StateError, match="spark output: test"):
        failed_from_metrics(metrics, what="test")
