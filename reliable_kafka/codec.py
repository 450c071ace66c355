"""Encoders and decoders for the Avro contract in ``reliable_kafka/schemas/``.

Every payload is one format-version byte (:data:`FORMAT_VERSION`) followed by the Avro binary
encoding (fastavro, schemaless) of the schema named for it. Encoders are pure callables with no
I/O. Decoders raise :class:`~reliable_kafka.errors.DecodeError` (never anything else) for bytes
that do not decode, carrying the raw bytes so the caller can park them.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import struct
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import fastavro
import numpy as np

from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import ArgumentError, ConfigError, DecodeError

__all__ = [
    "FORMAT_VERSION",
    "ANCHORS_HEADER",
    "ANCHORS_VERSION",
    "PARKED_HEADER",
    "AckBatch",
    "OutcomeBatch",
    "ParkedRecord",
    "schema_dir",
    "encode_anchors",
    "encode_one_anchor",
    "decode_anchors",
    "encode_ack_batch",
    "decode_ack_batch",
    "encode_outcomes",
    "decode_outcomes",
    "encode_parked",
    "decode_parked",
]

FORMAT_VERSION = 1
ANCHORS_HEADER = "rk-anchors"
PARKED_HEADER = "rk-parked"

_VERSION_BYTE = bytes([FORMAT_VERSION])
_SCHEMA_FILES = {
    "anchors": "anchors.avsc",
    "ack_batch": "ack_batch.avsc",
    "outcome_batch": "outcome_batch.avsc",
    "parked_record": "parked_record.avsc",
}
_OUTCOME_SYMBOLS = [kind.name for kind in OutcomeKind]


def schema_dir() -> Path:
    """The folder of the ``.avsc`` files: ``$RK_SCHEMA_DIR`` if set, else the package's own
    ``reliable_kafka/schemas`` (package data, so a wheel, ``pip install --user`` and an editable
    checkout all carry it)."""
    explicit = os.environ.get("RK_SCHEMA_DIR")
    return Path(explicit) if explicit else Path(str(resources.files("reliable_kafka").joinpath("schemas")))


@cache
def _schema(name: str):
    if name == "parked_record_first":  # the header as first written: its first eight fields
        schema = json.loads(_schema_text("parked_record"))
        schema["fields"] = schema["fields"][:_PARKED_FIRST_FIELDS]
        return fastavro.parse_schema(schema, named_schemas={})
    if name == "outcome_batch_indexed":  # the kind read as its enum index (an int on the wire too)
        schema = json.loads(_schema_text("outcome_batch"))
        schema["fields"][1]["type"]["items"]["fields"][1]["type"] = "int"
        return fastavro.parse_schema(schema, named_schemas={})
    return fastavro.parse_schema(json.loads(_schema_text(name)))


def _schema_text(name: str) -> str:
    explicit = os.environ.get("RK_SCHEMA_DIR")
    # importlib.resources reads the package's data wherever (and however) the package is installed.
    source = Path(explicit) if explicit else resources.files("reliable_kafka").joinpath("schemas")
    try:
        return source.joinpath(_SCHEMA_FILES[name]).read_text(encoding="utf-8")
    except OSError as exc:
        fix = (
            "point RK_SCHEMA_DIR at a folder holding the .avsc files, or unset it"
            if explicit
            else "reinstall reliable-kafka (its wheel carries reliable_kafka/schemas/*.avsc)"
        )
        raise ConfigError(
            f"reliable-kafka: Avro schema {_SCHEMA_FILES[name]} not found in {source} ({exc.strerror or exc}); {fix}"
        ) from exc


def _encode(name: str, datum) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION_BYTE)
    fastavro.schemaless_writer(buffer, _schema(name), datum)
    return buffer.getvalue()


def _decode(name: str, raw: bytes | None, *, schema: str | None = None):
    if raw is None:
        raise DecodeError(name, "no bytes (null value)", raw)
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise DecodeError(name, f"expected bytes, got {type(raw).__name__}", None)
    raw = bytes(raw)
    if not raw:
        raise DecodeError(name, "empty payload", raw)
    if raw[0] != FORMAT_VERSION:
        raise DecodeError(name, f"unknown format version {raw[0]} (this reader knows {FORMAT_VERSION})", raw)
    buffer = io.BytesIO(raw)
    buffer.seek(1)
    try:
        datum = fastavro.schemaless_reader(buffer, _schema(schema or name), None)
    except Exception as exc:  # fastavro raises many kinds (EOFError, ValueError, IndexError...)
        raise DecodeError(name, f"{type(exc).__name__}: {exc}", raw) from exc
    if buffer.tell() != len(raw):
        raise DecodeError(name, f"{len(raw) - buffer.tell()} trailing bytes after the record", raw)
    return datum, raw


# --- rk-anchors header --------------------------------------------------------------------------
#
# Version 2 (written): byte 0 = 2, then one Avro ``bytes`` value (schemas/anchors_v2.avsc): the
# zigzag-varint length L = 16 * n, then n pairs of big-endian int64 (root, edge). Fixed-width
# pairs decode with one struct call, and Spark SQL builds the same bytes without Python.
# Version 1 (still read): byte 0 = 1, then the Avro array of schemas/anchors.avsc.

ANCHORS_VERSION = 2
_ANCHORS_V2 = 2
_PAIR = struct.Struct(">qq")
_ONE_PAIR_PREFIX = bytes([_ANCHORS_V2, 32])  # 32 = zigzag(16): the length of one pair
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
    return bytes([_ANCHORS_V2]) + _zigzag_varint(len(body)) + body


def encode_one_anchor(root: int, edge: int) -> bytes:
    """:func:`encode_anchors` of ``{root: edge}`` (a tuple in one tree, once per emit) without the dict."""
    try:
        return _ONE_PAIR_PREFIX + _PAIR.pack(root, edge)
    except struct.error as exc:
        raise ArgumentError(f"rk-anchors: root and edge ids must be 64-bit signed ints: {exc}") from exc


def _encode_anchors_v1(anchors: Mapping[int, int] | Iterable[tuple[int, int]]) -> bytes:
    """The version-1 header value (what earlier releases wrote; for tests and benchmarks)."""
    pairs = anchors.items() if isinstance(anchors, Mapping) else anchors
    return _encode("anchors", [{"root": root, "edge": edge} for root, edge in pairs])


def _zigzag_varint(value: int) -> bytes:
    """Avro's encoding of a ``long`` (the length prefix of ``bytes``)."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_PREFIXES.extend(bytes([_ANCHORS_V2]) + _zigzag_varint(16 * n) for n in range(_NUMPY_PAIRS))


