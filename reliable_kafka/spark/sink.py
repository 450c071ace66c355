"""The JVM output path (DESIGN 7.2): child edges, ``rk-anchors`` and their XOR in Spark SQL.

No output row passes through Python. Per batch (``write_outputs``):

1. the transform's outputs get a row id (``monotonically_increasing_id``) and, per distinct root
   of the row's ``anchors``, a child edge ``xxhash64(salt, row id, root, 3)`` (never 0); the
   ``rk-anchors`` header is built from those pairs by Spark SQL; the result is persisted;
2. an aggregation over the persisted outputs gives, per root, the XOR of its child edges
   (``bit_xor``) and whether a row with ``rk_fail`` named it; the driver gets them as arrays;
3. Spark's own Kafka sink writes the persisted rows.

The driver folds the XORs into the inputs' final acks and sends them only after step 3
succeeded. Edges are distinct within a root: the hash inputs are distinct (row ids are unique in
the batch, roots unique within a row), so two edges of one root are equal only if xxhash64
collides, odds about 2^-64 per pair, the odds DESIGN 2 already accepts for any XOR coincidence.

Both steps read the same persisted rows (an ``Observation`` on the aggregation counts them). A
retried write task reads the same cached rows and writes the same edges again: a tree
then completes only when each distinct child was acked an odd number of times, i.e. only after
every output's content was processed; acking both copies cancels them and the tree times out.
"""

from __future__ import annotations

from dataclasses import dataclass

import os

import numpy as np

from reliable_kafka import codec
from reliable_kafka.spark.anchors import ANCHORS_COLUMN, FAIL_COLUMN
from reliable_kafka.spark.derive import CHILD_TAG, ZERO_REPLACEMENT

__all__ = ["FAILPOINT_ENV", "FAILPOINT_PROPERTY", "ROW_ID", "CHILDREN", "header_version", "be64", "varint", "anchors_header_v1",
           "anchors_header_v2", "child_edges", "with_children", "child_xor_by_root", "ChildSummary",
           "write_outputs", "column_arrays", "field", "fold_by_root"]

FAILPOINT_ENV = "RK_SPARK_SINK_FAILPOINT"
FAILPOINT_PROPERTY = "rk.spark.sink.failpoint"
"""Testing failpoint: with ``RK_SPARK_SINK_FAILPOINT=<n>`` in the driver's environment, the write
task that reaches its (n+1)-th output row while the JVM system property ``rk.spark.sink.failpoint``
is ``armed`` clears the property and fails, after handing n rows to the sink (a task dying after
writing). Local mode only: the property lives in the driver's JVM, which runs the tasks."""

ROW_ID = "rk_row"
CHILDREN = "rk_children"
"""``array<struct<root, edge>>``: the row's child edge per distinct root (its header's pairs)."""


def header_version() -> int:
    """2 once ``codec.decode_anchors`` reads v2 headers (DESIGN 3), else 1, so that Python bolts
    of the same installation can always read what Spark writes."""
    probe = b"\x02\x20" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big")
    try:
        return 2 if codec.decode_anchors(probe) == {1: 2} else 1
    except Exception:
        return 1


def be64(column):
    """A bigint column as 8 big-endian bytes (``hex`` gives two's complement digits)."""
    from pyspark.sql import functions as F

    return F.unhex(F.lpad(F.hex(column), 16, "0"))


def _varint_hex(unsigned, max_bytes: int):
    """Hex digits of the unsigned LEB128 varint of a non-negative or two's-complement bigint."""
    from pyspark.sql import functions as F

    parts = []
    for k in range(max_bytes):
        rest = F.shiftrightunsigned(unsigned, 7 * k)
        # Java masks shift distances to 6 bits: a shift by 64 or more must not wrap around.
        more = F.shiftrightunsigned(unsigned, 7 * (k + 1)) != 0 if 7 * (k + 1) < 64 else F.lit(False)
        byte = (rest.bitwiseAND(F.lit(127))).bitwiseOR(F.when(more, F.lit(128)).otherwise(F.lit(0)))
        digits = F.lpad(F.hex(byte), 2, "0")
        parts.append(digits if k == 0 else F.when(rest != 0, digits).otherwise(F.lit("")))
    return F.concat(*parts)


def varint(unsigned, max_bytes: int = 10):
    """Bytes of the unsigned varint of a bigint column (Avro's encoding after zigzag)."""
    from pyspark.sql import functions as F

    return F.unhex(_varint_hex(unsigned.cast("long"), max_bytes))


def _zigzag(column):
    from pyspark.sql import functions as F

    return F.shiftleft(column, 1).bitwiseXOR(F.shiftright(column, 63))


