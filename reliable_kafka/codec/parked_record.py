"""The ``rk-parked`` header: why and from where a dead-lettered or quarantined record was parked."""

from __future__ import annotations

import time
from dataclasses import dataclass

from reliable_kafka.codec.envelope import decode_datum, encode_datum
from reliable_kafka.errors import DecodeError

__all__ = ["PARKED_HEADER", "ATTEMPTS_HEADER", "REASON_HEADER", "ParkedRecord", "encode_parked", "decode_parked"]

PARKED_HEADER = "rk-parked"
# a dead letter's attempt history (JSON, reliable_kafka.ops.failures.encode_attempts) and its one-line reason
ATTEMPTS_HEADER = "rk-attempts"
REASON_HEADER = "rk-reason"


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


def encode_parked(parked: ParkedRecord) -> bytes:
    datum = dict(parked.__dict__)
    if datum["parked_at_ms"] < 0:
        datum["parked_at_ms"] = int(time.time() * 1000)
    return encode_datum("parked_record", datum)


def decode_parked(raw: bytes | None) -> ParkedRecord:
    """The ``rk-parked`` header; headers written before the added fields read with their defaults."""
    try:
        datum, _ = decode_datum("parked_record", raw)
    except DecodeError as error:
        try:
            datum, _ = decode_datum("parked_record_first", raw)
        except DecodeError:
            raise error from None
    return ParkedRecord(**datum)
