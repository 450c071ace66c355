"""The Spark SQL expressions of the JVM output path (reliable_kafka.spark.writer.write_in_jvm)
against Python references: the bytes of the ``rk-anchors`` header (decoded by the codec), the
child edges and their XOR per root. Spark in local mode, no broker."""

from __future__ import annotations

import random
import struct

import pytest
from pyspark.sql import functions as F

from reliable_kafka import codec
from reliable_kafka.spark import spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE
from reliable_kafka.spark.derive import derive_child_edge
from reliable_kafka.spark.writer import (
    CHILDREN,
    ROW_ID,
    anchors_header_v2,
    child_xor_by_root,
    column_arrays,
    with_children,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-sql", master="local[2]")
    yield session
    session.stop()


def v2_header(pairs) -> bytes:
    """DESIGN 3's v2 layout by hand: 0x02, zigzag varint of 16n, n big-endian (root, edge)."""
    zigzag, out = 32 * len(pairs), bytearray([2])
    while True:
        byte, zigzag = zigzag & 0x7F, zigzag >> 7
        out.append(byte | (0x80 if zigzag else 0))
        if not zigzag:
            break
    for root, edge in pairs:
        out += struct.pack(">qq", root, edge)
    return bytes(out)


def random_pairs(rng: random.Random, n: int) -> list[tuple[int, int]]:
    extremes = [-(2**63), 2**63 - 1, -1, 1]
    pairs = []
    for i, root in enumerate(rng.sample(range(1, 2**40), n)):
        root = extremes[i] if i < len(extremes) and rng.random() < 0.5 else root * rng.choice([1, -1])
        pairs.append((root, rng.choice(extremes + [rng.randrange(-(2**63), 2**63)])))
    return pairs


def test_header_bytes_are_the_documented_layout_and_the_codec_reads_them(spark):
    rng = random.Random(11)
    rows = [(random_pairs(rng, n),) for n in [1, 1, 2, 3, 4, 5, 17, 100, 600, 1] for _ in range(3)]
    got = spark.createDataFrame(rows, f"p {ANCHORS_TYPE}").select(anchors_header_v2("p").alias("h")).collect()
    for (pairs,), row in zip(rows, got):
        assert bytes(row.h) == v2_header(pairs), f"v2 header of {len(pairs)} pairs"
        assert codec.decode_anchors(bytes(row.h)) == dict(pairs)


def test_child_edges_are_distinct_within_a_root_never_zero_and_match_the_port(spark):
    """20,000 rows over 3 shared roots (a root repeated within rows): per root every edge
    differs, none is 0, each is the Python port's value for (salt, row id, root)."""
    salt = -7_777_777_777
    anchors = F.array(
        *[
            F.struct(F.lit(r).cast("long").alias("root"), F.lit(e).cast("long").alias("edge"))
            for r, e in [(11, 1), (-22, 2), (11, 3), (2**63 - 1, 4)]
        ]
    )
    outputs = (
        spark.range(20_000).repartition(3).select(F.col("id").cast("string").alias("value"), anchors.alias("anchors"))
    )
    rows = (
        with_children(outputs, salt).select(ROW_ID, F.explode(CHILDREN).alias("c")).select(ROW_ID, "c.root", "c.edge")
    )
    arrays = column_arrays(rows, [ROW_ID, "root", "edge"])
    assert len(arrays["root"]) == 3 * 20_000  # one child per distinct root of a row
    for root in (11, -22, 2**63 - 1):
        edges = arrays["edge"][arrays["root"] == root]
        assert len(edges) == 20_000 and len(set(edges.tolist())) == 20_000
    assert not (arrays["edge"] == 0).any()
    for i in range(0, len(arrays["root"]), 997):
        row_id, root, edge = (int(arrays[k][i]) for k in (ROW_ID, "root", "edge"))
        assert edge == derive_child_edge(salt, row_id, root)


def test_single_pair_rows_and_rows_without_roots(spark):
    rows = [("a", [(5, 6)]), ("b", [(0, 1)]), ("c", None), ("d", []), ("e", [(7, 1), (7, 2)])]
    outputs = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}")
    got = {r.value: r for r in with_children(outputs, 3).collect()}
    assert [(c.root, c.edge) for c in got["a"][CHILDREN]] == [(5, derive_child_edge(3, got["a"][ROW_ID], 5))]
    assert [(c.root, c.edge) for c in got["e"][CHILDREN]] == [(7, derive_child_edge(3, got["e"][ROW_ID], 7))]
    for value in "bcd":
        assert got[value][CHILDREN] == [] and got[value].rk_headers == []
    (header,) = got["a"].rk_headers
    assert header.key == codec.ANCHORS_HEADER
    assert codec.decode_anchors(bytes(header.value)) == {5: derive_child_edge(3, got["a"][ROW_ID], 5)}