def decode_anchors(raw: bytes | None) -> dict[int, int]:
    """root -> edge from an ``rk-anchors`` header value, version 1 or 2.

    A root 0, a repeated root, a length that is not whole pairs, a short body or trailing bytes
    raise :class:`DecodeError`.
    """
    if type(raw) is bytes and len(raw) == 18 and raw[1] == 32 and raw[0] == _ANCHORS_V2:
        # one pair in plain bytes, as consumed (once per received tuple): no conversions, one struct call
        root, edge = _PAIR.unpack_from(raw, 2)
        if root:
            return {root: edge}
    if isinstance(raw, (bytes, bytearray, memoryview)) and len(raw) and raw[0] == _ANCHORS_V2:
        raw = bytes(raw)
        if len(raw) == 18 and raw[1] == 32:  # one pair: the common case, one struct call
            root, edge = _PAIR.unpack_from(raw, 2)
            if root == 0:
                raise DecodeError("anchors", "root id 0 is not a valid id", raw)
            return {root: edge}
        return _decode_anchors_v2(raw)
    entries, raw = _decode("anchors", raw)
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


# --- ack-topic batches --------------------------------------------------------------------------


@dataclass(frozen=True)
class AckBatch:
    """A decoded ack-topic record: entry i is ``(kinds[i], roots[i], vals[i])``."""

    sender: int
    kinds: np.ndarray  # uint8
    roots: np.ndarray  # int64
    vals: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.kinds)


def encode_ack_batch(sender: int, kinds, roots, vals) -> bytes:
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
    return _encode("ack_batch", datum)


def decode_ack_batch(raw: bytes | None) -> AckBatch:
    """Decode an ack-topic record value. Column lengths are checked against ``count``.

    Entry values (root 0, unknown kinds) are not judged here: the acker table counts and skips
    them, so one bad entry does not cost the good ones beside it.
    """
    if type(raw) is bytes and raw[:1] == _VERSION_BYTE:
        try:  # the layout read directly: 3 varints and 3 byte strings, columns as NumPy views
            return _ack_batch_in_place(raw)
        except (IndexError, ValueError):
            pass  # not well formed: fastavro's reading below names the fault
    datum, raw = _decode("ack_batch", raw)
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
    sender, pos = _zigzag_at(raw, 1)
    count, pos = _zigzag_at(raw, pos)
    if not 0 <= count < 2**31:
        raise ArgumentError("count")
    starts = []
    for width in (1, 8, 8):
        length, pos = _zigzag_at(raw, pos)
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


