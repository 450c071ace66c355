"""A latency histogram with fixed bucket bounds: cheap to update on the hot path, exported as is.

Complete latency (emit to COMPLETED, at spouts) and process latency (handler call, at bolts) go
into one of these; the status snapshot and the Prometheus exporter read it at their own pace, so
observing costs one ``bisect`` and one list increment. Pure: no clock, no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from reliable_kafka.errors import ArgumentError

__all__ = ["BOUNDS_S", "LatencyHistogram", "quantile"]

BOUNDS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
"""Upper bounds (seconds) of the buckets; one more bucket above the last holds everything else."""

_VECTOR_FROM = 64  # observe_many with NumPy from this many values (a bisect each costs ~0.1 us)


class LatencyHistogram:
    """Counts of observations per bucket (not cumulative), their number and their sum (seconds)."""

    __slots__ = ("bounds", "counts", "count", "sum_s")

    def __init__(self, bounds: Sequence[float] = BOUNDS_S) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def observe_n(self, seconds: float, n: int) -> None:
        """:meth:`observe` ``seconds`` ``n`` times (a bolt's run of handler calls timed together,
        each given its share: one search for the run)."""
        self.counts[bisect.bisect_left(self.bounds, seconds)] += n
        self.count += n
        self.sum_s += seconds * n

    def observe_many(self, seconds: Sequence[float]) -> None:
        """:meth:`observe` each of ``seconds`` (a bolt's batch: one call instead of one per tuple)."""
        counts, bounds = self.counts, self.bounds
        first = bounds[0]
        # the common case is all in the first bucket but a few (a busy machine's preempted call):
        # only those are searched (a batch of 500 with one such value: ~21 ns a value, NumPy's ~57)
        over = [value for value in seconds if value > first]
        counts[0] += len(seconds) - len(over)
        if len(over) >= _VECTOR_FROM:  # a slow handler's batch: one searchsorted instead of a bisect each
            found = np.bincount(np.searchsorted(bounds, over, side="left"), minlength=len(counts))
            for index in np.flatnonzero(found).tolist():
                counts[index] += int(found[index])
        else:
            for value in over:
                counts[bisect.bisect_left(bounds, value)] += 1
        self.count += len(seconds)
        self.sum_s += sum(seconds)

    def snapshot(self) -> dict[str, object]:
        """``{"bounds", "counts", "count", "sum_s"}``, a copy safe to keep while observing goes on."""
        return {"bounds": list(self.bounds), "counts": list(self.counts), "count": self.count, "sum_s": self.sum_s}


def quantile(bounds: Sequence[float], counts: Sequence[int], q: float) -> float | None:
    """The ``q``-quantile (0 < q <= 1) of bucket ``counts``, interpolated linearly inside its bucket
    (as Prometheus' ``histogram_quantile``); None when there are no observations. Observations
    above the last bound are reported as the last bound."""
    if not 0.0 < q <= 1.0:
        raise ArgumentError(f"quantile q must be in (0, 1], got {q}")
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, n in enumerate(counts):
        if n > 0 and seen + n >= rank:
            if index >= len(bounds):
                return float(bounds[-1])
            lower = bounds[index - 1] if index > 0 else 0.0
            return lower + (bounds[index] - lower) * (rank - seen) / n
        seen += n
    return float(bounds[-1])
