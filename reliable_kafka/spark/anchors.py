"""Anchors as a DataFrame column: ``array<struct<root: bigint, edge: bigint>>``.

Each input row of a tracked batch carries the (root, edge) pairs of the tuple it is; DataFrame
code carries the column through its transformations like any other. A row-to-row step keeps it
as it is; an aggregation merges its inputs' pairs with :func:`merge_anchors`; a join concatenates
both sides' pairs (``F.concat``). An output row's pairs name the input tuples it derives from:
the writer draws a child edge per pair, so the output is anchored to every one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from reliable_kafka import codec
from reliable_kafka.errors import DecodeError

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "ANCHORS_COLUMN",
    "FAIL_COLUMN",
    "FAIL_REASON_COLUMN",
    "FAIL_RETRY_COLUMN",
    "ANCHORS_TYPE",
    "merge_anchors",
    "concat_anchors",
    "decode_anchors_header",
    "anchors_from_headers",
]

ANCHORS_COLUMN = "anchors"
FAIL_COLUMN = "rk_fail"
"""An optional boolean output column: a true value fails the row's anchors instead of writing it
(Storm's ``collector.fail``): their trees are FAILED and the spout redelivers them."""

FAIL_REASON_COLUMN = "rk_fail_reason"
"""An optional string output column: why a row with ``rk_fail`` failed, written to
``<topology>.failures`` (reliable_kafka.ops.failures); without it the reason is ``failed``."""

FAIL_RETRY_COLUMN = "rk_fail_retry"
"""An optional boolean output column: false on a row with ``rk_fail`` marks a poison pill (Storm's
``fail`` with ``retry=False``): the spout that owns its roots dead-letters their records at once
instead of redelivering them. Null or true: retried as usual."""

ANCHORS_TYPE = "array<struct<root:bigint,edge:bigint>>"
_DECODED_TYPE = f"struct<anchors:{ANCHORS_TYPE},error:string>"


def merge_anchors(column: str = ANCHORS_COLUMN) -> Column:
    """Aggregate expression: the distinct anchor pairs of every input row of a group.

    ``df.groupBy("word").agg(F.count("*").alias("n"), merge_anchors().alias("anchors"))``
    """
    from pyspark.sql import functions as F

    return F.array_distinct(F.flatten(F.collect_list(F.col(column))))


def concat_anchors(*columns: str) -> Column:
    """Row expression: the pairs of several anchor columns (e.g. both sides of a join)."""
    from pyspark.sql import functions as F

    return F.array_distinct(F.flatten(F.array(*[F.coalesce(F.col(c), F.array().cast(ANCHORS_TYPE)) for c in columns])))


def decode_anchors_header(
    headers: Iterable[Sequence[Any]] | None,
) -> tuple[list[tuple[int, int]] | None, str | None]:
    """(pairs, error) from a Kafka record's headers (list of (key, value)).

    No ``rk-anchors`` header: ``(None, None)``, the record is untracked. A header that does not
    decode: ``(None, reason)``. The last ``rk-anchors`` header wins, as in the Python bolt.
    """
    raw = None
    for header in headers or ():
        key, value = header[0], header[1]
        if key == codec.ANCHORS_HEADER:
            raw = value
    if raw is None:
        return None, None
    try:
        anchors = codec.decode_anchors(bytes(raw) if raw is not None else None)
    except DecodeError as error:
        return None, str(error)
    return list(anchors.items()), None


def _decode_row(headers: Iterable[Sequence[Any]] | None) -> tuple[list[tuple[int, int]] | None, str | None]:
    pairs, error = decode_anchors_header(headers)
    return (pairs, error)


def anchors_from_headers(headers_column: str = "headers") -> Column:
    """Column ``struct<anchors, error>`` decoded from the ``rk-anchors`` header (a Python UDF)."""
    from pyspark.sql import functions as F

    decode = F.udf(_decode_row, _DECODED_TYPE, useArrow=False)  # pyarrow is not a dependency
    return decode(F.col(headers_column))
