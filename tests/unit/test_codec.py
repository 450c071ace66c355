"""Round trips and malformed input for the Avro contract (schemas/ + reliable_kafka.codec)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.codec import anchors as anchors_codec
from reliable_kafka.codec import envelope, outcome_batch
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import DecodeError, ReliableKafkaError

ids = st.integers(min_value=-(2**63), max_value=2**63 - 1).filter(lambda v: v != 0)
any_long = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.dictionaries(ids, any_long, max_size=100))
def test_anchors_round_trip(anchors):
    raw = codec.encode_anchors(anchors)
    assert raw[0] == codec.ANCHORS_VERSION == 2
    assert codec.decode_anchors(raw) == anchors
    assert codec.decode_anchors(bytearray(raw)) == anchors
    assert codec.decode_anchors(codec.encode_anchors(list(anchors.items()))) == anchors


@given(st.dictionaries(ids, any_long, max_size=20))
def test_anchors_v1_still_decode(anchors):
    raw = anchors_codec._encode_anchors_v1(anchors)
    assert raw[0] == 1
    assert codec.decode_anchors(raw) == anchors


def test_anchors_v2_exact_layout():
    # One pair: 0x02, zigzag(16) = 0x20, then root and edge as big-endian int64.
    raw = codec.encode_anchors({1: -1})
    assert raw == b"\x02\x20" + (1).to_bytes(8, "big") + b"\xff" * 8
    # Three pairs: L = 48, zigzag 96 = 0x60; ten pairs: L = 160, zigzag 320 = 0xc0 0x02.
    pairs = [(r, r * 1000) for r in range(-5, 5) if r]
    raw = codec.encode_anchors(pairs[:3])
    assert raw[:2] == b"\x02\x60" and len(raw) == 2 + 48
    raw = codec.encode_anchors(pairs + [(77, 78)])
    assert raw[:3] == b"\x02\xc0\x02" and len(raw) == 3 + 160
    assert raw[3:11] == (-5).to_bytes(8, "big", signed=True)
    assert raw[11:19] == (-5000).to_bytes(8, "big", signed=True)
    assert codec.encode_anchors({}) == b"\x02\x00" and codec.decode_anchors(b"\x02\x00") == {}


@given(st.dictionaries(ids, any_long, max_size=80))
def test_anchors_v2_body_is_the_avro_bytes_of_its_schema(anchors):
    # What the schema file promises: after the version byte, one Avro `bytes` value.
    import io
    import json
    from pathlib import Path

    import fastavro

    path = Path(__file__).resolve().parents[2] / "schemas" / "anchors_v2.avsc"
    schema = fastavro.parse_schema(json.loads(path.read_text()))
    raw = codec.encode_anchors(anchors)
    body = io.BytesIO(raw[1:])
    pairs = fastavro.schemaless_reader(body, schema, None)
    assert body.tell() == len(raw) - 1
    assert pairs == b"".join(
        r.to_bytes(8, "big", signed=True) + e.to_bytes(8, "big", signed=True) for r, e in anchors.items()
    )


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"\x02", "cut short"),
        (b"\x02\x20" + bytes(15), "truncated"),  # 16 announced, 15 present
        (b"\x02\x20" + (1).to_bytes(8, "big") + bytes(9), "trailing"),
        (b"\x02\x1e" + bytes(15), "not a multiple of 16"),  # L = 15
        (b"\x02\x01", "not a multiple of 16"),  # L = -1
        (b"\x02\x20" + bytes(16), "root id 0"),
        (b"\x02\x40" + ((3).to_bytes(8, "big") + bytes(8)) * 2, "appears twice"),
        (b"\x02" + b"\xff" * 11, "too long"),
        (b"\x02\x80\x02" + (1).to_bytes(8, "big") + bytes(8), "truncated"),  # L = 128
    ],
)
def test_anchors_v2_malformed(raw, reason):
    with pytest.raises(DecodeError, match=reason) as info:
        codec.decode_anchors(raw)
    assert info.value.raw == raw


def test_anchors_v2_many_pairs_use_the_same_checks():
    pairs = [(r, -r) for r in range(1, 200)]
    raw = codec.encode_anchors(pairs)
    assert codec.decode_anchors(raw) == dict(pairs)
    with pytest.raises(DecodeError, match="appears twice"):
        codec.decode_anchors(codec.encode_anchors(pairs + [(5, 1)]))
    with pytest.raises(DecodeError, match="root id 0"):
        codec.decode_anchors(codec.encode_anchors(pairs + [(0, 1)]))
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode_anchors(raw + b"\x00")


def test_anchors_encoder_rejects_ids_outside_int64():
    with pytest.raises(ValueError, match="64-bit"):
        codec.encode_anchors({2**63: 1})
    with pytest.raises(ValueError, match="64-bit"):
        codec.encode_anchors([(1, 1), (2, -(2**63) - 1)])


@settings(max_examples=500)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.binary(max_size=60).map(lambda b: b"\x02" + b),
        st.dictionaries(ids, any_long, max_size=8).flatmap(
            lambda a: st.tuples(st.just(codec.encode_anchors(a)), st.integers(0, 200), st.integers(0, 255)).map(
                lambda t: t[0][: t[1] % (len(t[0]) + 1)] + bytes([t[2]]) + t[0][t[1] % (len(t[0]) + 1) + 1 :]
            )
        ),
    )
)
def test_anchors_fuzz_never_raises_anything_but_decode_error(raw):
    try:
        anchors = codec.decode_anchors(raw)
    except DecodeError as error:
        assert error.raw == raw
    else:
        assert 0 not in anchors
        assert codec.decode_anchors(codec.encode_anchors(anchors)) == anchors


@given(
    sender=any_long,
    entries=st.lists(st.tuples(st.integers(0, 3), ids, any_long), max_size=600),
)
def test_ack_batch_round_trip(sender, entries):
    kinds = [k for k, _, _ in entries]
    roots = [r for _, r, _ in entries]
    vals = [v for _, _, v in entries]
    batch = codec.decode_ack_batch(codec.encode_ack_batch(sender, kinds, roots, vals))
    assert batch.sender == sender
    assert batch.kinds.dtype == np.uint8 and batch.roots.dtype == np.int64
    assert batch.kinds.tolist() == kinds
    assert batch.roots.tolist() == roots
    assert batch.vals.tolist() == vals


def test_ack_batch_layout_is_columns_of_little_endian_int64():
    raw = codec.encode_ack_batch(7, [1], [0x0102030405060708], [-1])
    assert raw[0] == codec.FORMAT_VERSION
    assert bytes([8, 7, 6, 5, 4, 3, 2, 1]) in raw  # the root, little-endian, inside the bytes field
    assert b"\xff" * 8 in raw


@given(spout=any_long, entries=st.lists(st.tuples(ids, st.sampled_from(list(OutcomeKind))), max_size=200))
def test_outcomes_round_trip(spout, entries):
    batch = codec.decode_outcomes(codec.encode_outcomes(spout, [r for r, _ in entries], [k for _, k in entries]))
    assert batch.spout == spout
    assert batch.roots.tolist() == [r for r, _ in entries]
    assert batch.kinds.tolist() == [int(k) for _, k in entries]


@given(spout=any_long, entries=st.lists(st.tuples(any_long, st.sampled_from(list(OutcomeKind))), max_size=300))
def test_outcomes_bytes_are_fastavros(spout, entries):
    # the NumPy writer must write exactly the Avro bytes (readers of any version decode them)
    roots, kinds = [r for r, _ in entries], [int(k) for _, k in entries]
    expected = outcome_batch._encode_outcomes_fastavro(spout, roots, kinds)
    assert codec.encode_outcomes(spout, roots, kinds) == expected
    assert codec.encode_outcomes(spout, np.array(roots, dtype=np.int64), np.array(kinds, dtype=np.uint8)) == expected


@pytest.mark.parametrize("root", [0, 1, -1, 63, 64, -64, -65, 2**63 - 1, -(2**63), 2**56, -(2**56) - 1])
def test_outcomes_bytes_at_varint_edges(root):
    assert codec.encode_outcomes(root, [root], [3]) == outcome_batch._encode_outcomes_fastavro(root, [root], [3])


def test_outcomes_refuse_unknown_kinds():
    with pytest.raises(ValueError, match="outcome kinds"):
        codec.encode_outcomes(1, [5], [4])
    with pytest.raises(ValueError, match="differ in length"):
        codec.encode_outcomes(1, [5, 6], [0])


@given(
    st.builds(
        codec.ParkedRecord,
        reason=st.text(max_size=50),
        attempts=st.integers(0, 1000),
        source_topic=st.text(min_size=1, max_size=30),
        source_partition=st.integers(0, 10_000),
        source_offset=st.integers(0, 2**62),
        source_timestamp_ms=st.integers(-1, 2**50),
        component=st.text(max_size=20),
        parked_at_ms=st.integers(0, 2**50),
        value_omitted=st.booleans(),
        original_bytes=st.integers(-1, 2**40),
    )
)
def test_parked_round_trip(parked):
    assert codec.decode_parked(codec.encode_parked(parked)) == parked


def test_parked_header_written_before_the_reference_fields_still_decodes():
    import io

    import fastavro

    first = envelope._schema("parked_record_first")
    buffer = io.BytesIO()
    buffer.write(b"\x01")
    fastavro.schemaless_writer(
        buffer,
        first,
        {
            "reason": "old",
            "attempts": 2,
            "source_topic": "t",
            "source_partition": 1,
            "source_offset": 9,
            "source_timestamp_ms": 5,
            "component": "spout",
            "parked_at_ms": 7,
        },
    )
    parked = codec.decode_parked(buffer.getvalue())
    assert parked == codec.ParkedRecord("old", 2, "t", 1, 9, 5, "spout", 7, value_omitted=False, original_bytes=-1)


def test_parked_stamps_wall_clock_when_unset():
    parked = codec.decode_parked(codec.encode_parked(codec.ParkedRecord("r", 0, "t", 0, 1)))
    assert parked.parked_at_ms > 1_600_000_000_000


DECODERS = [codec.decode_anchors, codec.decode_ack_batch, codec.decode_outcomes, codec.decode_parked]


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize(
    "raw, reason",
    [
        (None, "no bytes"),
        (b"", "empty"),
        (b"\x07abc", "unknown format version 7"),
        (b"\x01", "EOFError"),
        (b"\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", ""),
    ],
)
def test_malformed_bytes_raise_decode_error_with_raw(decode, raw, reason):
    with pytest.raises(DecodeError) as info:
        decode(raw)
    assert reason in str(info.value)
    assert info.value.raw == raw or raw is None
    assert isinstance(info.value, ReliableKafkaError) and isinstance(info.value, ValueError)


@settings(max_examples=300)
@given(st.binary(max_size=200))
@pytest.mark.parametrize("decode", DECODERS)
def test_random_bytes_never_raise_anything_but_decode_error(decode, raw):
    try:
        decode(raw)
    except DecodeError as error:
        assert error.raw == raw


def test_trailing_bytes_are_rejected():
    raw = anchors_codec._encode_anchors_v1({1: 2}) + b"\x00"
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode_anchors(raw)


def test_ack_batch_count_must_match_columns():
    good = codec.encode_ack_batch(1, [0, 1], [5, 6], [7, 8])
    # count is the second field: sender 1 is zigzag 0x02, then count 2 is 0x04; claim 3 instead
    bad = good[:2] + bytes([6]) + good[3:]
    with pytest.raises(DecodeError, match="count 3"):
        codec.decode_ack_batch(bad)


def test_anchors_reject_root_zero_and_repeated_roots():
    for encode in (codec.encode_anchors, anchors_codec._encode_anchors_v1):
        with pytest.raises(DecodeError, match="root id 0"):
            codec.decode_anchors(encode([(0, 5)]))
        with pytest.raises(DecodeError, match="twice"):
            codec.decode_anchors(encode([(3, 5), (3, 6)]))


def test_decode_error_can_be_placed_at_coordinates():
    with pytest.raises(DecodeError) as info:
        codec.decode_ack_batch(b"\x01")
    placed = info.value.at("t.acks", 3, 42)
    assert "t.acks[3]@42" in str(placed) and placed.raw == b"\x01"


def _ack_batch_by_fastavro(raw):
    """The ack batch as fastavro reads it (what decode_ack_batch did before reading in place)."""
    datum, _ = envelope.decode_datum("ack_batch", raw)
    return datum


@settings(max_examples=400)
@given(
    sender=any_long,
    entries=st.lists(st.tuples(st.integers(0, 255), any_long, any_long), max_size=40),
    cut=st.integers(0, 400),
    junk=st.binary(max_size=12),
    where=st.integers(0, 400),
)
def test_ack_batch_read_in_place_agrees_with_fastavro_on_good_and_damaged_bytes(sender, entries, cut, junk, where):
    good = codec.encode_ack_batch(sender, [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries])
    where = min(where, len(good))
    for raw in (good, good[:cut], good[:where] + junk + good[where:], good[:where] + junk + good[where + len(junk) :]):
        try:
            datum = _ack_batch_by_fastavro(raw)
        except DecodeError:
            datum = None
        try:
            batch = codec.decode_ack_batch(raw)
        except DecodeError:
            # fastavro may read it, but then its columns do not match its count
            assert (
                datum is None
                or (len(datum["kinds"]), len(datum["roots"]), len(datum["vals"]))
                != (datum["count"],) + (8 * datum["count"],) * 2
                or datum["count"] < 0
            )
            continue
        assert datum is not None, "read in place what fastavro refuses"
        assert batch.sender == datum["sender"] and len(batch) == datum["count"]
        assert batch.kinds.tobytes() == datum["kinds"] and batch.roots.tobytes() == datum["roots"]
        assert batch.vals.tobytes() == datum["vals"]


def _outcomes_by_fastavro(raw):
    """The outcome batch as fastavro reads it (what decode_outcomes did before reading with NumPy),
    except that a negative enum index is refused: fastavro reads index -1 as the last symbol."""
    datum, _ = envelope.decode_datum("outcome_batch", raw)
    indexes, _ = envelope.decode_datum("outcome_batch", raw, schema="outcome_batch_indexed")
    if any(e["kind"] < 0 for e in indexes["entries"]):
        raise DecodeError("outcome_batch", "negative kind index", raw)
    entries = datum["entries"]
    return datum["spout"], [e["root"] for e in entries], [int(OutcomeKind[e["kind"]]) for e in entries]


_outcome_entry = st.tuples(any_long, st.sampled_from(list(OutcomeKind)))
# short records go to fastavro, long ones are read with NumPy: both kinds, often
_outcome_entries = st.one_of(
    st.lists(_outcome_entry, max_size=outcome_batch._NUMPY_OUTCOMES - 1),
    st.lists(_outcome_entry, min_size=outcome_batch._NUMPY_OUTCOMES, max_size=120),
)


@settings(max_examples=400)
@given(
    spout=any_long,
    entries=_outcome_entries,
    cut=st.integers(0, 1400),
    junk=st.binary(max_size=12),
    where=st.integers(0, 1400),
)
def test_outcomes_read_with_numpy_agree_with_fastavro_on_good_and_damaged_bytes(spout, entries, cut, junk, where):
    good = codec.encode_outcomes(spout, [r for r, _ in entries], [k for _, k in entries])
    where = min(where, len(good))
    for raw in (good, good[:cut], good[:where] + junk + good[where:], good[:where] + junk + good[where + len(junk) :]):
        try:
            expected = _outcomes_by_fastavro(raw)
        except DecodeError:
            expected = None
        try:
            batch = codec.decode_outcomes(raw)
        except DecodeError:
            assert expected is None, "fastavro reads what decode_outcomes refuses"
            continue
        assert expected is not None, "read with NumPy what fastavro refuses"
        assert (batch.spout, batch.roots.tolist(), batch.kinds.tolist()) == expected
        assert batch.roots.dtype == np.int64 and batch.kinds.dtype == np.uint8


@pytest.mark.parametrize("count", [outcome_batch._NUMPY_OUTCOMES, 300])
def test_outcomes_read_with_numpy_at_varint_edges(count):
    edges = [0, 1, -1, 63, 64, -64, -65, 2**63 - 1, -(2**63), 2**56, -(2**56) - 1, 2**62, -(2**62) - 1]
    roots = (edges * count)[:count]
    kinds = [i % len(OutcomeKind) for i in range(count)]
    raw = codec.encode_outcomes(-(2**63), roots, kinds)
    batch = outcome_batch._outcomes_in_place(raw)
    assert batch is not None, "the encoder's layout is read with NumPy"
    assert (batch.spout, batch.roots.tolist(), batch.kinds.tolist()) == (-(2**63), roots, kinds)


def test_outcomes_in_other_valid_layouts_go_to_fastavro():
    """Two blocks, or a kind index beyond the symbols: not the encoder's layout, fastavro decides."""
    count = outcome_batch._NUMPY_OUTCOMES
    raw = codec.encode_outcomes(7, list(range(1, count + 1)), [0] * count)
    assert outcome_batch._outcomes_in_place(raw) is not None
    head = raw[:2]  # version byte, spout 7
    body = raw[3:-1]  # after the block count (one byte: zigzag 80), before the end marker
    half = 2 * (count // 2)  # the roots 1..count are one byte each: two bytes an entry
    split = head + envelope.zigzag_varint(count // 2) + body[:half] + envelope.zigzag_varint(count - count // 2)
    split += body[half:] + b"\x00"
    assert outcome_batch._outcomes_in_place(split) is None
    assert codec.decode_outcomes(split).roots.tolist() == list(range(1, count + 1))
    for last_kind, index in ((b"\x08", 4), (b"\x01", -1)):  # past the four symbols; negative (zigzag 1)
        unknown = raw[:-2] + last_kind + b"\x00"
        assert outcome_batch._outcomes_in_place(unknown) is None
        with pytest.raises(DecodeError, match=f"entry {count - 1}: kind index {index} "):
            codec.decode_outcomes(unknown)
    beyond_64_bits = raw[:-3] + b"\xff" * 9 + b"\x02" + raw[-2:]  # the last root: a 10-byte varint of 65 bits
    assert outcome_batch._outcomes_in_place(beyond_64_bits) is None
    padded = raw[:-3] + b"\x80" * 10 + b"\x00" + raw[-2:]  # the last root: 0 in 11 bytes
    assert outcome_batch._outcomes_in_place(padded) is None


def test_outcome_kinds_are_their_indexes():
    """The outcome listener maps kind values to members by indexing ``tuple(OutcomeKind)``."""
    assert [int(kind) for kind in OutcomeKind] == list(range(len(OutcomeKind)))