def test_user_headers_are_kept_and_their_rk_anchors_replaced(spark):
    headers = "array<struct<key:string,value:binary>>"
    rows = [("a", [(5, 6)], [("trace", b"x"), (codec.ANCHORS_HEADER, b"old")])]
    outputs = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}, headers {headers}")
    (row,) = with_children(outputs, 1).collect()
    assert [h.key for h in row.rk_headers] == ["trace", codec.ANCHORS_HEADER]
    assert bytes(row.rk_headers[0].value) == b"x"
    assert bytes(row.rk_headers[1].value) != b"old"


def test_xor_per_root_is_the_python_reference(spark):
    rng = random.Random(13)
    roots = [rng.randrange(-(2**63), 2**63) or 1 for _ in range(50)]
    data = [
        (f"v{i}", [(r, rng.randrange(-(2**63), 2**63)) for r in rng.sample(roots, rng.randint(1, 4))])
        for i in range(3000)
    ]
    outputs = spark.createDataFrame(data, f"value string, anchors {ANCHORS_TYPE}").repartition(4)
    rows = with_children(outputs, 99).persist()
    try:
        computed = rows.select(ROW_ID, CHILDREN).collect()
        per_root = column_arrays(child_xor_by_root(rows), ["root", "xor", "rows"])
    finally:
        rows.unpersist()
    expected: dict[int, int] = {}
    for row in computed:
        for child in row[CHILDREN]:
            assert child.edge == derive_child_edge(99, row[ROW_ID], child.root)
            expected[child.root] = expected.get(child.root, 0) ^ child.edge
    assert dict(zip(per_root["root"].tolist(), per_root["xor"].tolist())) == expected
    assert int(per_root["rows"].sum()) == len(computed) == 3000


def test_rows_without_children_are_counted_in_the_null_root_group(spark):
    rows = [("a", [(5, 6)]), ("b", None), ("c", [(5, 1), (6, 2)]), ("d", [(0, 1)])]
    outputs = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}")
    per_root = column_arrays(child_xor_by_root(with_children(outputs, 4)), ["root", "xor", "rows"])
    got = {r: n for r, n in zip(per_root["root"].tolist(), per_root["rows"].tolist())}
    assert sum(got.values()) == 4 and got[0] == 2  # b and d: no children (null root, read as 0)


def test_with_children_is_the_same_without_lateral_column_aliases(spark):
    """One projection (lateral aliases, Spark's default) or three: the same row ids, children and headers."""
    rows = [(f"v{i}", [(i % 7 + 1, i)], [("trace", b"x")]) for i in range(500)]
    schema = f"value string, anchors {ANCHORS_TYPE}, headers array<struct<key:string,value:binary>>"
    outputs = spark.createDataFrame(rows, schema).repartition(3).persist()
    key = "spark.sql.lateralColumnAlias.enableImplicitResolution"
    try:
        one = sorted(with_children(outputs, 5).collect())
        spark.conf.set(key, "false")
        three = sorted(with_children(outputs, 5).collect())
    finally:
        spark.conf.unset(key)
        outputs.unpersist()
    assert one == three and len(one) == 500
    assert all(c.edge == derive_child_edge(5, row[ROW_ID], c.root) for row in one for c in row[CHILDREN])


def test_a_new_salt_reuses_the_compiled_code(spark):
    """Each batch has its own salt: as a binary literal it reaches the generated code by reference,
    so the second batch's stage compiles nothing (a bigint literal is inlined: a compile per batch)."""
    from reliable_kafka.spark.derive import edge_column, root_column

    compilations = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    source = spark.range(0, 300, 1, 2).selectExpr(
        "'orders' AS topic", "CAST(id % 2 AS INT) AS partition", "id AS offset", "1 AS attempt"
    )

    def batch(salt: int) -> list:
        ids = source.select(root_column(salt).alias("root"), edge_column(salt).alias("edge"))
        outputs = ids.selectExpr("'w' AS value", "array(named_struct('root', root, 'edge', edge)) AS anchors")
        return with_children(outputs, salt).selectExpr(f"bit_xor(xxhash64({CHILDREN}, rk_headers)) AS s").collect()

    batch(11)
    before = compilations.getCount()
    batch(-(2**62))
    assert compilations.getCount() == before
