"""reliable-kafka's Java functions (reliable_kafka.spark.jvm_functions) against the Spark SQL path
and the Python codec: the one-pair ``rk-anchors`` v2 header, the per-root XOR aggregate inside an
observation (retried tasks counted once), and ``writer.with_headers_jvm`` against
``writer.with_children``. Spark in local mode, no broker."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reliable_kafka import Tracking, codec
from reliable_kafka.spark import SparkOptions, spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE
from reliable_kafka.spark.derive import derive_child_edge
from reliable_kafka.spark.jvm_functions import MODE_ENV, use_jvm_functions
from reliable_kafka.spark.writer import (
    CHILDREN,
    HEADER,
    ROW_ID,
    anchors_header_v2_sql,
    children_from_metrics,
    observe_children,
    observe_headers_jvm,
    observed_metrics,
    output_rows_jvm,
    sink_rows,
    with_children,
    with_headers_jvm,
)

pytestmark = pytest.mark.spark

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def spark():
    import os

    os.environ[MODE_ENV] = "on"  # these tests are about the jar: never fall back silently
    session = spark_session("rk-test-spark-jvm-functions", master="local[2,3]")  # a failed task is retried
    assert use_jvm_functions(session)
    yield session
    session.stop()
    os.environ.pop(MODE_ENV, None)


def observed_write(rows) -> tuple[int, dict[int, int]]:
    """Write ``rows`` (with_headers_jvm) to the noop sink observed: (rows written, root -> XOR)."""
    observed, observation = observe_headers_jvm(rows)
    observed.write.format("noop").mode("overwrite").save()
    metrics = observed_metrics(observation, rows.sparkSession, timeout=60, what="test")
    assert len(bytes(metrics["pairs"])) == 16 * len(set(_roots(metrics))), "one pair per root"
    written, roots, xors = children_from_metrics(metrics, what="test")
    return written, dict(zip(roots.tolist(), xors.tolist()))


def _roots(metrics) -> list[int]:
    raw = bytes(metrics["pairs"])
    return [struct.unpack_from(">q", raw, i)[0] for i in range(0, len(raw), 16)]


@SLOW
@given(pairs=st.lists(st.tuples(longs, longs), min_size=1, max_size=200))
def test_one_pair_header_is_the_sql_expressions_and_the_codecs_bytes(spark, pairs):
    rows = [(root, edge, [(root, edge)]) for root, edge in pairs]
    df = spark.createDataFrame(rows, f"root bigint, edge bigint, p {ANCHORS_TYPE}")
    got = df.selectExpr("rk_anchors_v2(root, edge) AS jar", f"{anchors_header_v2_sql('p')} AS sql").collect()
    for (root, edge), row in zip(pairs, got):
        if root == 0:
            assert row.jar is None, "root 0 is untracked: no header"
            continue
        assert bytes(row.jar) == bytes(row.sql) == codec.encode_one_anchor(root, edge)
        assert codec.decode_anchors(bytes(row.jar)) == {root: edge}


def test_one_pair_header_of_nulls_is_null(spark):
    got = spark.sql("SELECT rk_anchors_v2(NULL, 1L) AS a, rk_anchors_v2(1L, NULL) AS b, rk_anchors_v2(0L, 1L) AS c")
    assert got.collect()[0].asDict() == {"a": None, "b": None, "c": None}


@SLOW
@given(
    rows=st.lists(
        st.lists(st.tuples(st.integers(min_value=-3, max_value=3) | longs | st.none(), longs) | st.none(), max_size=20)
        | st.none(),
        max_size=100,
    ),
    salt=longs,
)
def test_output_header_is_the_child_headers_bytes(spark, rows, salt):
    """rk_output_header (a static call on Catalyst's arrays) against rk_child_header (a UDF on Scala
    Rows) and the Python port of the child edges: null, empty and one-pair anchors, null pairs,
    null and 0 roots, repeated roots, more than 16 pairs."""
    from reliable_kafka.spark.derive import salt_sql

    data = [(i, pairs) for i, pairs in enumerate(rows)]
    df = spark.createDataFrame(data, f"row bigint, a {ANCHORS_TYPE}")
    salted = salt_sql(salt)
    got = df.selectExpr(
        "row", f"rk_output_header({salted}, row, a) AS new", f"rk_child_header({salted}, row, a) AS old"
    ).collect()
    assert len(got) == len(rows)
    for row in got:
        pairs = rows[row.row] or []
        roots = list(dict.fromkeys(p[0] for p in pairs if p is not None and p[0] is not None and p[0] != 0))
        if not roots:
            assert row.new is None and row.old is None
            continue
        expected = [(root, derive_child_edge(salt, row.row, root)) for root in roots]
        assert bytes(row.new) == bytes(row.old) == codec.encode_anchors(expected)


@SLOW
@given(
    rows=st.lists(
        st.lists(st.tuples(st.integers(min_value=-3, max_value=3) | longs, longs), min_size=0, max_size=5) | st.none(),
        max_size=300,
    ),
    partitions=st.integers(min_value=1, max_value=5),
)
def test_child_xor_is_the_python_fold_of_every_headers_pairs(spark, rows, partitions):
    """Headers of 0 to 5 pairs (repeated roots, root 0 too) over several partitions: one pair per
    root, its edges XORed, whatever the order Spark merges the tasks' buffers in."""
    headers = [(None if pairs is None else codec.encode_anchors(pairs),) for pairs in rows]
    expected: dict[int, int] = {}
    for pairs in rows:
        for root, edge in pairs or ():
            expected[root] = expected.get(root, 0) ^ edge
    df = spark.createDataFrame(headers, "h binary").repartition(partitions)
    (row,) = df.selectExpr("rk_child_xor(h) AS x").collect()
    raw = bytes(row.x)
    got = [struct.unpack_from(">qq", raw, i) for i in range(0, len(raw), 16)]
    assert len(got) == len({root for root, _ in got}) == len(expected)
    assert dict(got) == expected


