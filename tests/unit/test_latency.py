"""The latency histogram and its quantiles (bucket interpolation, as histogram_quantile)."""

import bisect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.core.latency import BOUNDS_S, LatencyHistogram, quantile


def test_observations_land_in_the_bucket_of_their_upper_bound():
    histogram = LatencyHistogram()
    for seconds in (0.0005, 0.001, 0.0011, 0.3, 500.0):
        histogram.observe(seconds)
    counts = histogram.snapshot()["counts"]
    assert counts[0] == 2  # <= 1 ms (bounds are inclusive, as Prometheus' le)
    assert counts[1] == 1
    assert counts[BOUNDS_S.index(0.5)] == 1
    assert counts[-1] == 1  # above the last bound
    assert histogram.count == 5 and histogram.sum_s == pytest.approx(500.3026)


def test_no_observations_have_no_quantile():
    assert quantile(BOUNDS_S, [0] * (len(BOUNDS_S) + 1), 0.5) is None
    with pytest.raises(ValueError):
        quantile(BOUNDS_S, [1] * (len(BOUNDS_S) + 1), 0.0)


def test_quantile_interpolates_inside_the_bucket():
    bounds, counts = (1.0, 2.0), [0, 10, 0]  # ten observations in (1, 2]
    assert quantile(bounds, counts, 0.5) == pytest.approx(1.5)
    assert quantile(bounds, counts, 1.0) == pytest.approx(2.0)


@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=300), st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_the_quantile_lies_in_the_bucket_of_the_true_quantile(values, q):
    histogram = LatencyHistogram()
    for value in values:
        histogram.observe(value)
    estimate = quantile(histogram.bounds, histogram.counts, q)
    ordered = sorted(values)
    true = ordered[max(0, -(-int(q * len(ordered) * 1000) // 1000) - 1)]  # the ceil(q*n)-th value
    index = bisect.bisect_left(BOUNDS_S, true)
    lower = BOUNDS_S[index - 1] if index > 0 else 0.0
    upper = BOUNDS_S[index] if index < len(BOUNDS_S) else BOUNDS_S[-1]
    assert lower - 1e-9 <= estimate <= upper + 1e-9


@given(st.floats(0.0, 200.0), st.integers(0, 1000), st.lists(st.floats(0.0, 200.0), max_size=5))
def test_observe_n_is_observe_n_times(seconds, n, before):
    """A bolt's run of handler calls, each given the run's average: one search for all of them."""
    one, many = LatencyHistogram(), LatencyHistogram()
    for value in before:
        one.observe(value)
        many.observe(value)
    for _ in range(n):
        one.observe(seconds)
    many.observe_n(seconds, n)
    assert many.counts == one.counts and many.count == one.count
    assert many.sum_s == pytest.approx(one.sum_s)
