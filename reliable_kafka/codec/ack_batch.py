"""Ack-topic records: a batch of (kind, root, val) entries from one sender, as NumPy columns."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from reliable_kafka.codec.envelope import VERSION_BYTE, decode_datum, encode_datum, zigzag_at
from reliable_kafka.errors import ArgumentError, DecodeError

__all__ = ["AckBatch", "encode_ack_batch", "decode_ack_batch"]


@dataclass(frozen=True)
class AckBatch:
    """A decoded ack-topic record: entry i is ``(kinds[i], roots[i], vals[i])``."""

    sender: int
    kinds: np.ndarray  # uint8
    roots: np.ndarray  # int64
    vals: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.kinds)


def encode_ack_batch(sender: int, kinds: ArrayLike, roots: ArrayLike, vals: ArrayLike) -> bytes:
    """Pack entries (array-likes of equal length) into one ack-topic record value."""
    kinds = np.ascontiguousarray(kinds, dtype=np.uint8)
    roots = np.ascontiguousarray(roots, dtype="<i8")
    vals = np.ascontiguousarray(vals, dtype="<i8")
    if not (len(kinds) == len(roots) == len(vals)):
        raise ArgumentError(f"columns differ in length: {len(kinds)}, {len(roots)}, {len(vals)}")
    datum = {
        "sender": int(sender),
        "count": len(kinds),
        "kinds": kinds.tobytes(),
        "roots": roots.tobytes(),
        "vals": vals.tobytes(),
    }
    return encode_datum("ack_batch", datum)


def decode_ack_batch(raw: bytes | None) -> AckBatch:
    """Decode an ack-topic record value. Column lengths are checked against ``count``.

    Entry values (root 0, unknown kinds) are not judged here: the acker table counts and skips
    them, so one bad entry does not cost the good ones beside it.
    """
    if type(raw) is bytes and raw[:1] == VERSION_BYTE:
        try:  # the layout read directly: 3 varints and 3 byte strings, columns as NumPy views
            return _ack_batch_in_place(raw)
        except (IndexError, ValueError):
            pass  # not well formed: fastavro's reading below names the fault
    datum, raw = decode_datum("ack_batch", raw)
    count = datum["count"]
    if count < 0:
        raise DecodeError("ack_batch", f"negative count {count}", raw)
    sizes = (len(datum["kinds"]), len(datum["roots"]), len(datum["vals"]))
    if sizes != (count, 8 * count, 8 * count):
        raise DecodeError(
            "ack_batch",
            f"columns hold {sizes[0]}, {sizes[1]}, {sizes[2]} bytes; count {count} needs "
            f"{count}, {8 * count}, {8 * count}",
            raw,
        )
    return AckBatch(
        sender=datum["sender"],
        kinds=np.frombuffer(datum["kinds"], dtype=np.uint8),
        roots=np.frombuffer(datum["roots"], dtype="<i8").astype(np.int64, copy=False),
        vals=np.frombuffer(datum["vals"], dtype="<i8").astype(np.int64, copy=False),
    )


def _ack_batch_in_place(raw: bytes) -> AckBatch:
    """The Avro body of schemas/ack_batch.avsc read field by field (long sender, int count, then
    three ``bytes``: a zigzag varint length and the bytes), the columns as views of ``raw``.
    Raises ValueError (or IndexError, cut short) for anything but a well-formed record."""
    sender, pos = zigzag_at(raw, 1)
    count, pos = zigzag_at(raw, pos)
    if not 0 <= count < 2**31:
        raise ArgumentError("count")
    starts = []
    for width in (1, 8, 8):
        length, pos = zigzag_at(raw, pos)
        if length != width * count:
            raise ArgumentError("column length")
        starts.append(pos)
        pos += length
    if pos != len(raw):
        raise ArgumentError("trailing or missing bytes")
    return AckBatch(
        sender=sender,
        kinds=np.frombuffer(raw, np.uint8, count, starts[0]),
        roots=_int64_column(raw, count, starts[1]),
        vals=_int64_column(raw, count, starts[2]),
    )


def _int64_column(raw: bytes, count: int, start: int) -> np.ndarray:
    if sys.byteorder == "little":  # native int64 already: a view, no conversion call
        return np.frombuffer(raw, np.int64, count, start)
    return np.frombuffer(raw, "<i8", count, start).astype(np.int64)
