"""The pure parts of Spark's JVM output path (reliable_kafka.spark.writer), without Spark: the
Python port of the child edges and the driver's fold of final acks. The Spark SQL expressions are
checked against these in tests/integration/test_spark_sql_expressions.py."""

from functools import reduce

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.spark.derive import derive_child_edge
from reliable_kafka.spark.writer import fold_by_root

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
