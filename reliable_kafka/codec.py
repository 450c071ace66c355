"""Encoders and decoders for the Avro contract in ``reliable_kafka/schemas/``.

Every payload is one format-version byte (:data:`FORMAT_VERSION`) followed by the Avro binary
encoding (fastavro, schemaless) of the schema named for it. Encoders are pure callables with no
I/O. Decoders raise :class:`~reliable_kafka.errors.DecodeError` (never anything else) for bytes
that do not decode, carrying the raw bytes so the caller can park them.
"""

from __future__ import annotations

import io
import json
import os
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Iterable, Mapping

import fastavro
import numpy as np

from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import ConfigError, DecodeError

__all__ = [
    "FORMAT_VERSION",
    "ANCHORS_HEADER",
    "PARKED_HEADER",
    "AckBatch",
    "OutcomeBatch",
    "ParkedRecord",
    "schema_dir",
    "encode_anchors",
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
_OUTCOME_BY_SYMBOL = {kind.name: int(kind) for kind in OutcomeKind}


def schema_dir() -> Path:
    """The folder of the ``.avsc`` files: ``$RK_SCHEMA_DIR`` if set, else the package's own
    ``reliable_kafka/schemas`` (package data, so a wheel, ``pip install --user`` and an editable
    checkout all carry it)."""
    explicit = os.environ.get("RK_SCHEMA_DIR")
    return Path(explicit) if explicit else Path(str(resources.files("reliable_kafka").joinpath("schemas")))


@cache
def _schema(name: str):
    explicit = os.environ.get("RK_SCHEMA_DIR")
    # importlib.resources reads the package's data wherever (and however) the package is installed.
    source = Path(explicit) if explicit else resources.files("reliable_kafka").joinpath("schemas")
    try:
        text = source.joinpath(_SCHEMA_FILES[name]).read_text(encoding="utf-8")
    except OSError as exc:
        fix = ("point RK_SCHEMA_DIR at a folder holding the .avsc files, or unset it" if explicit
               else "reinstall reliable-kafka (its wheel carries reliable_kafka/schemas/*.avsc)")
        raise ConfigError(f"reliable-kafka: Avro schema {_SCHEMA_FILES[name]} not found in {source} "
                          f"({exc.strerror or exc}); {fix}") from exc
    return fastavro.parse_schema(json.loads(text))


def _encode(name: str, datum) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION_BYTE)
    fastavro.schemaless_writer(buffer, _schema(name), datum)
    return buffer.getvalue()


def _decode(name: str, raw: bytes | None):
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
        datum = fastavro.schemaless_reader(buffer, _schema(name), None)
    except Exception as exc:  # fastavro raises many kinds (EOFError, ValueError, IndexError...)
        raise DecodeError(name, f"{type(exc).__name__}: {exc}", raw) from exc
    if buffer.tell() != len(raw):
        raise DecodeError(name, f"{len(raw) - buffer.tell()} trailing bytes after the record", raw)
    return datum, raw


# --- rk-anchors header --------------------------------------------------------------------------


def encode_anchors(anchors: Mapping[int, int] | Iterable[tuple[int, int]]) -> bytes:
    """The ``rk-anchors`` header value for a tuple in the given trees (root -> edge)."""
    pairs = anchors.items() if isinstance(anchors, Mapping) else anchors
    return _encode("anchors", [{"root": root, "edge": edge} for root, edge in pairs])


def decode_anchors(raw: bytes | None) -> dict[int, int]:
    """root -> edge from an ``rk-anchors`` header value; a root 0 or a repeated root is invalid."""
    entries, raw = _decode("anchors", raw)
    anchors: dict[int, int] = {}
    for entry in entries:
        root = entry["root"]
        if root == 0:
            raise DecodeError("anchors", "root id 0 is not a valid id", raw)
        if root in anchors:
            raise DecodeError("anchors", f"root {root} appears twice", raw)
        anchors[root] = entry["edge"]
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
        raise ValueError(f"columns differ in length: {len(kinds)}, {len(roots)}, {len(vals)}")
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
    """One outcome record for the spout task ``spout``."""
    entries = [
        {"root": int(root), "kind": _OUTCOME_SYMBOLS[int(kind)]} for root, kind in zip(roots, kinds)
    ]
    return _encode("outcome_batch", {"spout": int(spout), "entries": entries})


def decode_outcomes(raw: bytes | None) -> OutcomeBatch:
    datum, _ = _decode("outcome_batch", raw)
    entries = datum["entries"]
    return OutcomeBatch(
        spout=datum["spout"],
        roots=np.fromiter((e["root"] for e in entries), dtype=np.int64, count=len(entries)),
        kinds=np.fromiter(
            (_OUTCOME_BY_SYMBOL[e["kind"]] for e in entries), dtype=np.uint8, count=len(entries)
        ),
    )


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


def encode_parked(parked: ParkedRecord) -> bytes:
    datum = dict(parked.__dict__)
    if datum["parked_at_ms"] < 0:
        datum["parked_at_ms"] = int(time.time() * 1000)
    return _encode("parked_record", datum)


def decode_parked(raw: bytes | None) -> ParkedRecord:
    datum, _ = _decode("parked_record", raw)
    return ParkedRecord(**datum)