def anchors_header_v2(pairs):
    """``rk-anchors`` v2 of an ``array<struct<root, edge>>``: 0x02, then Avro ``bytes`` (zigzag
    varint of 16n, then n big-endian int64 pairs). One pair, the common case, skips the array
    functions: 0x02 0x20 root edge."""
    from pyspark.sql import functions as F

    count = F.size(pairs).cast("long")
    first = F.element_at(pairs, 1)
    single = F.concat(F.lit(bytearray(b"\x02\x20")), be64(first["root"]), be64(first["edge"]))
    body = F.unhex(F.array_join(F.transform(
        pairs, lambda p: F.concat(F.lpad(F.hex(p["root"]), 16, "0"), F.lpad(F.hex(p["edge"]), 16, "0"))), ""))
    general = F.concat(F.lit(bytearray(b"\x02")), varint(count * 32, 5), body)
    return F.when(count == 1, single).otherwise(general)


def anchors_header_v1(pairs):
    """``rk-anchors`` v1 (0x01, then an Avro array of {root, edge} longs) built in Spark SQL."""
    from pyspark.sql import functions as F

    count = F.size(pairs).cast("long")
    first = F.element_at(pairs, 1)
    single = F.unhex(F.concat(F.lit("0102"), _varint_hex(_zigzag(first["root"]), 10),
                              _varint_hex(_zigzag(first["edge"]), 10), F.lit("00")))
    items = F.unhex(F.array_join(F.transform(
        pairs, lambda p: F.concat(_varint_hex(_zigzag(p["root"]), 10), _varint_hex(_zigzag(p["edge"]), 10))), ""))
    block = F.when(count > 0, F.concat(varint(_zigzag(count)), items)).otherwise(F.lit(bytearray()))
    general = F.concat(F.lit(bytearray(b"\x01")), block, F.lit(bytearray(b"\x00")))
    return F.when(count == 1, single).otherwise(general)


def child_edges(salt: int, anchors, row_id):
    """``array<struct<root, edge>>``: per distinct non-zero root of ``anchors``, the child edge
    ``xxhash64(salt, row_id, root, CHILD_TAG)`` (0 replaced, as ``derive.derive_child_edge``)."""
    from pyspark.sql import functions as F

    roots = F.array_distinct(F.transform(
        F.filter(anchors, lambda p: p.isNotNull() & p["root"].isNotNull() & (p["root"] != 0)),
        lambda p: p["root"]))

    def pair(root):
        h = F.xxhash64(F.lit(salt).cast("long"), row_id.cast("long"), root.cast("long"),
                       F.lit(CHILD_TAG).cast("int"))
        edge = F.when(h == 0, F.lit(ZERO_REPLACEMENT).cast("long")).otherwise(h)
        return F.struct(root.alias("root"), edge.alias("edge"))

    # One anchor, the common case, without higher-order functions (Spark interprets those).
    first = F.element_at(anchors, 1)["root"]
    single = (F.size(anchors) == 1) & first.isNotNull() & (first != 0)
    return F.when(single, F.array(pair(first))).otherwise(F.transform(roots, pair))


def with_children(outputs, salt: int, *, version: int = 2):
    """Outputs plus ``rk_row``, ``rk_children``, ``rk_failed`` and the Kafka sink's ``headers``
    (the user's headers minus any ``rk-anchors``, plus ours when the row has roots)."""
    from pyspark.sql import functions as F

    columns = set(outputs.columns)
    failed = F.coalesce(F.col(FAIL_COLUMN).cast("boolean"), F.lit(False)) if FAIL_COLUMN in columns else F.lit(False)
    rows = outputs.withColumn(ROW_ID, F.monotonically_increasing_id())
    rows = rows.withColumn(CHILDREN, child_edges(salt, F.col(ANCHORS_COLUMN), F.col(ROW_ID))) \
               .withColumn("rk_failed", failed)
    build = anchors_header_v2 if version == 2 else anchors_header_v1
    ours = F.when(F.size(CHILDREN) > 0, F.array(F.struct(F.lit(codec.ANCHORS_HEADER).alias("key"),
                                                        build(F.col(CHILDREN)).alias("value"))))
    ours = ours.otherwise(F.array().cast("array<struct<key:string,value:binary>>"))
    if "headers" in columns:
        theirs = F.filter(F.coalesce(F.col("headers"), F.array()), lambda h: h["key"] != codec.ANCHORS_HEADER)
        theirs = F.transform(theirs, lambda h: F.struct(h["key"].cast("string").alias("key"),
                                                        h["value"].cast("binary").alias("value")))
        headers = F.concat(theirs, ours)
    else:
        headers = ours
    return rows.withColumn("rk_headers", headers)


