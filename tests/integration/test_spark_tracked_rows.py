"""``TrackedRows`` (the task side of a single-query Spark spout, ``jvm/TrackedRows.java``) through
``single_query.tracked_rows`` on static DataFrames, Spark in local mode, no broker.

The rows it writes are decoded as the acker and a downstream bolt would read them (the
``rk-anchors`` header, AckBatch values) and checked against the protocol (docs/spark.md, "One
streaming query"): per source record with rows, one INIT whose val is the XOR of the child edges
in its outputs' headers, after those outputs in the task's order, in the ack partition of its
root (root mod N, unsigned), FAIL beside it iff one of its rows had ``rk_fail``; nothing for a
record without rows; edges never 0 and new for every attempt; a row anchored to two records fails
the task.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from pyspark.sql import functions as F

from reliable_kafka import codec
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.spark import spark_session
from reliable_kafka.spark.anchors import ANCHORS_TYPE
from reliable_kafka.spark.jvm_functions import MODE_ENV, use_jvm_functions
from reliable_kafka.spark.single_query import HEADERS_TYPE, tracked_rows

pytestmark = pytest.mark.spark

OUT, ACKS, PARTITIONS, SENDER = "words", "topo.acks", 3, -4_242_424_242  # a negative task id: zigzag
ANCHORS_HEADER = "rk-anchors"
INIT, FAIL = int(EventKind.INIT), int(EventKind.FAIL)


@pytest.fixture(scope="module")
def spark():
    os.environ[MODE_ENV] = "on"  # TrackedRows is in the functions jar: never run without it
    session = spark_session("rk-test-spark-tracked-rows", master="local[2]")  # a failed task fails the job
    assert use_jvm_functions(session)
    yield session
    session.stop()
    os.environ.pop(MODE_ENV, None)


# --- what goes in --------------------------------------------------------------------------------


@dataclass
class Input:
    """A transform's outputs, a task (Spark partition) at a time: the rows of each source record
    together, as a row-wise plan makes them."""

    partitions: list[list[tuple]] = field(default_factory=list)  # rows: key, value, anchors, rk_fail[, headers]
    rows_of: dict[int, list[bytes]] = field(default_factory=lambda: defaultdict(list))  # root -> its values
    failed: set[int] = field(default_factory=set)  # roots with an rk_fail row
    no_rows: set[int] = field(default_factory=set)  # roots of records that made no row
    untracked: list[bytes] = field(default_factory=list)  # values of rows without a root
    theirs: dict[bytes, list[tuple[str, bytes]] | None] = field(default_factory=dict)  # value -> own headers
    keys: dict[bytes, bytes | None] = field(default_factory=dict)  # value -> key


def random_root(rng: random.Random) -> int:
    return rng.choice([-1, 1]) * rng.randrange(1, 2**63)  # negative roots too: their partition is unsigned


def made_input(seed: int, *, headers: bool) -> Input:
    """Three tasks of 6 to 12 records: 0 to 4 rows a record, some rk_fail (a record all rk_fail too),
    rows without a root between records, a record's root repeated or beside a 0 in its anchors."""
    rng = random.Random(seed)
    made = Input()
    for task in range(3):
        rows: list[tuple] = []
        for record in range(rng.randint(6, 12)):
            root = random_root(rng)
            count = rng.choice([0, 0, 1, 1, 2, 3, 4]) if (task, record) != (0, 1) else 2  # (0, 1): all rk_fail
            if count == 0:
                made.no_rows.add(root)
            for i in range(count):
                fail = rng.random() < 0.15 or (task, record) == (0, 1)
                value = f"{task}/{record}/{i}".encode()
                anchors = rng.choice(
                    [[(root, 11)], [(root, 11), (root, 12)], [(0, 5), (root, 13)], [(root, 14), (0, 0)]]
                )
                own = rng.choice([None, [], [("trace", value)], [("a", b"1"), ("b", b"2")]])
                rows.append((f"k{record}", value.decode(), anchors, fail, *([own] if headers else [])))
                if fail:
                    made.failed.add(root)
                else:
                    made.rows_of[root].append(value)
                    made.theirs[value] = own
                    made.keys[value] = f"k{record}".encode()
            if rng.random() < 0.3:  # an untracked row between two records
                value = f"{task}/{record}/untracked".encode()
                own = [("u", b"1")] if rng.random() < 0.5 else None
                rows.append(
                    (None, value.decode(), rng.choice([None, [], [(0, 9)]]), False, *([own] if headers else []))
                )
                made.untracked.append(value)
                made.theirs[value] = own
                made.keys[value] = None
        made.partitions.append(rows)
    outputs = {root for root, values in made.rows_of.items() if values}
    assert made.no_rows and made.untracked and made.failed - outputs and made.failed & outputs, "every case made"
    assert any(root < 0 for root in outputs) and all(len(rows) > 5 for rows in made.partitions)
    return made


