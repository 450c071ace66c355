"""Offsets done above the commit point, packed into Kafka's commit metadata string.

A spout commits its commit point (every offset below it is done) with
``OffsetAndMetadata.metadata`` naming the offsets already done *above* it, so that a restarted or
rebalanced spout skips them instead of replaying them (docs/design.md section 5).

Layout: ``"rk1:" + urlsafe_base64_without_padding(payload)``, where ``payload`` is a sequence of
unsigned LEB128 varints::

    commit_point  (start, length - 1)  (start, length - 1) ...
                   ^ as gap from a cursor

The done offsets are cut into maximal runs of consecutive offsets. The cursor starts at
``commit_point + 1``; a run is written as ``start - cursor`` and ``length - 1``, then the cursor
moves to ``end + 2`` (``end + 1`` cannot be done, or the run would be longer). The commit point is
written too, so that metadata left beside a different offset (e.g. after an offset reset by a
tool) is rejected instead of skipping records that were never done.

The broker caps metadata at ``offset.metadata.max.bytes`` (4096 by default; Kafka 4.1 refuses a
string of exactly 4096 characters too, so 4095 is the most we write). When the runs do not fit,
the lowest ones are kept: the decoded skip set is then a prefix of the true one, which is
safe (the rest is replayed, at-least-once).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable

from reliable_kafka.errors import ArgumentError, DecodeError

__all__ = [
    "PREFIX",
    "DEFAULT_MAX_BYTES",
    "encode_done_above",
    "decode_done_ranges",
    "decode_done_above",
]

PREFIX = "rk1:"
# Kafka's default offset.metadata.max.bytes is 4096, but a 4.1 broker answers
# OFFSET_METADATA_TOO_LARGE to exactly 4096 characters (plain and transactional commits alike;
# tests/integration/test_transactional.py checks the largest state we write against the broker)
DEFAULT_MAX_BYTES = 4095

_WHAT = "commit metadata"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_OTHER_VERSION = re.compile(r"rk\d+:")
_MAX_OFFSET = (1 << 63) - 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _runs(commit_point: int, offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs ``(start, length)`` of the distinct offsets above the commit point."""
    runs: list[tuple[int, int]] = []
    for offset in sorted({o for o in offsets if o > commit_point}):
        if runs and runs[-1][0] + runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((offset, 1))
    return runs


def encode_done_above(
    commit_point: int, offsets: Iterable[int], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str, bool]:
    """Encode the offsets done above ``commit_point`` into at most ``max_bytes`` characters.

    Returns ``(metadata, truncated)``. ``metadata`` is ``""`` when there is nothing to record (or
    nothing fits). When not everything fits, the lowest runs are kept (the last kept run may be
    shortened) and ``truncated`` is True: the shell counts it in a metric and carries on.
    Offsets at or below ``commit_point`` are ignored.
    """
    if commit_point < 0:
        raise ArgumentError(f"commit metadata: commit point must be >= 0, got {commit_point}")
    if max_bytes < 0:
        raise ArgumentError(f"commit metadata: max_bytes must be >= 0, got {max_bytes}")
    runs = _runs(commit_point, offsets)
    if not runs:
        return "", False
    # Unpadded base64 of n bytes takes ceil(4n/3) characters.
    budget = max(0, max_bytes - len(PREFIX)) * 3 // 4
    payload = bytearray(_varint(commit_point))
    header = len(payload)
    cursor = commit_point + 1
    truncated = False
    for start, length in runs:
        gap = _varint(start - cursor)
        size = _varint(length - 1)
        if len(payload) + len(gap) + len(size) <= budget:
            payload += gap + size
            cursor = start + length + 1
            continue
        truncated = True
        room = budget - len(payload) - len(gap)
        if room >= 1:  # keep the front of this run: a varint of `room` bytes holds < 128**room
            payload += gap + _varint(min(length, 128**room) - 1)
        break
    if len(payload) == header:
        return "", True
    text = base64.urlsafe_b64encode(bytes(payload)).decode("ascii").rstrip("=")
    return PREFIX + text, truncated


def _fail(metadata: str, reason: str) -> DecodeError:
    return DecodeError(_WHAT, reason, metadata.encode("utf-8", "backslashreplace"))


def decode_done_ranges(commit_point: int, metadata: str | None) -> list[range]:
    """The runs of offsets recorded done above ``commit_point``, as ascending ``range`` objects.

    ``[]`` for None or ``""``. Raises :class:`DecodeError` for metadata that is not ours, does not
    decode, or was written for another commit point; the shell warns and ignores it.
    """
    if not metadata:
        return []
    if not metadata.startswith(PREFIX):
        if _OTHER_VERSION.match(metadata):
            raise _fail(metadata, f"unsupported version (this reader knows {PREFIX!r})")
        raise _fail(metadata, f"not reliable-kafka metadata (no {PREFIX!r} prefix)")
    body = metadata[len(PREFIX) :]
    if not _BASE64URL.fullmatch(body) or len(body) % 4 == 1:
        raise _fail(metadata, "payload is not unpadded urlsafe base64")
    try:
        payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError) as exc:
        raise _fail(metadata, f"payload is not base64: {exc}") from None
    values = _read_varints(metadata, payload)
    if not values:
        raise _fail(metadata, "empty payload")
    if values[0] != commit_point:
        raise _fail(metadata, f"written for commit point {values[0]}, but the committed offset is {commit_point}")
    if len(values) % 2 != 1:
        raise _fail(metadata, "payload ends inside a run")
    ranges: list[range] = []
    cursor = commit_point + 1
    for i in range(1, len(values), 2):
        start = cursor + values[i]
        stop = start + values[i + 1] + 1
        if stop - 1 > _MAX_OFFSET:
            raise _fail(metadata, f"offset {stop - 1} is beyond the 64-bit offset range")
        ranges.append(range(start, stop))
        cursor = stop + 1
    return ranges


def _read_varints(metadata: str, payload: bytes) -> list[int]:
    values: list[int] = []
    value = shift = 0
    for byte in payload:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift >= 64:
                raise _fail(metadata, "varint longer than 64 bits")
            continue
        values.append(value)
        value = shift = 0
    if shift:
        raise _fail(metadata, "payload ends inside a varint")
    return values


def decode_done_above(commit_point: int, metadata: str | None, *, max_offsets: int = 1_000_000) -> list[int]:
    """The offsets recorded done above ``commit_point``, ascending (see ``decode_done_ranges``).

    Raises :class:`DecodeError` also when the metadata names more than ``max_offsets`` offsets
    (a guard against metadata that would exhaust memory; the ranges form has no such limit).
    """
    ranges = decode_done_ranges(commit_point, metadata)
    total = sum(len(r) for r in ranges)
    if total > max_offsets:
        raise _fail(metadata or "", f"names {total} offsets, more than max_offsets={max_offsets}")
    return [offset for r in ranges for offset in r]