def _failpoint(outputs: int, column):
    from pyspark.sql import functions as F

    # The low 33 bits of monotonically_increasing_id are the row's index in its partition.
    index = F.col(ROW_ID).bitwiseAND(F.lit((1 << 33) - 1))
    # java_method returns String.valueOf(result): "null" when the property was not set.
    fire = (index == outputs) & (F.call_function(
        "java_method", F.lit("java.lang.System"), F.lit("clearProperty"), F.lit(FAILPOINT_PROPERTY)) == "armed")
    return F.when(fire, F.raise_error(F.lit(f"{FAILPOINT_ENV}: task fails on purpose after writing outputs"))) \
        .otherwise(column)


def child_xor_by_root(rows):
    """Per root of the rows' children: (root, XOR of the child edges of rows written, whether a
    ``rk_fail`` row named it). ``bit_xor`` over the exploded pairs."""
    from pyspark.sql import functions as F

    pairs = rows.select(F.explode(CHILDREN).alias("p"), "rk_failed")
    written_edge = F.when(~F.col("rk_failed"), F.col("p.edge")).otherwise(F.lit(0).cast("long"))
    return pairs.groupBy(F.col("p.root").alias("root")).agg(
        F.bit_xor(written_edge).alias("xor"), F.max("rk_failed").alias("failed"))


def column_arrays(df, names: list[str], *, sort_by: str | None = None) -> dict[str, np.ndarray]:
    """Columns of a (small-rowed) DataFrame as int64 arrays, gathered in the JVM into one row of
    arrays first: the driver unpickles a few lists, never one Python Row per record."""
    from pyspark.sql import functions as F

    first = sort_by or names[0]
    ordered = [first] + [n for n in names if n != first]
    packed = F.sort_array(F.collect_list(F.struct(*[F.col(n).cast("long").alias(n) for n in ordered])))
    row = df.agg(packed.alias("rows")).select(
        *[F.transform("rows", field(n)).alias(n) for n in ordered]).collect()[0]
    return {n: np.array(row[n] or [], dtype=np.int64) for n in names}


def field(name: str):
    """``lambda s: s[name]`` for ``F.transform`` (a one-argument lambda: PySpark reads a second
    parameter, even a defaulted one, as the element index)."""
    return lambda struct: struct[name]


def fold_by_root(roots: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One entry per distinct root, its vals XORed together (an ack's val may be any XOR split)."""
    if len(roots) == 0:
        return roots, vals
    unique, inverse = np.unique(roots, return_inverse=True)
    folded = np.zeros(len(unique), dtype=np.int64)
    np.bitwise_xor.at(folded, inverse, vals)
    return unique, folded


@dataclass(frozen=True)
class ChildSummary:
    """What one batch's write added to its trees: per root the XOR of its written child edges,
    the roots that ``rk_fail`` rows failed, and row counts."""

    roots: np.ndarray
    xors: np.ndarray
    failed_roots: np.ndarray
    written: int
    failed_rows: int


def write_outputs(outputs, *, salt: int, bootstrap_servers: str, topic: str, options: dict[str, str],
                  version: int, where: str) -> ChildSummary:
    """Steps 1-3 of the module docstring; raises when the sink failed (the caller then fails the
    batch's roots). Spark's Kafka sink (a V1 write) reports no observed metrics, so what it wrote
    is not compared with what the aggregation counted."""
    from pyspark import StorageLevel
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    rows = with_children(outputs, salt, version=version).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counted = Observation(f"rk-counted-{salt & 0xFFFFFFFF:x}")
        observed = rows.observe(counted, F.count(F.lit(1)).alias("rows"),
                                F.sum(F.col("rk_failed").cast("long")).alias("failed"))
        per_root = child_xor_by_root(observed)
        arrays = column_arrays(per_root.withColumn("failed", F.col("failed").cast("long")),
                               ["root", "xor", "failed"])
        totals = counted.get
        total, failed_rows = int(totals.get("rows") or 0), int(totals.get("failed") or 0)
        if total - failed_rows > 0:
            sink = rows.filter(~F.col("rk_failed"))
            types = dict(rows.dtypes)
            # Kafka takes string or binary; other types are written as text, as Python writers do.
            plain = {name: F.col(name) if types[name] in ("string", "binary") else F.col(name).cast("string")
                     for name in ("key", "value") if name in types}
            if os.environ.get(FAILPOINT_ENV):
                plain["value"] = _failpoint(int(os.environ[FAILPOINT_ENV]), plain["value"])
            columns = [column.alias(name) for name, column in plain.items()] + [F.col("rk_headers").alias("headers")]
            writer = sink.select(*columns).write.format("kafka") \
                .option("kafka.bootstrap.servers", bootstrap_servers).option("topic", topic)
            for key, value in options.items():
                writer = writer.option(key, value)
            writer.save()
        mask = arrays["failed"] != 0
        return ChildSummary(roots=arrays["root"], xors=arrays["xor"], failed_roots=arrays["root"][mask],
                            written=total - failed_rows, failed_rows=failed_rows)
    finally:
        rows.unpersist()