def dataframe(spark, made: Input, *, headers: bool):
    schema = f"key string, value string, anchors {ANCHORS_TYPE}, rk_fail boolean"
    if headers:
        schema += f", headers {HEADERS_TYPE}"
    # one element of parallelize per task, flattened: each task's rows stay together, in order
    rdd = spark.sparkContext.parallelize(made.partitions, len(made.partitions)).flatMap(lambda rows: rows)
    return spark.createDataFrame(rdd, schema)


# --- what comes out ------------------------------------------------------------------------------


@dataclass
class Written:
    """The sink rows of one run, decoded."""

    edges: dict[int, dict[bytes, int]] = field(default_factory=lambda: defaultdict(dict))  # root -> value -> edge
    outputs: dict[bytes, tuple[int, int, list]] = field(default_factory=dict)  # value -> task, position, headers
    keys: dict[bytes, bytes | None] = field(default_factory=dict)  # value -> key
    last_output: dict[int, tuple[int, int]] = field(default_factory=dict)  # root -> (task, position)
    inits: dict[int, list[tuple[int, int, int]]] = field(default_factory=lambda: defaultdict(list))  # task, pos, val
    fails: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))  # root -> task, pos
    ack_rows: list[tuple[int, int, codec.AckBatch]] = field(default_factory=list)  # task, partition, batch


def run(sink) -> Written:
    """Collect ``sink`` with each row's task, in each task's order, and decode it."""
    rows = sink.withColumn("task", F.spark_partition_id()).collect()  # collect keeps each task's order
    written = Written()
    for position, row in enumerate(rows):
        if row.topic == OUT:
            assert row.partition is None, "an output goes where the producer's partitioner puts it"
            value = bytes(row.value)
            headers = [(h.key, bytes(h.value)) for h in row.headers or []]
            written.outputs[value] = (row.task, position, headers)
            written.keys[value] = None if row.key is None else bytes(row.key)
            ours = [v for k, v in headers if k == ANCHORS_HEADER]
            assert len(ours) <= 1, f"{value!r}: one rk-anchors header at most, got {headers}"
            if ours:
                [(root, edge)] = codec.decode_anchors(ours[0]).items()
                assert edge != 0, f"{value!r}: a child edge of 0"
                written.edges[root][value] = edge
                written.last_output[root] = (row.task, position)
            continue
        assert row.topic == ACKS, row.topic
        assert row.key is None and row.headers is None, "an ack record has no key and no headers"
        batch = codec.decode_ack_batch(bytes(row.value))
        assert batch.sender == SENDER and len(batch) > 0
        written.ack_rows.append((row.task, row.partition, batch))
        for kind, root, val in zip(batch.kinds.tolist(), batch.roots.tolist(), batch.vals.tolist()):
            assert (root % 2**64) % PARTITIONS == row.partition, f"root {root} in ack partition {row.partition}"
            if kind == INIT:
                written.inits[root].append((row.task, position, val))
            else:
                assert kind == FAIL and val == 0, (kind, root, val)
                written.fails[root].append((row.task, position))
    return written


def sink_of(df, *, flush_ms: int = 0):
    return tracked_rows(
        df, output_topic=OUT, acks_topic=ACKS, ack_partitions=PARTITIONS, sender=SENDER, flush_ms=flush_ms
    )


def xor(values) -> int:
    total = 0
    for value in values:
        total ^= value
    return total


def check_protocol(made: Input, written: Written) -> None:
    with_rows = set(made.rows_of) | made.failed
    assert set(written.inits) == with_rows, "one INIT for each record with rows, none for the others"
    assert not (set(written.inits) | set(written.fails)) & made.no_rows
    assert set(written.fails) == made.failed, "FAIL for the records with an rk_fail row, and only them"
    for root in with_rows:
        [(task, position, val)] = written.inits[root]
        edges = written.edges.get(root, {})
        assert set(edges) == set(made.rows_of[root]), f"{root}: one output per row without rk_fail"
        assert val == xor(edges.values()), f"{root}: INIT val is not the XOR of its outputs' child edges"
        if edges:
            assert written.last_output[root][0] == task, f"{root}: INIT written by another task than its rows"
            assert written.last_output[root][1] < position, f"{root}: INIT before one of its outputs"
        if root in made.failed:
            [(fail_task, fail_position)] = written.fails[root]
            assert (fail_task, fail_position) == (task, position), f"{root}: FAIL not in its INIT's ack record"
    for value in made.untracked:
        assert value in written.outputs, f"the untracked row {value!r} is written"
        assert not any(k == ANCHORS_HEADER for k, _ in written.outputs[value][2]), "untracked: no rk-anchors"
    assert len(written.outputs) == sum(map(len, made.rows_of.values())) + len(made.untracked)
    if made.keys:
        assert written.keys == made.keys, "each output's key, as bytes"