@SLOW
@given(runs=st.lists(st.tuples(longs, st.integers(min_value=1, max_value=9)), min_size=1, max_size=400))
def test_child_xor_of_runs_of_one_root_across_the_tables_growth(spark, runs):
    """An explode's rows: each root's headers in a run (the buffer keeps the last root's slot), over
    more roots than the table's first sizes hold, so runs straddle its growth; a root may come back
    after other roots."""
    headers, expected = [], {}
    for i, (root, length) in enumerate(runs):
        for j in range(length):
            edge = (i * 7919 + j * 104729 + 1) & 0x7FFFFFFF
            headers.append((codec.encode_anchors([(root, edge)]),))
            expected[root] = expected.get(root, 0) ^ edge
    df = spark.createDataFrame(headers, "h binary").coalesce(1)
    (row,) = df.selectExpr("rk_child_xor(h) AS x").collect()
    raw = bytes(row.x)
    got = [struct.unpack_from(">qq", raw, i) for i in range(0, len(raw), 16)]
    assert len(got) == len(expected)
    assert dict(got) == expected


def test_child_xor_refuses_a_header_that_is_not_v2(spark):
    df = spark.createDataFrame([(bytes([1, 2, 3]),)], "h binary")
    with pytest.raises(Exception, match="not an rk-anchors v2 header"):
        df.selectExpr("rk_child_xor(h)").collect()


def test_child_xor_refuses_arguments_that_are_not_one_binary_header(spark):
    """A Catalyst aggregate of its own: its argument is checked when the query is analysed."""
    df = spark.createDataFrame([(1, b"x")], "n bigint, h binary")
    with pytest.raises(Exception, match="rk_child_xor takes a binary rk-anchors v2 header"):
        df.selectExpr("rk_child_xor(n)").collect()
    with pytest.raises(Exception, match="rk_child_xor takes one argument"):
        df.selectExpr("rk_child_xor(h, h)").collect()


