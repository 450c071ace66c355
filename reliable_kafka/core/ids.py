"""Tuple ids: random, non-zero, signed 64-bit integers (Avro ``long``), as in Storm.

Ids only need to be unpredictable enough that a subset of a tree's events XORs to zero by chance
with odds of about 2^-64; they need not be cryptographic. Each process draws from its own
generator, reseeded after ``fork`` so that forked workers (e.g. PySpark's Python workers) never
repeat their parent's ids.
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np

__all__ = [
    "new_id",
    "new_ids",
    "to_signed",
    "to_unsigned",
    "partition_for_root",
    "partitions_for_roots",
    "owner_id",
    "derive_root",
    "take_pooled_id",
]

_MASK64 = (1 << 64) - 1
_SIGN = 1 << 63

_rng = random.Random(os.urandom(32))
_np_rng = np.random.default_rng(int.from_bytes(os.urandom(16), "little"))


_POOL_SIZE = 1024
_pool: list[int] = []  # ids drawn in bulk, handed out by new_id (a list pop: ~0.05 us, a draw ~0.2)

# new_id() without its call, for the per-tuple loops (bench/bench_bolt_overhead.py): an id from the
# pool, IndexError when it is empty (then call new_id, which refills it). The list is never replaced.
take_pooled_id = _pool.pop


def _reseed() -> None:
    global _np_rng
    _rng.seed(os.urandom(32))
    _np_rng = np.random.default_rng(int.from_bytes(os.urandom(16), "little"))
    _pool.clear()  # the parent's undrawn ids are the parent's


os.register_at_fork(after_in_child=_reseed)


def to_signed(value: int) -> int:
    """Map any integer to the signed 64-bit range (two's complement)."""
    value &= _MASK64
    return value - (1 << 64) if value & _SIGN else value


def to_unsigned(value: int) -> int:
    """The unsigned 64-bit reading of a signed id."""
    return value & _MASK64


def new_id() -> int:
    """A fresh random non-zero signed 64-bit id (once per emit and per root: taken from a pool that
    :func:`new_ids` refills, 1024 at a time)."""
    try:
        return _pool.pop()
    except IndexError:
        _pool.extend(new_ids(_POOL_SIZE).tolist())
        return _pool.pop()


def new_ids(count: int) -> np.ndarray:
    """``count`` fresh random non-zero ids as an int64 array."""
    ids = _np_rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=count, dtype=np.int64, endpoint=True)
    zeros = ids == 0
    while zeros.any():
        ids[zeros] = _np_rng.integers(1, np.iinfo(np.int64).max, size=int(zeros.sum()), dtype=np.int64)
        zeros = ids == 0
    return ids


def partition_for_root(root: int, partitions: int) -> int:
    """The ack-topic partition of a root: ``root mod partitions``, reading the root unsigned."""
    return (root & _MASK64) % partitions


def partitions_for_roots(roots: np.ndarray, partitions: int) -> np.ndarray:
    """Vectorised :func:`partition_for_root` over an int64 array."""
    partitions_of: np.ndarray = (roots.view(np.uint64) % np.uint64(partitions)).astype(np.int64)
    return partitions_of


def owner_id(group_id: str, topic: str, partition: int) -> int:
    """The stable task id that owns a source partition's roots, whichever process reads it."""
    digest = hashlib.blake2b(f"{group_id}\x00{topic}\x00{partition}".encode(), digest_size=8).digest()
    return to_signed(int.from_bytes(digest, "little")) or 1


def derive_root(owner: int, offset: int, attempt: int) -> int:
    """The root of a transactional (or Spark) spout's record: a hash of its owner, offset and attempt,
    so that any process can find a record's roots without having seen them emitted."""
    digest = hashlib.blake2b(f"{owner}:{offset}:{attempt}".encode(), digest_size=8).digest()
    return to_signed(int.from_bytes(digest, "little")) or 1
