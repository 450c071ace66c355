"""The root index (``<topology>.roots``): which roots a spout gave each source record.

One record per source partition and send, key ``<topic>:<partition>``, value = format byte 1, the
spout's task id (int64 big-endian), then (offset, root) pairs as little-endian int64: 16 bytes per
root. Written by the spouts (:class:`reliable_kafka.spout.root_index.RootIndex`), read by
``reliable-kafka trace`` (:mod:`reliable_kafka.ops.trace`).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator

from reliable_kafka.errors import DecodeError

__all__ = ["ROOT_INDEX_FORMAT", "MAX_PAIRS_PER_RECORD", "encode_root_index", "decode_root_index"]

ROOT_INDEX_FORMAT = 1
MAX_PAIRS_PER_RECORD = 16_384  # 256 KB records, well under message.max.bytes (1 MB)


def encode_root_index(spout_id: int, pairs: array[int]) -> Iterator[bytes]:
    """The record values for ``pairs`` (offset, root, offset, root, ... as an ``array("q")``; byte-
    swapped in place on a big-endian machine), MAX_PAIRS_PER_RECORD pairs at most in each."""
    if sys.byteorder != "little":
        pairs.byteswap()
    head = bytes([ROOT_INDEX_FORMAT]) + struct.pack(">q", spout_id)
    raw, size = pairs.tobytes(), 16 * MAX_PAIRS_PER_RECORD
    for start in range(0, len(raw), size):
        yield head + raw[start : start + size]


def decode_root_index(raw: bytes | None) -> tuple[int, list[tuple[int, int]]]:
    """(spout task id, [(offset, root), ...]) of one index record (None, a record without a value:
    :class:`DecodeError`)."""
    if not raw or raw[0] != ROOT_INDEX_FORMAT or (len(raw) - 9) % 16:
        raise DecodeError("root index", "not format 1 or not whole (offset, root) pairs", raw)
    spout = struct.unpack(">q", raw[1:9])[0]
    values = array("q", raw[9:])
    if sys.byteorder != "little":
        values.byteswap()
    return spout, list(zip(values[0::2], values[1::2]))
