"""The envelope every payload shares: one format-version byte (:data:`FORMAT_VERSION`) followed by
the Avro binary encoding (fastavro, schemaless) of the schema named for it, and the schema files."""

from __future__ import annotations

import io
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro

from reliable_kafka.errors import ArgumentError, ConfigError, DecodeError

__all__ = ["FORMAT_VERSION", "schema_dir"]

FORMAT_VERSION = 1

VERSION_BYTE = bytes([FORMAT_VERSION])
_SCHEMA_FILES = {
    "anchors": "anchors.avsc",
    "ack_batch": "ack_batch.avsc",
    "outcome_batch": "outcome_batch.avsc",
    "parked_record": "parked_record.avsc",
}
_PARKED_FIRST_FIELDS = 8  # the fields every rk-parked header has; later ones were added with defaults


def schema_dir() -> Path:
    """The folder of the ``.avsc`` files: ``$RK_SCHEMA_DIR`` if set, else the package's own
    ``reliable_kafka/schemas`` (package data, so a wheel, ``pip install --user`` and an editable
    checkout all carry it)."""
    explicit = os.environ.get("RK_SCHEMA_DIR")
    return Path(explicit) if explicit else Path(str(resources.files("reliable_kafka").joinpath("schemas")))


@cache
def _schema(name: str) -> Any:  # a fastavro parsed schema (fastavro has no type information)
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


def encode_datum(name: str, datum: object) -> bytes:
    buffer = io.BytesIO()
    buffer.write(VERSION_BYTE)
    fastavro.schemaless_writer(buffer, _schema(name), datum)
    return buffer.getvalue()


def decode_datum(name: str, raw: bytes | None, *, schema: str | None = None) -> tuple[Any, bytes]:
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


def zigzag_varint(value: int) -> bytes:
    """Avro's encoding of a ``long`` (the length prefix of ``bytes``)."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag_at(raw: bytes, pos: int) -> tuple[int, int]:
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
