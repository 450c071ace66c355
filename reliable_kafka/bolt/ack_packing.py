"""A basic bolt's ACK entries, packed once per batch instead of one call per tuple.

The serial loop keeps, for each tuple it acks, the tuple's one-pair v2 ``rk-anchors`` value (18
bytes: version 2, length byte 32, root, edge, big-endian) and the tuple's ack val; after the batch
they are read as NumPy columns at once and added to the ack sender: ``ACK(root, edge ^ ack_val)``,
exactly the entries ``collector.ack`` would add (docs/design.md section 2). A tuple in several trees gets
one value per tree, made with :func:`pack_pair`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

from reliable_kafka.codec.anchors import ANCHORS_VERSION  # a one-pair header is read inline
from reliable_kafka.core.kinds import EventKind

if TYPE_CHECKING:
    from reliable_kafka.kafka.ack_sender import AckSender

__all__ = ["V2", "pack_pair", "unpack_pair", "ack_columns", "pack_acks"]

V2 = ANCHORS_VERSION  # with length byte 32 (one pair) and 16 bytes: one v2 pair, decoded inline
# a whole one-pair v2 value (version, length byte, root, edge) in one struct call; other lengths raise struct.error
_ONE_V2_PAIR = struct.Struct(">BBqq")
unpack_pair, _pack = _ONE_V2_PAIR.unpack, _ONE_V2_PAIR.pack
# the same layout as a NumPy record: a batch's one-pair values, joined, read as columns at once
_PAIR_RECORD = np.dtype([("version", "u1"), ("length", "u1"), ("root", ">i8"), ("edge", ">i8")])


def pack_pair(root: int, edge: int) -> bytes:
    """The one-pair v2 value of ``(root, edge)``."""
    return _pack(V2, 32, root, edge)


def ack_columns(pairs: list[bytes], owed: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """ACK entries as int64 columns: ``(root, edge ^ owed[i])`` for each one-pair v2 value
    ``pairs[i]`` (18 bytes each: version, length byte, root, edge, big-endian)."""
    read = np.frombuffer(b"".join(pairs), dtype=_PAIR_RECORD)
    roots, vals = read["root"].astype(np.int64), read["edge"].astype(np.int64)
    if any(owed):  # a tuple that emitted: the XOR of its children's edges (a count emits none)
        vals ^= np.array(owed, dtype=np.int64)
    return roots, vals


def pack_acks(acks: AckSender | None, pairs: list[bytes], owed: list[int]) -> None:
    """Add the batch's kept entries to ``acks`` (an AckSender; None: not started) and empty the lists."""
    if pairs and acks is not None:
        acks.extend(EventKind.ACK, *ack_columns(pairs, owed))
    pairs.clear()
    owed.clear()