def _zigzag_at(raw: bytes, pos: int) -> tuple[int, int]:
    """The Avro ``long`` (zigzag varint) at ``pos`` and the position after it."""
    byte = raw[pos]
    value, shift = byte & 0x7F, 7
    while byte & 0x80:
        if shift > 63:
            raise ArgumentError("varint too long")
        pos += 1
        byte = raw[pos]
        value |= (byte & 0x7F) << shift
        shift += 7
    if value >> 64:
        raise ArgumentError("varint beyond 64 bits")
    return (value >> 1) ^ -(value & 1), pos + 1


# --- outcomes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutcomeBatch:
    """A decoded outcome record: root i was decided ``kinds[i]`` (OutcomeKind values)."""

    spout: int
    roots: np.ndarray  # int64
    kinds: np.ndarray  # uint8

    def __len__(self) -> int:
        return len(self.roots)


def encode_outcomes(spout: int, roots, kinds) -> bytes:
    """One outcome record for the spout task ``spout``.

    The Avro layout is written with NumPy (an acker sends one per poll round: fastavro's
    per-entry dicts were about 15% of a tracked acker's CPU); the bytes are fastavro's.
    """
    roots = np.asarray(roots, dtype=np.int64).ravel()
    kinds = np.asarray(kinds).ravel()
    if len(roots) != len(kinds):
        raise ArgumentError(f"columns differ in length: {len(roots)} roots, {len(kinds)} kinds")
    if len(kinds) and (kinds.min() < 0 or kinds.max() >= len(_OUTCOME_SYMBOLS)):
        raise ArgumentError(f"outcome kinds must be 0..{len(_OUTCOME_SYMBOLS) - 1}, got {kinds.min()}..{kinds.max()}")
    head = _VERSION_BYTE + _zigzag_varint(int(spout))
    if not len(roots):
        return head + b"\x00"  # an empty array: its end marker alone
    zigzag = (roots << 1 ^ roots >> 63).view(np.uint64)
    shifts = np.arange(0, 70, 7, dtype=np.uint64)  # the 10 groups of 7 bits a 64-bit varint has
    groups = (zigzag[:, None] >> shifts).astype(np.uint8) & 0x7F
    # a varint has as many bytes as its highest non-zero group (at least one)
    nonzero = (zigzag[:, None] >> shifts) != 0
    nonzero[:, 0] = True
    used = 10 - np.argmax(nonzero[:, ::-1], axis=1)
    columns = np.arange(10)
    groups[columns < (used - 1)[:, None]] |= 0x80  # continuation bit on all but the last byte
    # each entry: its root's varint, then the kind's enum index (zigzag 2*index: one byte)
    rows = np.empty((len(roots), 11), dtype=np.uint8)
    rows[:, :10] = groups
    rows[:, 10] = kinds.astype(np.uint8) << 1
    keep = np.ones((len(roots), 11), dtype=bool)
    keep[:, :10] = columns < used[:, None]
    return head + _zigzag_varint(len(roots)) + rows[keep].tobytes() + b"\x00"


def _encode_outcomes_fastavro(spout: int, roots, kinds) -> bytes:
    """What :func:`encode_outcomes` writes, through fastavro (the reference for tests)."""
    entries = [{"root": int(root), "kind": _OUTCOME_SYMBOLS[int(kind)]} for root, kind in zip(roots, kinds)]
    return _encode("outcome_batch", {"spout": int(spout), "entries": entries})


def decode_outcomes(raw: bytes | None) -> OutcomeBatch:
    """Decode an outcome record: read with NumPy when it has the layout :func:`encode_outcomes`
    writes (one block of entries), else by fastavro (any valid Avro, and the error for bad bytes)."""
    if type(raw) is bytes and raw[:1] == _VERSION_BYTE:
        try:  # fastavro's per-entry dicts cost ~1.7 us an outcome, once per root in every spout
            batch = _outcomes_in_place(raw)
        except (IndexError, ValueError):
            batch = None  # not the common layout, or bad bytes: fastavro's reading below decides
        if batch is not None:
            return batch
    # Kinds are read as enum indexes: fastavro would read index -1 (a negative index is not Avro)
    # as the last symbol, RESET_TIMEOUT, by Python's list indexing.
    datum, raw = _decode("outcome_batch", raw, schema="outcome_batch_indexed")
    entries = datum["entries"]
    kinds = np.fromiter((e["kind"] for e in entries), dtype=np.int64, count=len(entries))
    bad = np.flatnonzero((kinds < 0) | (kinds >= len(_OUTCOME_SYMBOLS)))
    if len(bad):
        raise DecodeError(
            "outcome_batch",
            f"entry {bad[0]}: kind index {kinds[bad[0]]} is not one of the {len(_OUTCOME_SYMBOLS)} symbols",
            raw,
        )
    return OutcomeBatch(
        spout=datum["spout"],
        roots=np.fromiter((e["root"] for e in entries), dtype=np.int64, count=len(entries)),
        kinds=kinds.astype(np.uint8),
    )