def test_child_xor_per_group_merges_buffers_across_a_shuffle(spark):
    """In a grouped aggregation (partial buffers serialized, shuffled, merged): one XOR per root
    per group, the same as folding each group's pairs in Python."""
    rows: list = []
    expected: dict[int, dict[int, int]] = {}
    for i in range(2_000):
        group, root, edge = i % 3, (i * 7) % 50 - 25, i * 0x9E3779B97F4A7C15 % 2**63
        rows.append((group, codec.encode_anchors([(root, edge), (root ^ 0x55, edge + 1)])))
        xors = expected.setdefault(group, {})
        for r, e in ((root, edge), (root ^ 0x55, edge + 1)):
            xors[r] = xors.get(r, 0) ^ e
    df = spark.createDataFrame(rows, "g int, h binary").repartition(4)
    got = {}
    for row in df.groupBy("g").agg(F.expr("rk_child_xor(h)").alias("x")).collect():
        raw = bytes(row.x)
        got[row.g] = dict(struct.unpack_from(">qq", raw, i) for i in range(0, len(raw), 16))
    assert got == expected


def test_headers_are_the_sql_paths_bytes_and_decode(spark):
    """One pair, several (roots repeated, up to 40 a row), none, null, root 0, null pairs and
    roots, the user's headers: the jar path's ``rk_headers`` equal the SQL path's row for row (the
    same row ids), and the codec reads ours."""
    rng = random.Random(5)

    def pair(i: int):
        choice = rng.random()
        if choice < 0.03:
            return None
        root = None if choice < 0.06 else rng.choice([0, 1, 2, -(2**63), 2**63 - 1, rng.getrandbits(63)])
        return (root, i)

    def anchors(i: int):
        if i % 9 == 0:
            return None
        return [pair(i) for _ in range(rng.choice([0, 1, 1, 1, 2, 4, 17, 40]))]

    data = [
        (f"v{i}", anchors(i), [("trace", b"x"), (codec.ANCHORS_HEADER, b"old")] if i % 4 == 0 else None)
        for i in range(2000)
    ]
    schema = f"value string, anchors {ANCHORS_TYPE}, headers array<struct<key:string,value:binary>>"
    outputs = spark.createDataFrame(data, schema).repartition(3).persist()
    try:
        sql = {r.value: r for r in with_children(outputs, 17).collect()}
        jar = {r.value: r for r in with_headers_jvm(outputs, 17).collect()}
        # write_in_jvm's one projection: empty anchors read as NULL in it
        once = {r.value: r for r in with_headers_jvm(outputs, 17, empty_anchors_as_null=True).collect()}
        # what write_in_jvm writes: the headers built in the sink's projection
        sunk = {r.value: r for r in sink_rows(with_headers_jvm(outputs, 17, headers_column=False)).collect()}
        # ... in two DataFrame steps, the row id inside rk_output_header's call (write_in_jvm's path)
        rows, _ = output_rows_jvm(outputs, 17)
        assert rows.columns == ["value", "headers", HEADER]
        fewer = {r.value: r for r in rows.collect()}
    finally:
        outputs.unpersist()
    assert sql.keys() == jar.keys() == once.keys() == sunk.keys() == fewer.keys() and len(jar) == 2000
    for value, row in jar.items():
        assert row[ROW_ID] == sql[value][ROW_ID] == once[value][ROW_ID]
        assert (
            [(h.key, bytes(h.value)) for h in row.rk_headers]
            == [(h.key, bytes(h.value)) for h in sql[value].rk_headers]
            == [(h.key, bytes(h.value)) for h in once[value].rk_headers]
            == [(h.key, bytes(h.value)) for h in sunk[value].headers]
            == [(h.key, bytes(h.value)) for h in fewer[value].headers]
        )
        assert row[HEADER] == sunk[value][HEADER] == fewer[value][HEADER]
        children = {c.root: c.edge for c in sql[value][CHILDREN]}
        if children:
            assert codec.decode_anchors(bytes(row[HEADER])) == children
            assert all(edge == derive_child_edge(17, row[ROW_ID], root) for root, edge in children.items())
        else:
            assert row[HEADER] is None and codec.ANCHORS_HEADER not in [h.key for h in row.rk_headers]


