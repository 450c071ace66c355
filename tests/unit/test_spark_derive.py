"""Root and edge derivation for Spark batches (reliable_kafka.spark.derive), without Spark.

The pinned values were computed by Spark 4.2.0's ``F.xxhash64`` (and ``root_column``/
``edge_column``); tests/integration/test_spark_spout.py checks the port against Spark again.
"""

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.spark.derive import (
    ZERO_REPLACEMENT,
    derive_edge,
    derive_root,
    spark_xxhash64,
    xxh64,
)

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
topics = st.text(min_size=1, max_size=60)
partitions = st.integers(min_value=0, max_value=10_000)
offsets = st.integers(min_value=0, max_value=2**62)
attempts = st.integers(min_value=1, max_value=100)


def test_xxh64_reference_vectors():
    # From the xxHash reference implementation (seed 0).
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc", 0) == 0x44BC2CF5AD770999


def test_spark_xxhash64_matches_values_spark_computed():
    assert spark_xxhash64(("string", "abc")) == 1423657621850124518
    assert spark_xxhash64(("long", 1)) == -7001672635703045582
    assert spark_xxhash64(("int", 1)) == -6698625589789238999
    assert spark_xxhash64(("string", "a" * 40)) == -8273737738657618755  # the 32-byte stripe path


def test_derived_ids_match_values_spark_computed():
    assert derive_root(7, "orders", 3, 1234567, 2) == 1285762449740019174
    assert derive_edge(7, "orders", 3, 1234567, 2) == 4703857042546730475
    assert derive_root(-42, "orders", 3, 1234567, 2) == 5881849138223660185


def test_nulls_are_skipped_as_spark_does():
    assert spark_xxhash64(("long", 5), ("string", None)) == spark_xxhash64(("long", 5))


@given(longs, topics, partitions, offsets, attempts)
def test_ids_are_deterministic_signed_64_bit_and_never_zero(salt, topic, partition, offset, attempt):
    root = derive_root(salt, topic, partition, offset, attempt)
    edge = derive_edge(salt, topic, partition, offset, attempt)
    assert root == derive_root(salt, topic, partition, offset, attempt)
    assert root != 0 and edge != 0
    assert -(2**63) <= root < 2**63 and -(2**63) <= edge < 2**63
    assert root != edge


@given(longs, topics, partitions, offsets, attempts)
def test_another_attempt_or_salt_gives_another_root(salt, topic, partition, offset, attempt):
    root = derive_root(salt, topic, partition, offset, attempt)
    assert root != derive_root(salt, topic, partition, offset, attempt + 1)
    assert root != derive_root(salt ^ 1, topic, partition, offset, attempt)
    assert root != derive_root(salt, topic, partition, offset + 1, attempt)


def test_zero_hash_is_replaced(monkeypatch):
    import reliable_kafka.spark.derive as derive

    monkeypatch.setattr(derive, "spark_xxhash64", lambda *values: 0)
    assert ZERO_REPLACEMENT != 0
    assert derive._derive(0, "t", 0, 0, 1, 1) == ZERO_REPLACEMENT
