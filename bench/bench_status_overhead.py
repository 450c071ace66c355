"""What the operators' hooks cost on the tuple path, in CPU time per tree and per tuple.

Spouts: the in-flight tracker's emit + COMPLETED round, with the complete-latency histogram as
shipped and with ``observe`` replaced by a no-op (the difference is the hook's cost; the extra
clock read per emit is in both). Bolts: a handler call timed with two ``perf_counter`` calls and
one ``observe``, against the bare call. CPU seconds of this process (steadier than wall time on a
shared machine); prints figures, asserts nothing. Usage: ``python bench/bench_status_overhead.py [--n N]``.
"""

from __future__ import annotations

import argparse
import time

from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.core.tracker import InFlightTracker


class _NoHistogram(LatencyHistogram):
    def observe(self, seconds: float) -> None:
        pass


def _trees(n: int, *, observe: bool) -> float:
    tracker = InFlightTracker(max_pending=None, message_timeout_ms=None)
    if not observe:
        tracker.complete_latency = _NoHistogram()
    started = time.process_time()
    for offset in range(n):
        root = tracker.emitted(("t", 0), offset)
        tracker.on_outcome(root, OutcomeKind.COMPLETED)
    return time.process_time() - started


def _calls(n: int, *, timed: bool) -> float:
    histogram = LatencyHistogram()

    def handler(value):
        return value

    started = time.process_time()
    if timed:
        for i in range(n):
            begin = time.perf_counter()
            handler(i)
            histogram.observe(time.perf_counter() - begin)
    else:
        for i in range(n):
            handler(i)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300_000)
    args = parser.parse_args()
    for round_ in range(3):
        with_hook, without = _trees(args.n, observe=True), _trees(args.n, observe=False)
        timed, bare = _calls(args.n, timed=True), _calls(args.n, timed=False)
        print(
            f"round {round_ + 1}: spout tree (emit + COMPLETED) {1e6 * without / args.n:.2f} us, "
            f"+{1e6 * (with_hook - without) / args.n:.2f} us for complete latency | bolt handler call "
            f"+{1e6 * (timed - bare) / args.n:.2f} us for process latency"
        )


if __name__ == "__main__":
    main()