def test_xor_per_root_observed_during_the_write_is_the_sql_paths(spark):
    rng = random.Random(13)
    roots = [rng.randrange(-(2**63), 2**63) or 1 for _ in range(50)]
    data = [
        (f"v{i}", [(r, rng.randrange(-(2**63), 2**63)) for r in rng.sample(roots, rng.choice([1, 1, 1, 2, 4]))])
        for i in range(3000)
    ]
    outputs = spark.createDataFrame(data, f"value string, anchors {ANCHORS_TYPE}").repartition(4).persist()
    try:
        computed = with_children(outputs, 99).select(ROW_ID, CHILDREN).collect()
        written, per_root = observed_write(with_headers_jvm(outputs, 99))
        observed, observation = output_rows_jvm(outputs, 99)  # write_in_jvm's rows, observed as it does
        observed.write.format("noop").mode("overwrite").save()
        fewer = children_from_metrics(observed_metrics(observation, spark, timeout=60, what="test"), what="test")
    finally:
        outputs.unpersist()
    expected: dict[int, int] = {}
    for row in computed:
        for child in row[CHILDREN]:
            expected[child.root] = expected.get(child.root, 0) ^ child.edge
    assert per_root == expected == dict(zip(fewer[1].tolist(), fewer[2].tolist()))
    assert written == len(computed) == fewer[0] == 3000


def test_rows_without_children_are_counted_and_no_rows_observe_no_roots(spark):
    rows = [("a", [(5, 6)]), ("b", None), ("c", [(5, 1), (6, 2)]), ("d", [(0, 1)]), ("e", [])]
    outputs = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}")
    written, per_root = observed_write(with_headers_jvm(outputs, 4))
    assert written == 5 and set(per_root) == {5, 6}
    assert observed_write(with_headers_jvm(outputs.filter("false"), 4)) == (0, {})


@pytest.mark.parametrize("path", ["sql", "jvm"])
def test_a_retried_task_is_observed_once(spark, path):
    """A write task dies after 300 rows passed the observation, once; Spark retries it. The
    metrics hold each written row's children exactly once, on both output paths (a task counted
    twice would cancel its edges out of the roots' XOR: trees would complete before those outputs
    were acked)."""
    prop = f"rk.test.observe.{random.randrange(2**32)}"
    system = spark.sparkContext._jvm.java.lang.System
    system.setProperty(prop, "armed")
    outputs = spark.range(0, 2000, 1, 2).selectExpr(
        "CAST(id AS STRING) AS value", "array(named_struct('root', id % 50 + 1, 'edge', id * 7 + 1)) AS anchors"
    )
    expected: dict[int, int] = {}
    for row in with_children(outputs, 5).select(CHILDREN).collect():  # no shuffle: the same row ids
        for child in row[CHILDREN]:
            expected[child.root] = expected.get(child.root, 0) ^ child.edge
    if path == "jvm":
        observed, observation = observe_headers_jvm(with_headers_jvm(outputs, 5))
    else:
        observed, observation = observe_children(with_children(outputs, 5))
    place = F.col(ROW_ID).bitwiseAND(F.lit((1 << 33) - 1))  # the row's place in its partition
    cleared = F.call_function("java_method", F.lit("java.lang.System"), F.lit("clearProperty"), F.lit(prop))
    fire = (place == 300) & (cleared != "null")  # once: then the property is gone ("null")
    dying = observed.withColumn("value", F.when(fire, F.raise_error(F.lit("a task dies"))).otherwise(F.col("value")))
    try:
        dying.write.format("noop").mode("overwrite").save()
        assert system.getProperty(prop) is None, "the failpoint never fired"
    finally:
        system.clearProperty(prop)
    metrics = observed_metrics(observation, spark, timeout=60, what="test")
    written, roots, xors = children_from_metrics(metrics, what="test")
    assert written == 2000
    assert dict(zip(roots.tolist(), xors.tolist())) == expected


