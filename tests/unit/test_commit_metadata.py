"""Commit metadata codec: round trip, truncation to a prefix that fits, malformed input."""

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.core.commit_metadata import (
    DEFAULT_MAX_BYTES,
    PREFIX,
    decode_done_above,
    decode_done_ranges,
    encode_done_above,
)
from reliable_kafka.errors import DecodeError, ReliableKafkaError


@st.composite
def done_sets(draw, max_runs=60, max_length=300):
    """A commit point and done offsets around it: runs separated by gaps, as a spout leaves them."""
    commit_point = draw(st.integers(0, 2**62))
    offsets = []
    cursor = commit_point - draw(st.integers(0, 3))  # a few at or below the point: never encoded
    for _ in range(draw(st.integers(0, max_runs))):
        cursor += draw(st.one_of(st.integers(1, 3), st.integers(1, 10**6)))
        length = draw(st.one_of(st.integers(1, 4), st.integers(1, max_length)))
        offsets.extend(range(cursor, cursor + length))
        cursor += length
    draw(st.randoms(use_true_random=False)).shuffle(offsets)
    return commit_point, offsets


def _expected(commit_point, offsets):
    return sorted({o for o in offsets if o > commit_point})


@given(done_sets())
def test_round_trip(case):
    commit_point, offsets = case
    text, truncated = encode_done_above(commit_point, offsets, max_bytes=1 << 20)
    assert not truncated
    assert decode_done_above(commit_point, text) == _expected(commit_point, offsets)
    ranges = decode_done_ranges(commit_point, text)
    assert [o for r in ranges for o in r] == _expected(commit_point, offsets)


@given(done_sets(max_runs=150, max_length=20), st.integers(0, 300))
def test_truncation_keeps_a_prefix_that_fits(case, max_bytes):
    commit_point, offsets = case
    full = _expected(commit_point, offsets)
    text, truncated = encode_done_above(commit_point, offsets, max_bytes=max_bytes)
    assert len(text.encode()) <= max_bytes
    decoded = decode_done_above(commit_point, text, max_offsets=10**9)
    assert decoded == full[: len(decoded)]
    assert truncated == (decoded != full)
    # More room never keeps less.
    bigger, _ = encode_done_above(commit_point, offsets, max_bytes=max_bytes + 16)
    assert len(decode_done_above(commit_point, bigger, max_offsets=10**9)) >= len(decoded)


def test_default_cap_stays_under_kafkas_4096_bytes_and_many_runs_get_truncated():
    offsets = range(1001, 1_000_000, 2)  # every other offset: one run each
    text, truncated = encode_done_above(1000, offsets)
    assert truncated and len(text) <= DEFAULT_MAX_BYTES
    decoded = decode_done_above(1000, text)
    assert len(decoded) > 1000 and decoded == list(offsets)[: len(decoded)]


def test_last_kept_run_may_be_shortened_to_fit():
    # One huge run needs a 3-byte length; 6 characters hold 4 bytes: point, gap, 2 bytes of length.
    text, truncated = encode_done_above(0, range(1, 1_000_001), max_bytes=len(PREFIX) + 6)
    assert truncated
    assert decode_done_above(0, text) == list(range(1, 128**2 + 1))


def test_layout_is_commit_point_then_gap_and_length_varints():
    text, truncated = encode_done_above(100, [110, 103, 102, 104, 100, 7, 103])
    assert not truncated and text == "rk1:ZAECBAA"
    payload = base64.urlsafe_b64decode(text[len(PREFIX) :] + "=" * (-len(text) % 4))
    # point 100; cursor 101: run 102..104 -> gap 1, len-1 2; cursor 106: run 110 -> gap 4, len-1 0
    assert list(payload) == [100, 1, 2, 4, 0]


def test_nothing_above_the_commit_point_encodes_to_empty():
    assert encode_done_above(50, []) == ("", False)
    assert encode_done_above(50, [1, 49, 50]) == ("", False)
    assert encode_done_above(50, [52], max_bytes=5) == ("", True)  # nothing fits: say so


@pytest.mark.parametrize("metadata", [None, ""])
def test_empty_metadata_decodes_to_nothing(metadata):
    assert decode_done_above(7, metadata) == []


def test_large_offsets_near_the_int64_limit():
    top = 2**63 - 1
    offsets = [top - 5, top - 4, top]
    text, _ = encode_done_above(top - 10, offsets)
    assert decode_done_above(top - 10, text) == offsets


@pytest.mark.parametrize(
    "metadata, reason",
    [
        ("spark-checkpoint-42", "no 'rk1:' prefix"),
        ("rk2:AAAA", "unsupported version"),
        ("rk1:ab+/", "not unpadded urlsafe base64"),
        ("rk1:ZAE=", "not unpadded urlsafe base64"),
        ("rk1:A", "not unpadded urlsafe base64"),
        ("rk1:", "empty payload"),
        ("rk1:gA", "ends inside a varint"),  # 0x80
        ("rk1:ZAE", "ends inside a run"),  # 100, 1
        ("rk1:" + base64.urlsafe_b64encode(b"\xff" * 10 + b"\x01").decode().rstrip("="), "longer than 64 bits"),
        ("rk1:ZQECBAA", "written for commit point 101"),  # 101 written, 100 asked
    ],
)
def test_malformed_metadata_raises_decode_error(metadata, reason):
    with pytest.raises(DecodeError) as caught:
        decode_done_above(100, metadata)
    assert reason in str(caught.value)
    assert isinstance(caught.value, ReliableKafkaError) and isinstance(caught.value, ValueError)
    assert caught.value.raw == metadata.encode()


def test_offsets_beyond_int64_are_rejected():
    payload = bytes([0]) + bytes([0xFF] * 8 + [0x7F]) + bytes([1])  # point 0, gap 2**63 - 1, len 2
    text = PREFIX + base64.urlsafe_b64encode(payload).decode().rstrip("=")
    with pytest.raises(DecodeError, match="64-bit offset range"):
        decode_done_above(0, text)


def test_too_many_offsets_is_a_decode_error_but_ranges_still_decode():
    text, _ = encode_done_above(0, range(1, 1_000_101))
    with pytest.raises(DecodeError, match="max_offsets"):
        decode_done_above(0, text)
    assert decode_done_ranges(0, text) == [range(1, 1_000_101)]


@given(st.text(max_size=40), st.integers(0, 2**40))
def test_arbitrary_text_decodes_or_raises_decode_error(text, commit_point):
    for candidate in (text, PREFIX + text):
        try:
            decoded = decode_done_above(commit_point, candidate, max_offsets=10**4)
        except DecodeError:
            continue
        assert decoded == sorted(set(decoded))
        assert all(o > commit_point for o in decoded)


@given(st.binary(max_size=30), st.integers(0, 200))
def test_arbitrary_payload_decodes_or_raises_decode_error(payload, commit_point):
    text = PREFIX + base64.urlsafe_b64encode(payload).decode().rstrip("=")
    try:
        decoded = decode_done_above(commit_point, text, max_offsets=10**4)
    except DecodeError:
        return
    assert decoded == sorted(set(decoded)) and all(o > commit_point for o in decoded)
    # Whatever decodes re-encodes to the same offsets.
    again, _ = encode_done_above(commit_point, decoded)
    assert decode_done_above(commit_point, again, max_offsets=10**4) == decoded


def test_invalid_arguments():
    with pytest.raises(ValueError):
        encode_done_above(-1, [1])
    with pytest.raises(ValueError):
        encode_done_above(0, [1], max_bytes=-1)
