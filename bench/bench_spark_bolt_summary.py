"""A SparkBolt batch's driver work on its inputs: the per-record path (collect every exploded
(root, edge) pair with topic/partition/offset as Rows, fold in Python loops) against the columnar
one (``input_summary``: Spark folds per root and per partition, the driver collects one row).

Both on the same persisted DataFrame of ``--records`` inputs (one anchor each, as from a spout),
alternating, best of ``--repeat``. Prints the driver's CPU seconds (this process) and wall seconds
per batch; asserts only that both give the same acks. Usage:
``PYTHONPATH=. python bench/bench_spark_bolt_summary.py [--records N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from reliable_kafka.spark import spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE
from reliable_kafka.spark.bolt import batch_inputs, input_summary
from reliable_kafka.spark.job import final_acks

NO_CHILDREN = (np.empty(0, np.int64), np.empty(0, np.int64))


def per_record(inputs):
    """What ``SparkBolt._on_stream_batch`` did before: Rows to the driver, loops over them."""
    from pyspark.sql import functions as F

    summary = inputs.select(F.explode_outer("anchors").alias("pair"), "topic", "partition", "offset").collect()
    pairs = [(row.pair.root, row.pair.edge) for row in summary if row.pair is not None]
    ends: dict[tuple[str, int], int] = {}
    for row in summary:
        key = (row.topic, row.partition)
        ends[key] = max(ends.get(key, 0), row.offset + 1)
    len({(row.topic, row.partition, row.offset) for row in summary})
    return final_acks(pairs, NO_CHILDREN)


def columnar(inputs):
    return final_acks(batch_inputs(input_summary(inputs).collect()[0]).pairs, NO_CHILDREN)


def measure(function, inputs, repeat: int) -> tuple[float, float, list]:
    best_cpu = best_wall = float("inf")
    result: list = []
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        result = function(inputs)
        best_cpu, best_wall = min(best_cpu, time.process_time() - cpu), min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    spark = spark_session("rk-bench-spark-bolt-summary", master="local[2]")
    try:
        rng = random.Random(1)
        rows = [("words", i % 4, i // 4, [(rng.getrandbits(63), rng.getrandbits(63))]) for i in range(args.records)]
        inputs = spark.createDataFrame(rows, f"topic string, partition int, offset long, anchors {ANCHORS_TYPE}")
        inputs = inputs.repartition(4).cache()
        inputs.count()
        columnar(inputs)  # warm up both (JIT, plan caches)
        per_record(inputs)
        old = measure(per_record, inputs, args.repeat)
        new = measure(columnar, inputs, args.repeat)
        assert sorted(old[2]) == sorted(new[2]), "the two paths disagree"
        print(f"{args.records} inputs, best of {args.repeat}:")
        print(f"  per-record collect: driver CPU {old[0]:.3f} s, wall {old[1]:.3f} s")
        print(f"  columnar summary:   driver CPU {new[0]:.3f} s, wall {new[1]:.3f} s")
        print(f"  driver CPU ratio {old[0] / max(new[0], 1e-9):.1f}x, wall ratio {old[1] / max(new[1], 1e-9):.1f}x")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
