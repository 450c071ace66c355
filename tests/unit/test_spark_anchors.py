"""The pure parts of the Spark shell: header decoding for SparkBolt, offsets JSON for Spark's
Kafka reader (no Spark started)."""

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.spark.anchors import decode_anchors_header
from reliable_kafka.spark.checkpoint import parse_kafka_offsets
from reliable_kafka.spark.job import offsets_json

ids = st.integers(min_value=-(2**63), max_value=2**63 - 1).filter(lambda v: v != 0)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.dictionaries(ids, longs, min_size=1, max_size=20))
def test_header_decodes_to_the_pairs_it_was_encoded_from(anchors):
    headers = [("trace", b"x"), (codec.ANCHORS_HEADER, bytearray(codec.encode_anchors(anchors)))]
    pairs, error = decode_anchors_header(headers)
    assert error is None and dict(pairs) == anchors


def test_no_header_means_untracked():
    assert decode_anchors_header([("trace", b"x")]) == (None, None)
    assert decode_anchors_header(None) == (None, None)


def test_last_header_wins_as_in_the_python_bolt():
    first, last = codec.encode_anchors({1: 2}), codec.encode_anchors({3: 4})
    pairs, _ = decode_anchors_header([(codec.ANCHORS_HEADER, first), (codec.ANCHORS_HEADER, last)])
    assert pairs == [(3, 4)]


@given(st.binary(max_size=40))
def test_a_header_that_does_not_decode_is_reported_never_raised(raw):
    pairs, error = decode_anchors_header([(codec.ANCHORS_HEADER, raw)])
    assert (pairs is None) == (error is not None)


def test_undecodable_header_names_the_reason():
    pairs, error = decode_anchors_header([(codec.ANCHORS_HEADER, b"\x01\xff\xff")])
    assert pairs is None and "anchors" in error


@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["a", "b.c", "t-1"]), st.integers(0, 99)), st.integers(-2, 2**62), max_size=12
    )
)
def test_offsets_json_is_what_the_checkpoint_parser_reads(offsets):
    assert parse_kafka_offsets(offsets_json(offsets)) == offsets
