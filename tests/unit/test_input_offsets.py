"""A parallel bolt's per-partition input offsets (core.input_offsets): the commit point never passes
an offset not done, reaches the end once everything is done, and the metadata round trip lets a
restarted bolt skip exactly what was done above it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.core.commit_metadata import decode_done_above, encode_done_above
from reliable_kafka.core.input_offsets import InputOffsets
from reliable_kafka.errors import ArgumentError


@st.composite
def runs(draw):
    """A committed start, ascending offsets with gaps (compaction, markers), and a done order."""
    start = draw(st.integers(min_value=0, max_value=1000))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=0, max_size=40))
    offsets, at = [], start
    for gap in gaps:
        offsets.append(at)
        at += gap
    order = draw(st.permutations(offsets))
    cut = draw(st.integers(min_value=0, max_value=len(order)))
    return start, offsets, order[:cut]


@given(runs())
def test_the_commit_point_never_passes_an_offset_not_done(run):
    start, offsets, done = run
    tracked = InputOffsets(start)
    for offset in offsets:
        tracked.received(offset)
    finished: set[int] = set()
    for offset in done:
        tracked.done(offset)
        finished.add(offset)
        point = tracked.commit_point()
        assert point is not None
        assert all(o in finished for o in offsets if o < point), "committed past an offset not done"
        not_done = [o for o in offsets if o not in finished]
        assert point == (min(not_done) if not_done else offsets[-1] + 1), "the point lags the done prefix"
        assert tracked.done_above(point) == sorted(o for o in finished if o > point)
        assert tracked.in_flight == len(not_done)


@given(runs())
def test_a_restart_from_the_commit_and_its_metadata_skips_exactly_what_was_done(run):
    start, offsets, done = run
    tracked = InputOffsets(start)
    for offset in offsets:
        tracked.received(offset)
    for offset in done:
        tracked.done(offset)
    point = tracked.commit_point()
    assert point is not None
    metadata, truncated = encode_done_above(point, tracked.done_above(point))
    assert not truncated
    again = InputOffsets(point, decode_done_above(point, metadata))
    replayed = [o for o in offsets if o >= point and not again.skip(o)]
    assert replayed == [o for o in offsets if o >= point and o not in set(done)]


def test_nothing_known_commits_nothing_and_a_fresh_partition_commits_its_position():
    tracked = InputOffsets()
    assert tracked.commit_point() is None
    tracked.received(7)
    assert tracked.commit_point() == 7
    tracked.done(7)
    assert tracked.commit_point() == 8


def test_restored_offsets_right_above_the_point_move_it_once_seen():
    tracked = InputOffsets(10, [11, 12, 15])
    assert tracked.commit_point() == 10
    assert not tracked.skip(10)
    tracked.received(10)
    tracked.done(10)
    assert tracked.commit_point() == 13  # 11 and 12 were done by the earlier owner
    assert tracked.done_above() == [15]


def test_offsets_out_of_order_are_refused():
    tracked = InputOffsets(0)
    tracked.received(3)
    with pytest.raises(ArgumentError, match="not ascending"):
        tracked.received(3)
