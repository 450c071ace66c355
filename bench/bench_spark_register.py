"""A Spark spout's driver registering one micro-batch with its tracker (issue 11, target 2).

``register_ranges`` on ``--records`` offsets of one partition (ids derived in NumPy, the skip check,
the tracker's registration), as the driver does per stream batch; then the same batch completed
(``complete_many``), as the outcome thread does. Repeated ``--rounds`` times on one tracker that
starts with a committed offset and some offsets recorded done above it; prints the median CPU ms per
batch and us per record of each step. Prints figures, asserts nothing.

Usage: ``PYTHONPATH=. python bench/bench_spark_register.py [--records 25000] [--rounds 20]``
"""

from __future__ import annotations

import argparse
import statistics
import time

from reliable_kafka.config import Connection, Tracking
from reliable_kafka.spark.batch_roots import register_ranges
from reliable_kafka.spout.roots import RootOwner
from reliable_kafka.topology import TopologyTopics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    owner = RootOwner(
        component="bench", topics=TopologyTopics("b"), connection=Connection("-"), tracking=Tracking(max_pending=None)
    )
    tracker = owner.tracker
    tp = ("src", 0)
    tracker.assign(tp, committed=0, done_above=range(5, 50, 7))  # a few done above the commit: skipped
    register_ms, complete_ms = [], []
    start = 0
    for _ in range(args.rounds):
        ranges = {tp: (start, start + args.records)}
        t0 = time.process_time()
        entries, _skipped = register_ranges(owner, ranges, salt=start + 1)
        t1 = time.process_time()
        tracker.complete_many([root for root, _ in entries])
        t2 = time.process_time()
        register_ms.append((t1 - t0) * 1000)
        complete_ms.append((t2 - t1) * 1000)
        start += args.records
    assert tracker.commit_point(tp) == start and tracker.pending_roots() == 0  # the work really happened
    for name, values in (("register_ranges", register_ms), ("complete_many", complete_ms)):
        median = statistics.median(values)
        print(
            f"{name:16s} {median:8.2f} CPU ms per batch of {args.records:,} "
            f"({1000 * median / args.records:.3f} us/record)"
        )


if __name__ == "__main__":
    main()
