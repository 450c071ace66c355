"""Root and edge ids derived from a per-batch salt and a record's coordinates (docs/design.md section 7.1).

Spark may compute a batch's DataFrame more than once (a cache eviction, a retried stage, a second
action). Ids drawn at random inside it would differ between computations, and the INIT the driver
sent would name roots the writing tasks never saw. Ids are therefore a 64-bit hash, Spark's
``xxhash64``, of ``(salt, topic, partition, offset, attempt, tag)``: the same record in the same
batch gets the same ids however often it is recomputed, while a fresh random salt per batch keeps
ids of different batches (and of a redelivery) unrelated. A hash of 0 is replaced, ids are never 0.

:func:`derive_root` / :func:`derive_edge` compute the same values in plain Python (a port of
xxHash64 as Spark applies it: seed 42, chained over the columns), so the driver and tests can
check what Spark computed. :func:`derive_ids` computes a partition's run of offsets at once in
NumPy: the Spark spout's driver derives a batch's ids from its offset ranges, collecting nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from reliable_kafka.errors import ArgumentError

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "ROOT_TAG",
    "EDGE_TAG",
    "CHILD_TAG",
    "ZERO_REPLACEMENT",
    "xxh64",
    "spark_xxhash64",
    "derive_root",
    "derive_edge",
    "derive_child_edge",
    "derive_ids",
    "salt_sql",
    "id_sql",
    "root_column",
    "edge_column",
]

ROOT_TAG = 1
EDGE_TAG = 2
CHILD_TAG = 3  # child edges of output rows (reliable_kafka.spark.writer.write_in_jvm)
ZERO_REPLACEMENT = 0x2545F4914F6CDD1D  # any fixed non-zero value; a hash of 0 has odds 2^-64

_M = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_SPARK_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _merge(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _M


def xxh64(data: bytes, seed: int) -> int:
    """xxHash64 of ``data`` (unsigned result), as Spark's ``XXH64.hashUnsafeBytes``."""
    seed &= _M
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h = (_rotl(h ^ _round(0, k), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl(h ^ (k * _P1 & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5 & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def _signed(value: int) -> int:
    return value - (1 << 64) if value & (1 << 63) else value


def spark_xxhash64(*values: tuple[str, object]) -> int:
    """``F.xxhash64`` over typed values ``("long"|"int"|"string", value)``; None is skipped."""
    h = _SPARK_SEED
    for kind, value in values:
        if value is None:
            continue
        if kind == "long":
            data = struct.pack("<q", value)
        elif kind == "int":
            data = struct.pack("<i", value)
        elif kind == "string":
            data = str(value).encode("utf-8")
        else:
            raise ArgumentError(f"spark_xxhash64: unsupported type {kind!r}")
        h = xxh64(data, h)
    return _signed(h)


def _derive(salt: int, topic: str, partition: int, offset: int, attempt: int, tag: int) -> int:
    h = spark_xxhash64(
        ("long", salt), ("string", topic), ("int", partition), ("long", offset), ("int", attempt), ("int", tag)
    )
    return h if h != 0 else ZERO_REPLACEMENT


def derive_root(salt: int, topic: str, partition: int, offset: int, attempt: int) -> int:
    """The root id Spark derives for the record at ``topic[partition]@offset`` (Python port)."""
    return _derive(salt, topic, partition, offset, attempt, ROOT_TAG)


def derive_edge(salt: int, topic: str, partition: int, offset: int, attempt: int) -> int:
    """The spout edge id (the INIT val) Spark derives for the record (Python port)."""
    return _derive(salt, topic, partition, offset, attempt, EDGE_TAG)


def derive_child_edge(salt: int, row_id: int, root: int) -> int:
    """The child edge Spark draws for output row ``row_id`` in the tree of ``root`` (Python port
    of ``writer.child_edges``)."""
    h = spark_xxhash64(("long", salt), ("long", row_id), ("long", root), ("int", CHILD_TAG))
    return h if h != 0 else ZERO_REPLACEMENT


_U = np.uint64


def _rotl_vec(x: np.ndarray, r: int) -> np.ndarray:
    rotated: np.ndarray = (x << _U(r)) | (x >> _U(64 - r))  # NumPy types shifts of uint64 arrays as Any
    return rotated


def _fmix_vec(h: np.ndarray) -> np.ndarray:
    h ^= h >> _U(33)
    h *= _U(_P2)
    h ^= h >> _U(29)
    h *= _U(_P3)
    h ^= h >> _U(32)
    return h


def _hash_long_vec(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashLong`` of int64 ``values`` under uint64 ``seeds`` (arrays; wrapping arithmetic)."""
    h = seeds + _U((_P5 + 8) & _M)
    h ^= _rotl_vec(values.astype(np.uint64) * _U(_P2), 31) * _U(_P1)
    return _fmix_vec(_rotl_vec(h, 27) * _U(_P1) + _U(_P4))


def _hash_int_vec(value: int, seeds: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashInt`` of one int under uint64 ``seeds``."""
    h = seeds + _U((_P5 + 4) & _M)
    h ^= _U(((value & 0xFFFFFFFF) * _P1) & _M)
    return _fmix_vec(_rotl_vec(h, 23) * _U(_P2) + _U(_P3))


def _signed_nonzero(h: np.ndarray) -> np.ndarray:
    ids = h.view(np.int64)
    ids[ids == 0] = _signed(ZERO_REPLACEMENT)
    return ids


def derive_ids(
    salt: int, topic: str, partition: int, offsets: Sequence[int] | np.ndarray, attempt: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(roots, edges) as int64 arrays for the records at ``offsets`` of ``topic[partition]``: the
    values :func:`derive_root` and :func:`derive_edge` give one by one (and Spark's
    :func:`root_column`/:func:`edge_column`), the offsets vectorised. Spark chains xxHash64 over the
    columns, so the hash of (salt, topic, partition) is computed once and only the rest per offset."""
    prefix = _SPARK_SEED
    for data in (struct.pack("<q", salt), topic.encode("utf-8"), struct.pack("<i", partition)):
        prefix = xxh64(data, prefix)
    with np.errstate(over="ignore"):
        seeds = _hash_long_vec(np.asarray(offsets, dtype=np.int64), np.full(len(offsets), prefix, dtype=np.uint64))
        seeds = _hash_int_vec(attempt, seeds)
        return _signed_nonzero(_hash_int_vec(ROOT_TAG, seeds)), _signed_nonzero(_hash_int_vec(EDGE_TAG, seeds))


def salt_sql(salt: int) -> str:
    """SQL for the salt as xxhash64 takes it: its 8 little-endian bytes, a binary literal, which
    hashes as the bigint does (``XXH64.hashLong`` is ``hashUnsafeBytes`` of those bytes). Spark's
    generated code holds a bigint literal inline, so a new salt per batch meant compiling the
    batch's stages anew (measured about 100 ms a stage); a binary literal is passed to the compiled
    code as a reference, which is reused."""
    return f"X'{struct.pack('<q', salt).hex()}'"


def id_sql(salt: int, tag: int, attempt: str = "`attempt`") -> str:
    """SQL of the id ``tag`` (:data:`ROOT_TAG`, :data:`EDGE_TAG`) over columns topic, partition,
    offset and the expression ``attempt`` (a column, or a literal such as ``1``)."""
    h = (
        f"xxhash64({salt_sql(salt)}, CAST(`topic` AS STRING), CAST(`partition` AS INT), "
        f"CAST(`offset` AS BIGINT), CAST({attempt} AS INT), CAST({tag} AS INT))"
    )
    return f"coalesce(nullif({h}, 0), CAST({ZERO_REPLACEMENT} AS BIGINT))"


def _column(salt: int, tag: int) -> Column:
    from pyspark.sql import functions as F

    # SQL text: one py4j call, where a Column tree costs dozens (each slow on a busy driver).
    return F.expr(id_sql(salt, tag))


def root_column(salt: int) -> Column:
    """Spark column of root ids over a DataFrame with topic, partition, offset, attempt."""
    return _column(salt, ROOT_TAG)


def edge_column(salt: int) -> Column:
    """Spark column of spout edge ids (see :func:`root_column`)."""
    return _column(salt, EDGE_TAG)