def words_and_groups(df):
    """Three one-pair outputs per record (a split) and one output per ten records anchored to all
    ten (an aggregation: multi-pair rows), each valued ``payload|partition|offset|attempt``."""
    from reliable_kafka.spark import merge_anchors

    tag = F.concat_ws("|", *(F.col(c).cast("string") for c in ("partition", "offset", "attempt")))
    words = df.select(F.explode(F.array(*(F.lit(f"w{i}") for i in range(3)))).alias("w"), tag.alias("t"), "anchors")
    groups = df.groupBy(F.col("partition"), F.floor(F.col("offset") / 10).alias("g")).agg(
        F.min("offset").alias("offset"), F.min("attempt").alias("attempt"), merge_anchors().alias("anchors")
    )
    group_tag = F.concat_ws("|", F.lit("group"), *(F.col(c).cast("string") for c in ("partition", "offset", "attempt")))
    return words.select(F.concat_ws("|", "w", "t").alias("value"), "anchors").unionByName(
        groups.select(group_tag.alias("value"), "anchors")
    )


@pytest.mark.parametrize("path", ["jar", "sql"])
def test_spout_outputs_decode_downstream_and_every_tree_completes(spark, kafka_bootstrap, tmp_path, monkeypatch, path):
    """A SparkSpout over 200 records on either output path: a Python bolt decodes and acks every
    output (one-pair and multi-pair headers), every tree completes, the group commit reaches the end."""
    from spark_helpers import acked_downstream, new_topology, outcomes, outputs_by_root, started, topology_spout

    from reliable_kafka.core.kinds import OutcomeKind
    from reliable_kafka.offsets import lag
    from reliable_kafka.testing.records import produce_values

    monkeypatch.setenv(MODE_ENV, {"jar": "on", "sql": "off"}[path])
    topology, source, output = new_topology(f"rk-spark-jvm-{path}", kafka_bootstrap)
    placed = produce_values(kafka_bootstrap, source, [f"rec-{i}".encode() for i in range(200)])
    with acked_downstream(kafka_bootstrap, topology, output, timeout_ms=600_000) as log:  # no timing in the test
        spout = topology_spout(
            spark,
            kafka_bootstrap,
            topology,
            source,
            output,
            tmp_path / "ckpt",
            transform=words_and_groups,
            options=SparkOptions(max_offsets_per_trigger=100),
            tracking=Tracking(message_timeout_ms=600_000),
        )
        with started(spout):
            assert spout.run_until(lambda job: job.caught_up(), timeout=600, poll_interval=0.5), spout.progress()
            progress = spout.progress()
    assert lag(kafka_bootstrap, f"{topology}.job", source) == 0
    assert set(log.ok) == set(placed)
    assert progress["tracker"]["completed"] == 200 and progress["tracker"]["redelivered"] == 0
    decided = outcomes(kafka_bootstrap, topology)
    assert len(decided) == 200 and all(kinds == [OutcomeKind.COMPLETED] for kinds in decided.values())
    by_root = outputs_by_root(kafka_bootstrap, output)  # decodes every output's rk-anchors header
    assert set(by_root) == set(decided)
    for sources in by_root.values():
        assert sorted(payload for *_, payload in sources if payload != "group") == ["w0", "w1", "w2"]
        assert sum(payload == "group" for *_, payload in sources) == 1, "each root in one group output"


def test_a_new_salt_reuses_the_compiled_code(spark):
    """Each batch has its own salt: the jar path passes it as a binary literal too (to xxhash64 and
    to rk_child_header), so the second batch's stages compile nothing."""
    compilations = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    outputs = spark.range(0, 300, 1, 2).selectExpr(
        "CAST(id AS STRING) AS value",
        "IF(id % 3 = 0, array(named_struct('root', id + 1, 'edge', id), named_struct('root', id + 2, 'edge', id)), "
        "array(named_struct('root', id + 1, 'edge', id))) AS anchors",
    )

    def batch(salt: int) -> list:
        observed, observation = observe_headers_jvm(with_headers_jvm(outputs, salt))
        observed.write.format("noop").mode("overwrite").save()
        return observed_metrics(observation, spark, timeout=60, what="test")

    batch(11)
    before = compilations.getCount()
    batch(-(2**62))
    assert compilations.getCount() == before