_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)  # the 10 groups of 7 bits of a 64-bit varint
_MAX_KIND_BYTE = 2 * (len(_OUTCOME_SYMBOLS) - 1)
_NUMPY_OUTCOMES = 40  # measured: from about this many entries on, NumPy reads a record faster


def _outcomes_in_place(raw: bytes) -> OutcomeBatch | None:
    """The body of schemas/outcome_batch.avsc (long spout, then an array of {long root, enum kind})
    read with NumPy when the array is one block followed by its end marker and nothing else.

    Each entry is a root varint then a one-byte kind, so the bytes below 0x80 (the last byte of a
    varint) alternate: root end, kind, root end, kind. None (fastavro decides) for anything else:
    several or sized blocks, a kind this reader does not know, a varint longer than 64 bits, and
    records of fewer than :data:`_NUMPY_OUTCOMES` entries.
    Raises ValueError or IndexError for bytes cut short.
    """
    spout, pos = _zigzag_at(raw, 1)
    count, pos = _zigzag_at(raw, pos)
    if count < _NUMPY_OUTCOMES or raw[-1] != 0:
        return None  # NumPy's fixed cost (~30 us) is more than fastavro's below this many
    body = np.frombuffer(raw, np.uint8, len(raw) - 1 - pos, pos)  # the entries, without the end marker
    ends = np.flatnonzero(body < 0x80)
    if len(ends) != 2 * count or ends[-1] != len(body) - 1:
        return None
    root_ends, kind_at = ends[0::2], ends[1::2]
    kind_bytes = body[kind_at]  # zigzag enum indexes: 0, 2, 4, 6 for the four symbols
    if not (kind_at == root_ends + 1).all() or (kind_bytes & 1).any() or kind_bytes.max() > _MAX_KIND_BYTE:
        return None  # a kind of more than one byte, or one this reader does not know
    starts = np.empty(count, np.int64)
    starts[0] = 0
    starts[1:] = kind_at[:-1] + 1
    lengths = root_ends - starts + 1
    if lengths.max() > 10 or (body[root_ends[lengths == 10]] > 1).any():
        return None  # longer than 64 bits (or padded): fastavro decides
    columns = np.arange(10)
    at = np.minimum(starts[:, None] + columns, len(body) - 1)
    groups = (body[at] & 0x7F).astype(np.uint64) << _SHIFTS
    zigzag = np.where(columns < lengths[:, None], groups, np.uint64(0)).sum(axis=1, dtype=np.uint64)
    roots = ((zigzag >> np.uint64(1)) ^ (np.uint64(0) - (zigzag & np.uint64(1)))).view(np.int64)
    return OutcomeBatch(spout, roots, kind_bytes >> 1)


# --- parked records (dead letters and quarantine) ----------------------------------------------


@dataclass(frozen=True)
class ParkedRecord:
    """Why and from where a record was parked (the ``rk-parked`` header)."""

    reason: str
    attempts: int
    source_topic: str
    source_partition: int
    source_offset: int
    source_timestamp_ms: int = -1
    component: str = ""
    parked_at_ms: int = -1
    value_omitted: bool = False  # a reference: the original was too large to copy
    original_bytes: int = -1


_PARKED_FIRST_FIELDS = 8  # the fields every rk-parked header has; later ones were added with defaults


def encode_parked(parked: ParkedRecord) -> bytes:
    datum = dict(parked.__dict__)
    if datum["parked_at_ms"] < 0:
        datum["parked_at_ms"] = int(time.time() * 1000)
    return _encode("parked_record", datum)


def decode_parked(raw: bytes | None) -> ParkedRecord:
    """The ``rk-parked`` header; headers written before the added fields read with their defaults."""
    try:
        datum, _ = _decode("parked_record", raw)
    except DecodeError as error:
        try:
            datum, _ = _decode("parked_record_first", raw)
        except DecodeError:
            raise error from None
    return ParkedRecord(**datum)
