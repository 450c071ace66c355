"""The Spark SQL expressions of the JVM output path (reliable_kafka.spark.writer.write_in_jvm)
against Python references: the bytes of the ``rk-anchors`` header (decoded by the codec), the
child edges, and their XOR per root as observed during a write (Spark's ``noop`` sink, a V2 write
as the Kafka sink's). Spark in local mode, no broker."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from pyspark.sql import functions as F

from reliable_kafka import codec
from reliable_kafka.spark import spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE
from reliable_kafka.spark.derive import derive_child_edge
from reliable_kafka.spark.writer import (
    CHILDREN,
    PAIRS,
    ROW_ID,
    anchors_header_v2,
    children_from_metrics,
    observe_children,
    observed_metrics,
    with_children,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-sql", master="local[2,3]")  # a failed task is retried
    yield session
    session.stop()


def column_arrays(df, names: list[str]) -> dict[str, np.ndarray]:
    """Long columns as int64 arrays, packed into one row of arrays in the JVM (one Row, not 60,000)."""
    fields = ", ".join(f"'{n}', `{n}`" for n in names)
    packed = f"collect_list(named_struct({fields}))"
    row = df.selectExpr(*[f"transform({packed}, s -> s.`{n}`) AS `{n}`" for n in names]).collect()[0]
    return {n: np.array(row[n], dtype=np.int64) for n in names}


def observed_write(rows) -> tuple[int, dict[int, int]]:
    """Write ``rows`` (with_children) to the noop sink observed: (rows written, root -> XOR)."""
    observed, observation = observe_children(rows)
    observed.write.format("noop").mode("overwrite").save()
    metrics = observed_metrics(observation, rows.sparkSession, timeout=60, what="test")
    written, roots, xors = children_from_metrics(metrics, what="test")
    return written, dict(zip(roots.tolist(), xors.tolist()))


def v2_header(pairs) -> bytes:
    """docs/design.md section 3's v2 layout by hand: 0x02, zigzag varint of 16n, n big-endian (root, edge)."""
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


def test_xor_per_root_observed_during_the_write_is_the_python_reference(spark):
    rng = random.Random(13)
    roots = [rng.randrange(-(2**63), 2**63) or 1 for _ in range(50)]
    data = [
        (f"v{i}", [(r, rng.randrange(-(2**63), 2**63)) for r in rng.sample(roots, rng.randint(1, 4))])
        for i in range(3000)
    ]
    outputs = spark.createDataFrame(data, f"value string, anchors {ANCHORS_TYPE}").repartition(4).persist()
    try:  # persisted: the reference's action sees the same rows in the same places as the write
        computed = with_children(outputs, 99).select(ROW_ID, CHILDREN).collect()
        written, per_root = observed_write(with_children(outputs, 99))
    finally:
        outputs.unpersist()
    expected: dict[int, int] = {}
    for row in computed:
        for child in row[CHILDREN]:
            assert child.edge == derive_child_edge(99, row[ROW_ID], child.root)
            expected[child.root] = expected.get(child.root, 0) ^ child.edge
    assert per_root == expected
    assert written == len(computed) == 3000


def test_pairs_are_the_headers_body(spark):
    rows = [("a", [(5, 6)]), ("b", [(7, 1), (8, 2), (9, 3)]), ("c", None)]
    outputs = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}")
    got = {r.value: r for r in with_children(outputs, 2).collect()}
    for value in "ab":
        header = bytes(got[value].rk_headers[0].value)
        pairs = [(c.root, c.edge) for c in got[value][CHILDREN]]
        assert bytes(got[value][PAIRS]) == b"".join(struct.pack(">qq", *p) for p in pairs)
        assert header == v2_header(pairs) and header.endswith(bytes(got[value][PAIRS]))
    assert bytes(got["c"][PAIRS]) == b""


def test_rows_without_children_are_counted_and_give_no_roots(spark):
    rows = [("a", [(5, 6)]), ("b", None), ("c", [(5, 1), (6, 2)]), ("d", [(0, 1)]), ("e", [])]
    outputs = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}")
    written, per_root = observed_write(with_children(outputs, 4))
    assert written == 5 and set(per_root) == {5, 6}


def test_outputs_the_transform_filtered_away_are_observed_as_none(spark):
    outputs = spark.createDataFrame([("a", [(5, 6)])], f"value string, anchors {ANCHORS_TYPE}").filter("false")
    assert observed_write(with_children(outputs, 4)) == (0, {})


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
