"""Outcome records: the roots an acker decided for one spout task, and how (OutcomeKind)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from reliable_kafka.codec.envelope import VERSION_BYTE, decode_datum, encode_datum, zigzag_at, zigzag_varint
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import ArgumentError, DecodeError

__all__ = ["OutcomeBatch", "encode_outcomes", "decode_outcomes"]

_OUTCOME_SYMBOLS = [kind.name for kind in OutcomeKind]


@dataclass(frozen=True)
class OutcomeBatch:
    """A decoded outcome record: root i was decided ``kinds[i]`` (OutcomeKind values)."""

    spout: int
    roots: np.ndarray  # int64
    kinds: np.ndarray  # uint8

    def __len__(self) -> int:
        return len(self.roots)


def encode_outcomes(spout: int, roots: ArrayLike, kinds: ArrayLike) -> bytes:
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
    head = VERSION_BYTE + zigzag_varint(int(spout))
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
    return head + zigzag_varint(len(roots)) + rows[keep].tobytes() + b"\x00"


def _encode_outcomes_fastavro(spout: int, roots: Iterable[int], kinds: Iterable[int]) -> bytes:
    """What :func:`encode_outcomes` writes, through fastavro (the reference for tests)."""
    entries = [{"root": int(root), "kind": _OUTCOME_SYMBOLS[int(kind)]} for root, kind in zip(roots, kinds)]
    return encode_datum("outcome_batch", {"spout": int(spout), "entries": entries})


def decode_outcomes(raw: bytes | None) -> OutcomeBatch:
    """Decode an outcome record: read with NumPy when it has the layout :func:`encode_outcomes`
    writes (one block of entries), else by fastavro (any valid Avro, and the error for bad bytes)."""
    if type(raw) is bytes and raw[:1] == VERSION_BYTE:
        try:  # fastavro's per-entry dicts cost ~1.7 us an outcome, once per root in every spout
            batch = _outcomes_in_place(raw)
        except (IndexError, ValueError):
            batch = None  # not the common layout, or bad bytes: fastavro's reading below decides
        if batch is not None:
            return batch
    # Kinds are read as enum indexes: fastavro would read index -1 (a negative index is not Avro)
    # as the last symbol, RESET_TIMEOUT, by Python's list indexing.
    datum, raw = decode_datum("outcome_batch", raw, schema="outcome_batch_indexed")
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
    spout, pos = zigzag_at(raw, 1)
    count, pos = zigzag_at(raw, pos)
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
