"""The ``rk-anchors`` header: which tuple trees (root -> edge) a record belongs to."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Mapping

import numpy as np

from reliable_kafka.codec.envelope import decode_datum, encode_datum, zigzag_varint
from reliable_kafka.errors import ArgumentError, DecodeError

__all__ = ["ANCHORS_HEADER", "ANCHORS_VERSION", "encode_anchors", "encode_one_anchor", "decode_anchors"]

ANCHORS_HEADER = "rk-anchors"

#
# Version 2 (written): byte 0 = 2, then one Avro ``bytes`` value (schemas/anchors_v2.avsc): the
# zigzag-varint length L = 16 * n, then n pairs of big-endian int64 (root, edge). Fixed-width
# pairs decode with one struct call, and Spark SQL builds the same bytes without Python.
# Version 1 (still read): byte 0 = 1, then the Avro array of schemas/anchors.avsc.

ANCHORS_VERSION = 2
_PAIR = struct.Struct(">qq")
_ONE_PAIR_PREFIX = bytes([ANCHORS_VERSION, 32])  # 32 = zigzag(16): the length of one pair
_MAX_VARINT_BYTES = 10
_NUMPY_PAIRS = 64  # from this many pairs on, NumPy slices faster than struct
_PAIRS = [struct.Struct(f">{2 * n}q") for n in range(_NUMPY_PAIRS)]
_PREFIXES: list[bytes] = []  # version byte and length of n pairs, filled below


def encode_anchors(anchors: Mapping[int, int] | Iterable[tuple[int, int]]) -> bytes:
    """The ``rk-anchors`` header value (version 2) for a tuple in the given trees (root -> edge)."""
    try:
        if type(anchors) is dict and len(anchors) == 1:  # the common case, without a list
            for pair in anchors.items():
                return _ONE_PAIR_PREFIX + _PAIR.pack(*pair)
        pairs = list(anchors.items() if isinstance(anchors, Mapping) else anchors)
        n = len(pairs)
        values = itertools.chain.from_iterable(pairs)
        if n < _NUMPY_PAIRS:
            return _PREFIXES[n] + _PAIRS[n].pack(*values)
        body = struct.pack(f">{2 * n}q", *values)
    except struct.error as exc:
        raise ArgumentError(f"rk-anchors: root and edge ids must be 64-bit signed ints: {exc}") from exc
    return bytes([ANCHORS_VERSION]) + zigzag_varint(len(body)) + body


def encode_one_anchor(root: int, edge: int) -> bytes:
    """:func:`encode_anchors` of ``{root: edge}`` (a tuple in one tree, once per emit) without the dict."""
    try:
        return _ONE_PAIR_PREFIX + _PAIR.pack(root, edge)
    except struct.error as exc:
        raise ArgumentError(f"rk-anchors: root and edge ids must be 64-bit signed ints: {exc}") from exc


def _encode_anchors_v1(anchors: Mapping[int, int] | Iterable[tuple[int, int]]) -> bytes:
    """The version-1 header value (what earlier releases wrote; for tests and benchmarks)."""
    pairs = anchors.items() if isinstance(anchors, Mapping) else anchors
    return encode_datum("anchors", [{"root": root, "edge": edge} for root, edge in pairs])


_PREFIXES.extend(bytes([ANCHORS_VERSION]) + zigzag_varint(16 * n) for n in range(_NUMPY_PAIRS))


def decode_anchors(raw: bytes | None) -> dict[int, int]:
    """root -> edge from an ``rk-anchors`` header value, version 1 or 2.

    A root 0, a repeated root, a length that is not whole pairs, a short body or trailing bytes
    raise :class:`DecodeError`.
    """
    if type(raw) is bytes and len(raw) == 18 and raw[1] == 32 and raw[0] == ANCHORS_VERSION:
        # one pair in plain bytes, as consumed (once per received tuple): no conversions, one struct call
        root, edge = _PAIR.unpack_from(raw, 2)
        if root:
            return {root: edge}
    if isinstance(raw, (bytes, bytearray, memoryview)) and len(raw) and raw[0] == ANCHORS_VERSION:
        raw = bytes(raw)
        if len(raw) == 18 and raw[1] == 32:  # one pair: the common case, one struct call
            root, edge = _PAIR.unpack_from(raw, 2)
            if root == 0:
                raise DecodeError("anchors", "root id 0 is not a valid id", raw)
            return {root: edge}
        return _decode_anchors_v2(raw)
    entries, raw = decode_datum("anchors", raw)
    return _anchor_map(((entry["root"], entry["edge"]) for entry in entries), raw)


def _decode_anchors_v2(raw: bytes) -> dict[int, int]:
    if len(raw) > 1 and raw[1] < 0x80:  # a one-byte length (up to 3 pairs)
        length, pos = raw[1], 2
    else:
        length, pos = _read_varint(raw, 1)
    length = (length >> 1) ^ -(length & 1)  # zigzag
    if length < 0 or length % 16:
        raise DecodeError("anchors", f"v2 pairs length {length} is not a multiple of 16", raw)
    if pos + length > len(raw):
        raise DecodeError("anchors", f"truncated: {length} bytes of pairs announced, {len(raw) - pos} present", raw)
    if pos + length < len(raw):
        raise DecodeError("anchors", f"{len(raw) - pos - length} trailing bytes after the pairs", raw)
    n = length // 16
    if n >= _NUMPY_PAIRS:
        values = np.frombuffer(raw, dtype=">i8", count=2 * n, offset=pos).tolist()
    else:
        values = _PAIRS[n].unpack_from(raw, pos)
    anchors = dict(zip(values[0::2], values[1::2]))
    if len(anchors) == n and 0 not in anchors:
        return anchors
    return _anchor_map(zip(values[0::2], values[1::2]), raw)  # names the fault


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    value = shift = 0
    for at in range(pos, min(len(raw), pos + _MAX_VARINT_BYTES)):
        byte = raw[at]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at + 1
    raise DecodeError("anchors", "the length prefix of the v2 pairs is cut short or too long", raw)


def _anchor_map(pairs: Iterable[tuple[int, int]], raw: bytes) -> dict[int, int]:
    """root -> edge; a root 0 or a repeated root makes ``raw`` bad."""
    anchors: dict[int, int] = {}
    for root, edge in pairs:
        if root == 0:
            raise DecodeError("anchors", "root id 0 is not a valid id", raw)
        if root in anchors:
            raise DecodeError("anchors", f"root {root} appears twice", raw)
        anchors[root] = edge
    return anchors
