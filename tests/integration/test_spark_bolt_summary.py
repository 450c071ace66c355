"""The Spark bolt's batch summary (reliable_kafka.spark.bolt.input_summary), computed in Spark,
against the per-record Python the driver ran before (docs/design.md section 7.2: the driver handles batches in
columns): the same final acks, ends, and counts. Spark in local mode, no broker."""

from __future__ import annotations

import random

import numpy as np
import pytest

from reliable_kafka.spark import spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE
from reliable_kafka.spark.bolt import batch_inputs, input_summary
from reliable_kafka.spark.job import final_acks

pytestmark = pytest.mark.spark

SCHEMA = f"topic string, partition int, offset long, anchors {ANCHORS_TYPE}"


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-bolt-summary", master="local[2]")
    yield session
    session.stop()


def reference(records):
    """What the driver computed from collected rows before: pairs, untracked, ends, inputs."""
    pairs = [(root, edge) for *_, anchors in records for root, edge in anchors or []]
    untracked = sum(1 for *_, anchors in records if not anchors)
    ends: dict[tuple[str, int], int] = {}
    for topic, partition, offset, _ in records:
        ends[(topic, partition)] = max(ends.get((topic, partition), 0), offset + 1)
    return pairs, untracked, ends, len(records)


def random_records(rng: random.Random, n: int):
    roots = [rng.randint(-(2**63), 2**63 - 1) for _ in range(40)]
    records: list[tuple] = []
    offsets: dict[tuple[str, int], int] = {}
    for _ in range(n):
        key = (rng.choice(["a", "b"]), rng.randint(0, 2))
        offsets[key] = offsets.get(key, rng.randint(0, 1000)) + rng.randint(1, 3)
        kind = rng.random()
        if kind < 0.1:
            anchors = None  # no header: untracked
        elif kind < 0.15:
            anchors = []
        else:
            anchors = [(rng.choice(roots), rng.randint(-(2**63), 2**63 - 1)) for _ in range(rng.randint(1, 4))]
            if rng.random() < 0.1:
                anchors.append(anchors[0])  # the same pair twice cancels itself, as in an XOR fold
        records.append((*key, offsets[key], anchors))
    return records


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_summary_acks_and_counts_are_what_the_per_record_driver_computed(spark, seed):
    rng = random.Random(seed)
    records = random_records(rng, 3000)
    records.append(("a", 9, 5, [(7, 11), (7, 11)]))  # a root whose inputs cancel out: val 0, still acked
    df = spark.createDataFrame(records, SCHEMA).repartition(4)
    summary = batch_inputs(input_summary(df).collect()[0])

    pairs, untracked, ends, inputs = reference(records)
    child_roots = np.array([root for root, _ in pairs[::7]] + [123], dtype=np.int64)
    child_xors = np.array([rng.randint(-(2**63), 2**63 - 1) for _ in range(len(child_roots))], dtype=np.int64)
    children = (child_roots, child_xors)
    assert sorted(final_acks(summary.pairs, children)) == sorted(final_acks(pairs, children))
    assert (7, 0) in [tuple(p) for p in summary.pairs.tolist()]
    assert summary.acked == len(pairs)
    assert summary.untracked == untracked
    assert summary.ends == ends
    assert summary.inputs == inputs


def test_an_empty_batch_sums_up_to_nothing(spark):
    summary = batch_inputs(input_summary(spark.createDataFrame([], SCHEMA)).collect()[0])
    assert summary.pairs.shape == (0, 2)
    assert (summary.acked, summary.inputs, summary.untracked, summary.ends) == (0, 0, 0, {})
