"""The transactional spout's commit metadata and its stable ids (pure parts)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.core.commit_metadata import DEFAULT_MAX_BYTES
from reliable_kafka.core.ids import derive_root, owner_id
from reliable_kafka.core.spout_state import decode_spout_state, encode_spout_state
from reliable_kafka.errors import DecodeError
from reliable_kafka.spout.reread import clusters as _clusters


@given(
    commit_point=st.integers(0, 2**40),
    gaps=st.lists(st.integers(1, 50), max_size=40),
    extra=st.integers(0, 1000),
    outcome_position=st.integers(0, 2**40),
    attempts=st.dictionaries(st.integers(0, 200), st.integers(2, 9), max_size=5),
)
def test_state_round_trips(commit_point, gaps, extra, outcome_position, attempts):
    done, offset = [], commit_point
    for gap in gaps:
        offset += gap
        done.append(offset)
    emitted_upto = offset + 1 + extra
    attempts = {commit_point + k: a for k, a in attempts.items()}
    failed = set(list(attempts)[::2])
    metadata, truncated = encode_spout_state(
        commit_point,
        done,
        emitted_upto=emitted_upto,
        outcome_position=outcome_position,
        attempts=attempts,
        failed=failed,
    )
    assert not truncated and len(metadata) <= DEFAULT_MAX_BYTES
    assert decode_spout_state(commit_point, metadata) == (done, emitted_upto, outcome_position, attempts, failed)


def test_state_truncates_the_done_set_but_keeps_positions():
    done = list(range(10, 200_000, 2))
    metadata, truncated = encode_spout_state(0, done, emitted_upto=300_000, outcome_position=7, attempts={})
    assert truncated and len(metadata) <= DEFAULT_MAX_BYTES
    kept, emitted_upto, outcome_position, _, _ = decode_spout_state(0, metadata)
    assert kept == done[: len(kept)] and emitted_upto == 300_000 and outcome_position == 7


@pytest.mark.parametrize(
    "metadata", ["", "rk1:", "someone else's", "rk1:|rkx:notanumber,1", "|rkx:1", "|rkx:1,2,3:4:5:6"]
)
def test_foreign_or_malformed_state_is_a_decode_error(metadata):
    with pytest.raises(DecodeError):
        decode_spout_state(0, metadata)


def test_ids_are_stable_non_zero_and_distinct_per_partition_offset_and_attempt():
    owner = owner_id("group", "topic", 3)
    assert owner == owner_id("group", "topic", 3) != owner_id("group", "topic", 4) != 0
    assert owner != owner_id("other", "topic", 3)
    roots = {derive_root(owner, offset, attempt) for offset in range(200) for attempt in (1, 2, 3)}
    assert len(roots) == 600 and 0 not in roots


def test_runs_keep_thousands_of_retried_records_small_and_overflow_truncates_without_error():
    attempts = {offset: 2 for offset in range(1000, 3000)}
    metadata, truncated = encode_spout_state(
        1000, [], emitted_upto=3000, outcome_position=5, attempts=attempts, failed=range(1000, 2000)
    )
    assert not truncated and len(metadata) < 100
    assert decode_spout_state(1000, metadata)[3:] == (attempts, set(range(1000, 2000)))
    scattered = {offset: 2 + offset % 2 for offset in range(0, 20_000, 3)}
    metadata, truncated = encode_spout_state(0, [], emitted_upto=20_000, outcome_position=5, attempts=scattered)
    assert truncated and len(metadata) <= DEFAULT_MAX_BYTES
    kept = decode_spout_state(0, metadata)[3]
    assert kept and all(scattered[o] == a for o, a in kept.items())


@given(st.sets(st.integers(0, 5000), max_size=200), st.integers(1, 600))
def test_reread_clusters_cover_every_offset_once_with_gaps_at_most_max(offsets, max_gap):
    runs = _clusters(sorted(offsets), max_gap=max_gap)
    assert [o for run in runs for o in run] == sorted(offsets)
    for run in runs:
        assert all(b - a <= max_gap for a, b in zip(run, run[1:]))
    for before, after in zip(runs, runs[1:]):
        assert after[0] - before[-1] > max_gap