# --- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_record_gets_one_init_of_its_outputs_edges_after_them(spark, seed):
    made = made_input(seed, headers=False)
    sink = sink_of(dataframe(spark, made, headers=False))
    first = run(sink)
    check_protocol(made, first)
    for value, (_, _, headers) in first.outputs.items():
        assert [k for k, _ in headers] == ([ANCHORS_HEADER] if value not in made.untracked else [])
    second = run(sink)  # the same plan run again: another attempt of the same tasks
    check_protocol(made, second)
    for root, edges in first.edges.items():
        again = second.edges[root]
        assert not set(edges.values()) & set(again.values()), f"{root}: an attempt reused a child edge"
        if edges:
            assert first.inits[root][0][2] != second.inits[root][0][2], f"{root}: the same INIT twice"


def test_the_outputs_own_headers_are_kept_beside_rk_anchors(spark):
    made = made_input(4, headers=True)
    sink = sink_of(dataframe(spark, made, headers=True))
    written = run(sink)
    check_protocol(made, written)
    assert any(made.theirs.values()), "some rows have headers of their own"
    for value, (_, _, headers) in written.outputs.items():
        theirs = made.theirs[value] or []
        if value in made.untracked:
            assert headers == theirs, f"{value!r}: an untracked row keeps its headers as they were"
        else:
            assert headers[:-1] == theirs and headers[-1][0] == ANCHORS_HEADER, f"{value!r}: {headers}"


def test_without_key_and_rk_fail_columns_every_row_is_an_output(spark):
    rows = [("a", [(5, 1)]), ("b", [(5, 1)]), ("c", [(-6, 1)]), ("d", None), ("e", [(7, 1)])]
    df = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}").coalesce(1)
    written = run(sink_of(df))
    assert sorted(written.outputs) == [b"a", b"b", b"c", b"d", b"e"]
    assert {root: len(inits) for root, inits in written.inits.items()} == {5: 1, -6: 1, 7: 1} and not written.fails
    assert written.inits[5][0][2] == xor(written.edges[5].values()) and len(written.edges[5]) == 2


@pytest.mark.parametrize("flush_ms", [0, 1])
def test_many_records_a_task_are_written_in_several_ack_records(spark, flush_ms):
    """Two tasks of 15,000 records (0 to 3 rows each, every 7th record's first row rk_fail), built
    in the JVM: more INITs than one ack record holds (TrackedRows.MAX_ENTRIES, 10,000), and with
    flush_ms the timed flush between rows as in real-time mode."""
    records = spark.range(0, 30_000, 1, 2).selectExpr("id", "xxhash64(id) | 1 AS root")
    rows = records.selectExpr("id", "root", "posexplode(array_repeat(1, CAST(id % 4 AS INT))) AS (pos, one)")
    df = rows.selectExpr(
        "CAST(id AS STRING) AS key",
        "concat(CAST(id AS STRING), '/', CAST(pos AS STRING)) AS value",
        "array(named_struct('root', root, 'edge', 1L)) AS anchors",
        "(id % 7 = 0 AND pos = 0) AS rk_fail",
    )
    made = Input()
    for record in records.collect():
        count, fails = record.id % 4, record.id % 7 == 0
        if count == 0:
            made.no_rows.add(record.root)
        elif fails:
            made.failed.add(record.root)
        for pos in range(1 if fails else 0, count):
            made.rows_of[record.root].append(f"{record.id}/{pos}".encode())
    written = run(sink_of(df, flush_ms=flush_ms))
    check_protocol(made, written)
    per_task = defaultdict(int)
    for task, _, _ in written.ack_rows:
        per_task[task] += 1
    assert sorted(per_task) == [0, 1] and min(per_task.values()) > PARTITIONS, "a task's INITs in several records"


def test_a_row_anchored_to_two_records_fails_its_task(spark):
    rows = [("a", [(5, 1)]), ("b", [(5, 1), (0, 2), (5, 3)]), ("c", [(6, 1), (7, 2)])]
    df = spark.createDataFrame(rows, f"value string, anchors {ANCHORS_TYPE}").coalesce(1)
    with pytest.raises(Exception) as failed:
        run(sink_of(df))
    assert "an output row is anchored to two source records (6, 7)" in str(failed.value)


def test_an_untracked_row_among_a_records_rows_does_not_split_its_init(spark):
    """Record R makes three rows: tracked, untracked (no anchors), tracked. 9,999 one-row records
    come before it in its task, so R's first part is the 10,000th entry queued."""
    root = 4_242
    before = spark.range(0, 9_999, 1, 1).selectExpr(
        "CAST(id AS STRING) AS value", "array(named_struct('root', xxhash64(id) | 1, 'edge', 1L)) AS anchors"
    )
    record = spark.createDataFrame(
        [("R/0", [(root, 1)]), ("R/untracked", None), ("R/1", [(root, 1)])], f"value string, anchors {ANCHORS_TYPE}"
    )
    written = run(sink_of(before.union(record).coalesce(1)))
    assert set(written.edges[root]) == {b"R/0", b"R/1"}
    split = [val for _, _, val in written.inits[root]]
    assert split == [xor(written.edges[root].values())], (
        f"R's INITs {split}: the first, {split[0]} (the edge of R/0 alone), was written in an ack record "
        f"before R/1 (positions {[p for _, p, _ in written.inits[root]]}, R/1 at {written.outputs[b'R/1'][1]})"
    )
