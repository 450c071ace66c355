"""The transactional spout's partition state, kept in its committed offset's metadata.

The done-above set (:mod:`reliable_kafka.core.commit_metadata`), then ``|rkx:e,o[,offset[+n]:attempt[:f]...]``:
where emission stopped (``e``), where the partition's outcomes were read up to (``o``) and the
attempt of in-flight records past their first (``:f``: that attempt already failed).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from reliable_kafka.core.commit_metadata import DEFAULT_MAX_BYTES, decode_done_above, encode_done_above
from reliable_kafka.errors import ArgumentError, DecodeError

__all__ = ["encode_spout_state", "decode_spout_state"]

_STATE_SEPARATOR = "|rkx:"


def encode_spout_state(
    commit_point: int,
    done_above: Iterable[int],
    *,
    emitted_upto: int,
    outcome_position: int,
    attempts: dict[int, int],
    failed: Iterable[int] = (),
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[str, bool]:
    """Commit metadata: the done-above set, then ``|rkx:e,o[,offset[+n]:attempt[:f]...]``.

    ``attempts`` gives the attempt of in-flight records past their first; ``failed`` the offsets
    whose last attempt already failed (their outcome lies before ``o``: a successor must redeliver
    or dead-letter them itself). Consecutive offsets alike are one run (``offset+n``). What does not
    fit in half of ``max_bytes`` is left out and reported as truncated: a successor then treats
    those records as first attempts still in flight, and its backstop redelivers them (duplicates,
    never loss).
    """
    failed = set(failed)
    extra = f"{_STATE_SEPARATOR}{emitted_upto},{outcome_position}"
    truncated = False
    for start, count, attempt, is_failed in _runs(attempts, failed):
        entry = f",{start}{f'+{count}' if count > 1 else ''}:{attempt}{':f' if is_failed else ''}"
        if len(extra) + len(entry) > max_bytes // 2:
            truncated = True
            break
        extra += entry
    done, done_truncated = encode_done_above(commit_point, done_above, max_bytes=max_bytes - len(extra))
    return done + extra, truncated or done_truncated


def _runs(attempts: dict[int, int], failed: set[int]) -> Iterator[tuple[int, int, int, bool]]:
    """(start, count, attempt, failed) of each run of consecutive offsets with the same attempt and flag."""
    run: tuple[int, int, int, bool] | None = None
    for offset in sorted(attempts):
        attempt, is_failed = attempts[offset], offset in failed
        if run is not None and offset == run[0] + run[1] and (attempt, is_failed) == run[2:]:
            run = (run[0], run[1] + 1, attempt, is_failed)
            continue
        if run is not None:
            yield run
        run = (offset, 1, attempt, is_failed)
    if run is not None:
        yield run


def decode_spout_state(commit_point: int, metadata: str) -> tuple[list[int], int, int, dict[int, int], set[int]]:
    """(done_above, emitted_upto, outcome_position, attempts, failed); DecodeError if not ours."""
    if _STATE_SEPARATOR not in metadata:
        raise DecodeError("spout state", "no transactional spout state in the commit metadata", metadata.encode())
    done, extra = metadata.split(_STATE_SEPARATOR, 1)
    attempts: dict[int, int] = {}
    failed: set[int] = set()
    try:
        fields = extra.split(",")
        emitted_upto, outcome_position = int(fields[0]), int(fields[1])
        for field in fields[2:]:
            parts = field.split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "f"):
                raise ArgumentError(f"entry {field!r} is not offset[+n]:attempt[:f]")
            start, _, count = parts[0].partition("+")
            for offset in range(int(start), int(start) + (int(count) if count else 1)):
                attempts[offset] = int(parts[1])
                if len(parts) == 3:
                    failed.add(offset)
    except (ValueError, IndexError) as exc:
        raise DecodeError("spout state", f"malformed state {extra!r}: {exc}", metadata.encode()) from exc
    return decode_done_above(commit_point, done), emitted_upto, outcome_position, attempts, failed
