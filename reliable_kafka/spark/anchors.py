"""Anchors as a DataFrame column: ``array<struct<root: bigint, edge: bigint>>``.

Each input row of a tracked batch carries the (root, edge) pairs of the tuple it is; DataFrame
code carries the column through its transformations like any other. A row-to-row step keeps it
as it is; an aggregation merges its inputs' pairs with :func:`merge_anchors`; a join concatenates
both sides' pairs (``F.concat``). An output row's pairs name the input tuples it derives from:
the writer draws a child edge per pair, so the output is anchored to every one of them.
"""

from __future__ import annotations

from reliable_kafka import codec
from reliable_kafka.errors import DecodeError

__all__ = [
    "ANCHORS_COLUMN",
    "FAIL_COLUMN",
    "ANCHORS_TYPE",
    "merge_anchors",
    "concat_anchors",
    "decode_anchors_header",
    "anchors_from_headers",
    "anchors_header_value",
    "decode_anchors_v2",
    "with_decoded_anchors",
]

ANCHORS_COLUMN = "anchors"
FAIL_COLUMN = "rk_fail"
"""An optional boolean output column: a true value fails the row's anchors instead of writing it
(Storm's ``collector.fail``): their trees are FAILED and the spout redelivers them."""

ANCHORS_TYPE = "array<struct<root:bigint,edge:bigint>>"
_DECODED_TYPE = f"struct<anchors:{ANCHORS_TYPE},error:string>"


def merge_anchors(column: str = ANCHORS_COLUMN):
    """Aggregate expression: the distinct anchor pairs of every input row of a group.

    ``df.groupBy("word").agg(F.count("*").alias("n"), merge_anchors().alias("anchors"))``
    """
    from pyspark.sql import functions as F

    return F.array_distinct(F.flatten(F.collect_list(F.col(column))))


def concat_anchors(*columns: str):
    """Row expression: the pairs of several anchor columns (e.g. both sides of a join)."""
    from pyspark.sql import functions as F

    return F.array_distinct(F.flatten(F.array(*[F.coalesce(F.col(c), F.array().cast(ANCHORS_TYPE)) for c in columns])))


def decode_anchors_header(headers) -> tuple[list[tuple[int, int]] | None, str | None]:
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


def _decode_row(headers):
    pairs, error = decode_anchors_header(headers)
    return (pairs, error)


def anchors_from_headers(headers_column: str = "headers"):
    """Column ``struct<anchors, error>`` decoded from the ``rk-anchors`` header (a Python UDF,
    any version the codec reads; :func:`with_decoded_anchors` keeps it for v1 headers only)."""
    from pyspark.sql import functions as F

    decode = F.udf(_decode_row, _DECODED_TYPE, useArrow=False)  # pyarrow is not a dependency
    return decode(F.col(headers_column))


def anchors_header_value(headers_column: str = "headers"):
    """The last ``rk-anchors`` header's value (binary), null when there is none."""
    from pyspark.sql import functions as F

    found = F.filter(F.col(headers_column), lambda h: h["key"] == codec.ANCHORS_HEADER)
    return F.try_element_at(found, F.lit(-1))["value"]


def _long_at(raw, position):
    """The big-endian int64 at 1-based ``position`` of a binary column (two 32-bit halves, so
    that no step overflows under ANSI mode)."""
    from pyspark.sql import functions as F

    def half(start):
        return F.conv(F.hex(raw.substr(start, F.lit(4))), 16, 10).cast("long")

    return F.shiftleft(half(position), 32).bitwiseOR(half(position + 4))


def decode_anchors_v2(raw):
    """``struct<anchors, error>`` from a v2 ``rk-anchors`` value, in Spark SQL: 0x02, the zigzag
    varint of 16n (1 to 3 bytes: up to 65,535 pairs), then n big-endian (root, edge) pairs. A
    length that does not match, a root 0 or a repeated root gives an error, as the codec's v1."""
    from pyspark.sql import functions as F

    from reliable_kafka.spark.sink import varint

    total = F.octet_length(raw)
    count = None
    start = None
    for width in (1, 2, 3):
        body = total - 1 - width
        n = F.floor(body / 16).cast("long")
        fits = (body >= 0) & (body % 16 == 0) & (raw.substr(F.lit(2), F.lit(width)) == varint(n * 32, 5))
        count = F.when(fits, n) if count is None else count.when(fits, n)
        start = F.when(fits, F.lit(2 + width)) if start is None else start.when(fits, F.lit(2 + width))
    pairs = F.when(count > 0, F.transform(
        F.sequence(F.lit(0).cast("long"), count - 1),
        lambda i: F.struct(_long_at(raw, start + i * 16).alias("root"),
                           _long_at(raw, start + i * 16 + 8).alias("edge"))))
    pairs = pairs.when(count == 0, F.array().cast(ANCHORS_TYPE))
    roots = F.transform(pairs, lambda p: p["root"])
    error = (F.when(count.isNull(), F.concat(F.lit("anchors: v2 header of "), total.cast("string"),
                                             F.lit(" bytes does not hold its byte count and whole pairs")))
             .when(F.exists(roots, lambda r: r == 0), F.lit("anchors: root id 0 is not a valid id"))
             .when(F.size(F.array_distinct(roots)) != F.size(roots), F.lit("anchors: a root appears twice")))
    return F.struct(F.when(error.isNull(), pairs).alias("anchors"), error.alias("error"))


def with_decoded_anchors(df, headers_column: str = "headers", *, column: str = "rk_decoded"):
    """``df`` plus ``column`` = ``struct<anchors, error>`` (both null: untracked). v2 headers and
    untracked rows are decoded in Spark SQL; only other versions (v1 from older writers, garbage)
    go through the codec in a Python UDF, on their own rows."""
    from pyspark.sql import functions as F

    raw = anchors_header_value(headers_column)
    in_sql = raw.isNull() | (raw.substr(F.lit(1), F.lit(1)) == F.lit(bytearray(b"\x02")))
    untracked = F.struct(F.lit(None).cast(ANCHORS_TYPE).alias("anchors"), F.lit(None).cast("string").alias("error"))
    sql_rows = df.filter(in_sql).withColumn(column, F.when(raw.isNull(), untracked).otherwise(decode_anchors_v2(raw)))
    python_rows = df.filter(~in_sql).withColumn(column, anchors_from_headers(headers_column))
    return sql_rows.unionByName(python_rows)
