"""Encoders and decoders for the Avro contract in ``reliable_kafka/schemas/``.

Every payload is one format-version byte (:data:`FORMAT_VERSION`) followed by the Avro binary
encoding (fastavro, schemaless) of the schema named for it. Encoders are pure callables with no
I/O. Decoders raise :class:`~reliable_kafka.errors.DecodeError` (never anything else) for bytes
that do not decode, carrying the raw bytes so the caller can park them.
"""

from __future__ import annotations

from reliable_kafka.codec.ack_batch import AckBatch, decode_ack_batch, encode_ack_batch
from reliable_kafka.codec.anchors import (
    ANCHORS_HEADER,
    ANCHORS_VERSION,
    decode_anchors,
    encode_anchors,
    encode_one_anchor,
)
from reliable_kafka.codec.envelope import FORMAT_VERSION, schema_dir
from reliable_kafka.codec.outcome_batch import OutcomeBatch, decode_outcomes, encode_outcomes
from reliable_kafka.codec.parked_record import (
    ATTEMPTS_HEADER,
    PARKED_HEADER,
    REASON_HEADER,
    ParkedRecord,
    decode_parked,
    encode_parked,
)

__all__ = [
    "FORMAT_VERSION",
    "ANCHORS_HEADER",
    "ANCHORS_VERSION",
    "PARKED_HEADER",
    "ATTEMPTS_HEADER",
    "REASON_HEADER",
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
