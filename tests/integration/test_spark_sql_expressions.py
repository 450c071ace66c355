"""The Spark SQL expressions of the JVM output path (reliable_kafka.spark.sink, anchors) against
Python references: the bytes of the ``rk-anchors`` header, its decoding, the child edges and their
XOR per root. Spark in local mode, no broker."""

from __future__ import annotations

import random
import struct
from functools import reduce

import pytest
from pyspark.sql import functions as F

from reliable_kafka import codec
from reliable_kafka.spark import spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE, decode_anchors_v2, with_decoded_anchors
from reliable_kafka.spark.derive import derive_child_edge
from reliable_kafka.spark.sink import (
    CHILDREN,
    ROW_ID,
    anchors_header_v1,
    anchors_header_v2,
    child_xor_by_root,
    column_arrays,
    with_children,
)

pytestmark = pytest.mark.spark

HEADERS_TYPE = "array<struct<key:string,value:binary>>"


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
    roots = rng.sample(range(1, 2**40), n)
    pairs = []
    for i, root in enumerate(roots):
        root = extremes[i] if i < len(extremes) and rng.random() < 0.5 else root * rng.choice([1, -1])
        pairs.append((root, rng.choice(extremes + [rng.randrange(-(2**63), 2**63)])))
    return pairs


SIZES = [1, 1, 1, 2, 3, 4, 5, 17, 100, 600, 1]


def test_header_bytes_are_the_documented_layouts(spark):
    rng = random.Random(11)
    rows = [(random_pairs(rng, n),) for n in SIZES for _ in range(3)]
    df = spark.createDataFrame(rows, f"p {ANCHORS_TYPE}")
    got = df.select(anchors_header_v2(F.col("p")).alias("v2"), anchors_header_v1(F.col("p")).alias("v1")).collect()
    for (pairs,), row in zip(rows, got):
        assert bytes(row.v2) == v2_header(pairs), f"v2 header of {len(pairs)} pairs"
        assert bytes(row.v1) == codec.encode_anchors(pairs), f"v1 header of {len(pairs)} pairs"


def test_v2_headers_decode_in_spark_sql_and_bad_ones_say_why(spark):
    rng = random.Random(12)
    rows = [(v2_header(random_pairs(rng, n)),) for n in SIZES]
    bad = [b"\x02\x20abc", v2_header([(0, 5)]), v2_header([(3, 5), (3, 6)]), b"\x02", b"\x02\x22" + bytes(16)]
    df = spark.createDataFrame(rows + [(b,) for b in bad], "h binary")
    got = df.select(decode_anchors_v2(F.col("h")).alias("d")).collect()
    for (raw,), row in zip(rows, got):
        assert row.d.error is None
        n = (len(raw) - 2 - (len(raw) > 2 + 3 * 16) - (len(raw) > 2 + 511 * 16)) // 16
        assert [(p.root, p.edge) for p in row.d.anchors] == list(struct.iter_unpack(">qq", raw[-16 * n:]))
    errors = [row.d.error for row in got[len(rows):]]
    assert all(row.d.anchors is None for row in got[len(rows):])
    assert "does not hold" in errors[0] and "root id 0" in errors[1] and "twice" in errors[2]
    assert "does not hold" in errors[3] and "does not hold" in errors[4]


def test_readers_take_v1_v2_and_no_header(spark):
    rows = [
        ([("trace", b"x")],),
        ([("rk-anchors", codec.encode_anchors({3: 4})), ("trace", b"y")],),  # v1: through the codec
        ([("rk-anchors", codec.encode_anchors({9: 9})), ("rk-anchors", v2_header([(1, 2), (5, -6)]))],),
        (None,),
        ([("rk-anchors", b"\x07junk")],),
    ]
    df = spark.createDataFrame([(i, *row) for i, row in enumerate(rows)], f"i int, headers {HEADERS_TYPE}")
    got = {row.i: row.rk_decoded for row in with_decoded_anchors(df).collect()}
    pairs = {i: None if d.anchors is None else [(p.root, p.edge) for p in d.anchors] for i, d in got.items()}
    assert pairs == {0: None, 1: [(3, 4)], 2: [(1, 2), (5, -6)], 3: None, 4: None}
    assert [got[i].error is None for i in range(5)] == [True, True, True, True, False]
    assert "version 7" in got[4].error


def test_child_edges_are_distinct_within_a_root_never_zero_and_match_the_port(spark):
    """20,000 rows over 3 shared roots (and a repeated root within rows): per root, every edge
    differs; none is 0; each is the Python port's value for (salt, row id, root)."""
    salt = -7_777_777_777
    anchors = F.array(*[F.struct(F.lit(r).cast("long").alias("root"), F.lit(e).cast("long").alias("edge"))
                        for r, e in [(11, 1), (-22, 2), (11, 3), (2**63 - 1, 4)]])
    outputs = spark.range(20_000).repartition(3).select(F.col("id").cast("string").alias("value"),
                                                         anchors.alias("anchors"))
    rows = with_children(outputs, salt).select(ROW_ID, F.explode(CHILDREN).alias("c")) \
        .select(ROW_ID, "c.root", "c.edge")
    arrays = column_arrays(rows, [ROW_ID, "root", "edge"])
    assert len(arrays["root"]) == 3 * 20_000  # one child per distinct root of a row
    for root in (11, -22, 2**63 - 1):
        edges = arrays["edge"][arrays["root"] == root]
        assert len(edges) == 20_000 and len(set(edges.tolist())) == 20_000
    assert not (arrays["edge"] == 0).any()
    for i in range(0, len(arrays["root"]), 997):
        row_id, root, edge = (int(arrays[k][i]) for k in (ROW_ID, "root", "edge"))
        assert edge == derive_child_edge(salt, row_id, root)


def test_xor_per_root_is_the_python_reference_and_skips_failed_rows(spark):
    rng = random.Random(13)
    roots = [rng.randrange(-(2**63), 2**63) or 1 for _ in range(50)]
    data = []
    for i in range(3000):
        anchors = [(r, rng.randrange(-(2**63), 2**63)) for r in rng.sample(roots, rng.randint(1, 4))]
        data.append((f"v{i}", anchors, rng.random() < 0.05))
    outputs = spark.createDataFrame(data, f"value string, anchors {ANCHORS_TYPE}, rk_fail boolean").repartition(4)
    rows = with_children(outputs, 99).persist()
    try:
        computed = rows.select(ROW_ID, CHILDREN, "rk_failed").collect()
        per_root = column_arrays(child_xor_by_root(rows).withColumn("failed", F.col("failed").cast("long")),
                                 ["root", "xor", "failed"])
    finally:
        rows.unpersist()
    expected_xor: dict[int, int] = {}
    expected_failed: dict[int, bool] = {}
    for row in computed:
        for child in row[CHILDREN]:
            assert child.edge == derive_child_edge(99, row[ROW_ID], child.root)
            expected_failed[child.root] = expected_failed.get(child.root, False) or row.rk_failed
            if not row.rk_failed:
                expected_xor[child.root] = expected_xor.get(child.root, 0) ^ child.edge
    got = {r: (x, bool(f)) for r, x, f in zip(*(per_root[k].tolist() for k in ("root", "xor", "failed")))}
    assert got == {r: (expected_xor.get(r, 0), expected_failed[r]) for r in expected_failed}
    assert any(f for _, f in got.values()) and reduce(lambda a, b: a ^ b, expected_xor.values()) != 0
