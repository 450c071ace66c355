"""Writing a batch's outputs with their anchors: in the JVM (``write_in_jvm``, DESIGN 7.2, the
spout's path), or from Python executor tasks with the child-edge acks (``OutputWriter``: outputs
with ``rk_fail``, and ``SparkBolt``).

``OutputWriter`` runs in Spark tasks (``foreachPartition``). For every output row and every
(root, input edge) pair in its ``anchors`` it draws a fresh child edge ``c``: the output's
``rk-anchors`` header gets ``root -> XOR of its c``, and the task owes the acker the same XOR per
root. After the partition's outputs it sends those ACK entries (packed per ack partition) and
flushes; any delivery failure raises, so Spark retries the task. The task therefore reports
success only when every child it created is both written and added to its tree (DESIGN 7.1, step
2). A task that dies midway leaves children that were never added: their trees cannot complete
and time out (at-least-once), never complete early. A retried task draws new edges.

Producers are cached per Python worker process (Spark reuses workers), never shared across a fork.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reliable_kafka import codec
from reliable_kafka.core.anchors import anchor_to_pairs
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import ConfigError, DeliveryError, StateError, WaitTimeoutError
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.clients import new_producer
from reliable_kafka.kafka.produce import flush_or_raise
from reliable_kafka.ops.failures import FailureLog, FailureRecord
from reliable_kafka.spark.anchors import ANCHORS_COLUMN, FAIL_COLUMN, FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN

__all__ = ["OutputWriter", "to_bytes"]

_producers: dict[tuple, Any] = {}


def _producer(bootstrap_servers: str, kafka_config: dict):
    key = (os.getpid(), bootstrap_servers, tuple(sorted((k, repr(v)) for k, v in kafka_config.items())))
    producer = _producers.get(key)
    if producer is None:
        producer = _producers[key] = new_producer(bootstrap_servers, kafka_config, ack_sender="spark writer task")
    return producer


def to_bytes(value, what: str) -> bytes | None:
    """A key or value as bytes: bytes/bytearray as they are, str as UTF-8, numbers as text."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (int, float)):
        return str(value).encode("ascii")
    raise ConfigError(
        f"spark output: {what} of type {type(value).__name__} cannot be written; cast the column to string or binary"
    )


@dataclass(frozen=True)
class OutputWriter:
    """Callable for ``DataFrame.foreachPartition`` over rows with value, anchors and optionally
    key, headers (``array<struct<key,value>>``), ``rk_fail`` (see :data:`FAIL_COLUMN`), ``rk_fail_reason``
    and ``rk_fail_retry``.

    ``outputs``/``failed_rows`` are optional Spark accumulators counting written and failed rows.
    """

    bootstrap_servers: str
    output_topic: str
    acks_topic: str
    ack_partitions: int
    sender: int
    kafka_config: dict = field(default_factory=dict)
    outputs: Any = None
    failed_rows: Any = None
    flush_timeout_s: float = 60.0
    component: str = ""  # names the job in failure records
    failures_topic: str | None = None  # rows with rk_fail write a failure record here (None: none)

    def __call__(self, rows: Iterable) -> None:
        producer = _producer(self.bootstrap_servers, self.kafka_config)
        errors: list = []

        def delivered(error, message) -> None:
            if error is not None:
                errors.append(error)

        acks = AckSender(producer, acks_topic=self.acks_topic, ack_partitions=self.ack_partitions, sender=self.sender)
        child_edges: dict[int, int] = {}  # root -> XOR of the child edges this task created
        failed_roots: set[int] = set()
        written = failed = 0
        fields: set[str] | None = None
        for row in rows:
            if fields is None:
                fields = set(row.__fields__)
                if "value" not in fields or ANCHORS_COLUMN not in fields:
                    raise ConfigError(
                        f"spark output rows need 'value' and '{ANCHORS_COLUMN}' columns, got {sorted(fields)}"
                    )
            pairs = row[ANCHORS_COLUMN] or ()
            if FAIL_COLUMN in fields and row[FAIL_COLUMN]:
                roots = [pair[0] for pair in pairs if pair is not None and pair[0]]
                failed_roots.update(roots)
                failed += 1
                if self.failures_topic is not None and roots:  # written before the FAIL entries
                    FailureLog(
                        producer, topic=self.failures_topic, component=self.component, task_id=self.sender
                    ).write(
                        FailureRecord.of(
                            roots=roots,
                            component=self.component,
                            task_id=self.sender,
                            reason=row[FAIL_REASON_COLUMN] if FAIL_REASON_COLUMN in fields else None,
                            retry=not (FAIL_RETRY_COLUMN in fields and row[FAIL_RETRY_COLUMN] is False),
                        )
                    )
                continue
            anchors = anchor_to_pairs(pairs, child_edges)  # the XOR edge rule (core.anchors)
            headers = []
            if "headers" in fields and row["headers"]:
                headers = [
                    (h[0], to_bytes(h[1], "header value")) for h in row["headers"] if h[0] != codec.ANCHORS_HEADER
                ]
            if anchors:
                headers.append((codec.ANCHORS_HEADER, codec.encode_anchors(anchors)))
            key = to_bytes(row["key"], "key") if "key" in fields else None
            self._produce(producer, to_bytes(row["value"], "value"), key, headers, delivered)
            written += 1
        for root, val in child_edges.items():
            acks.add(EventKind.ACK, root, val)
        for root in failed_roots:
            acks.add(EventKind.FAIL, root)
        acks.send()
        flush_or_raise(producer, timeout=self.flush_timeout_s, what="spark outputs and acks")
        if errors or acks.delivery_errors:
            first = (errors or acks.delivery_errors)[0]
            raise DeliveryError(
                f"spark writer: {len(errors)} outputs to {self.output_topic} and "
                f"{len(acks.delivery_errors)} ack records not delivered (first: {first}); the task "
                f"fails so that Spark retries it",
                topic=self.output_topic,
            )
        if self.outputs is not None:
            self.outputs.add(written)
        if self.failed_rows is not None:
            self.failed_rows.add(failed)

    def _produce(self, producer, value, key, headers, delivered) -> None:
        while True:
            try:
                producer.produce(self.output_topic, value, key=key, headers=headers, on_delivery=delivered)
                return
            except BufferError:
                producer.poll(0.05)


# --- the JVM output path (DESIGN 7.2) ---------------------------------------------------------------
#
# No output row passes through Python, and the outputs are computed once, by the write itself.
# ``write_in_jvm``:
# 1. gives the transform's outputs a row id (``monotonically_increasing_id``) and, per distinct root
#    of the row's anchors, a child edge ``xxhash64(salt, row id, root, CHILD_TAG)`` (never 0); builds
#    the (root, child edge) pairs as big-endian bytes and the ``rk-anchors`` v2 header around them;
# 2. observes the rows (``DataFrame.observe``): the row count and every row's pairs (``listagg``),
#    collected in the same job as the write;
#    (with reliable-kafka's Java functions, ``jvm_functions``: the header from ``rk_anchors_v2`` /
#    ``rk_child_header``, and instead of every row's pairs one (root, XOR) pair per root from the
#    ``rk_child_xor`` aggregate, folded in the tasks; the same bytes, the same observation)
# 3. writes them with Spark's own Kafka sink, as a DataSource V2 batch write (``append``): Spark
#    reports observed metrics for V2 writes, not for the Kafka sink's V1 path (its
#    ``SaveIntoDataSourceCommand`` runs the query as a separate Dataset; measured: the observation
#    never completes);
# 4. after the write succeeded, folds the pairs into the XOR of each root's child edges (NumPy), for
#    the driver to fold into the inputs' final acks.
# Why the observed pairs are exactly the written children: the observation sits in the write's
# result stage (the Kafka sink asks for no distribution, so no exchange comes between them), and
# Spark merges a result task's accumulator updates only from the attempt that completed the
# partition (``DAGScheduler``: once per partition; failed attempts' updates are dropped, this
# accumulator does not count failed values). Each counted attempt flushed its rows before it
# succeeded (``KafkaDataWriter.commit``). A dead or speculative attempt's rows that reached Kafka
# too carry edges the final ack does not cancel (or cancel twice), so their trees time out and
# replay, never complete early. Were an attempt counted twice, a root's XOR would lose edges it
# must hold: ``tests/integration/test_spark_observed_children.py`` checks the count under retries.
# Child edges are distinct within a root: row ids are unique in the job and roots unique within a
# row, so two edges of one root are equal only if xxhash64 collides (about 2^-64 a pair, the odds
# DESIGN 2 accepts for any XOR coincidence).

ROW_ID = "rk_row"
CHILDREN = "rk_children"
PAIRS = "rk_pairs"
HEADER = "rk_header"
_HEADER_TYPE = "array<struct<key:string,value:binary>>"
V1_SOURCES = "spark.sql.sources.useV1SourceList"


# The expressions are SQL text: one py4j call each, where building them from Column objects took
# hundreds per batch (about 0.7 s of a batch's driver time on a busy machine).


def _be64_hex(value: str) -> str:
    """SQL: the 16 hex digits of a bigint, big-endian (Spark's ``hex`` of a long is its two's
    complement)."""
    return f"lpad(hex({value}), 16, '0')"


def _varint_hex(value: str, max_bytes: int) -> str:
    """SQL: hex digits of the unsigned LEB128 varint of a non-negative bigint expression."""
    parts = []
    for k in range(max_bytes):
        rest = f"shiftrightunsigned({value}, {7 * k})"
        more = f"shiftrightunsigned({value}, {7 * (k + 1)}) != 0"
        digits = f"lpad(hex(({rest} & 127) | IF({more}, 128, 0)), 2, '0')"
        parts.append(digits if k == 0 else f"IF({rest} != 0, {digits}, '')")
    return f"concat({', '.join(parts)})"


def pairs_bytes_sql(pairs: str) -> str:
    """SQL: the n (root, edge) pairs of an ``array<struct<root, edge>>`` expression as 16n bytes,
    big-endian int64s: the body of the ``rk-anchors`` v2 header. One pair, the common case, avoids
    Spark's interpreted higher-order functions."""
    single = f"unhex(concat({_be64_hex(f'{pairs}[0].root')}, {_be64_hex(f'{pairs}[0].edge')}))"
    body = f"array_join(transform({pairs}, p -> concat({_be64_hex('p.root')}, {_be64_hex('p.edge')})), '')"
    return f"IF(size({pairs}) = 1, {single}, unhex({body}))"


def anchors_header_v2_sql(pairs: str, body: str | None = None) -> str:
    """SQL: ``rk-anchors`` v2 of an ``array<struct<root, edge>>`` expression: 0x02, then Avro
    ``bytes`` (zigzag varint of 16n, then n big-endian int64 pairs; DESIGN 3). ``body``: an
    expression already holding :func:`pairs_bytes_sql` of ``pairs``. One pair: 0x02 0x20 root edge."""
    body = body or pairs_bytes_sql(pairs)
    zigzag = f"CAST(size({pairs}) AS BIGINT) * 32"  # 2 * 16n: non-negative, so zigzag doubles it
    return f"concat(IF(size({pairs}) = 1, X'0220', unhex(concat('02', {_varint_hex(zigzag, 5)}))), {body})"


def anchors_header_v2(pairs: str):
    """Column of :func:`anchors_header_v2_sql` over the column named ``pairs``."""
    from pyspark.sql import functions as F

    return F.expr(anchors_header_v2_sql(f"`{pairs}`"))


def _child_edge_sql(salt: int, row_id: str, root: str) -> str:
    from reliable_kafka.spark.derive import CHILD_TAG, ZERO_REPLACEMENT, salt_sql

    h = f"xxhash64({salt_sql(salt)}, CAST({row_id} AS BIGINT), CAST({root} AS BIGINT), CAST({CHILD_TAG} AS INT))"
    return f"coalesce(nullif({h}, 0), CAST({ZERO_REPLACEMENT} AS BIGINT))"


def child_edges_sql(salt: int, anchors: str, row_id: str) -> str:
    """SQL ``array<struct<root, edge>>``: per distinct non-zero root of ``anchors``, the child
    edge ``derive.derive_child_edge(salt, row_id, root)``. A row with one pair (a spout's
    row-to-row transform) skips the higher-order functions."""
    first = f"{anchors}[0].root"
    one = f"array(named_struct('root', {first}, 'edge', {_child_edge_sql(salt, row_id, first)}))"
    roots = (
        f"array_distinct(transform(filter({anchors}, p -> p IS NOT NULL AND p.root IS NOT NULL "
        f"AND p.root != 0), p -> p.root))"
    )
    general = f"transform({roots}, r -> named_struct('root', r, 'edge', {_child_edge_sql(salt, row_id, 'r')}))"
    return (
        f"CASE WHEN {anchors} IS NULL THEN CAST(array() AS array<struct<root:bigint,edge:bigint>>) "
        f"WHEN size({anchors}) = 1 AND {first} IS NOT NULL AND {first} != 0 THEN {one} ELSE {general} END"
    )


def _their_headers_sql() -> str:
    """SQL: the user's ``headers`` column minus any ``rk-anchors`` header, as the Kafka sink takes it."""
    key = f"'{codec.ANCHORS_HEADER}'"
    return (
        f"transform(filter(coalesce(`headers`, CAST(array() AS {_HEADER_TYPE})), h -> h.key != {key}), "
        f"h -> named_struct('key', CAST(h.key AS STRING), 'value', CAST(h.value AS BINARY)))"
    )


def _lateral_aliases(df) -> bool:
    """True when a projection may refer to aliases it defines (Spark's lateral column aliases, on
    by default): one ``selectExpr`` then does what took three, each analysed on its own."""
    conf = df.sparkSession.conf.get("spark.sql.lateralColumnAlias.enableImplicitResolution", "true")
    return str(conf).lower() == "true"


def with_children(outputs, salt: int):
    """Outputs plus ``rk_row``, ``rk_children``, ``rk_pairs`` (the children as bytes) and
    ``rk_headers`` (the user's headers minus any ``rk-anchors``, plus ours when the row has roots),
    as Spark's Kafka sink wants them."""
    row_id = f"monotonically_increasing_id() AS {ROW_ID}"
    children = f"{child_edges_sql(salt, f'`{ANCHORS_COLUMN}`', ROW_ID)} AS {CHILDREN}"
    pairs = f"{pairs_bytes_sql(CHILDREN)} AS {PAIRS}"
    key = f"'{codec.ANCHORS_HEADER}'"
    ours = (
        f"IF(size({CHILDREN}) > 0, array(named_struct('key', {key}, 'value', "
        f"{anchors_header_v2_sql(CHILDREN, PAIRS)})), CAST(array() AS {_HEADER_TYPE}))"
    )
    if "headers" in outputs.columns:
        ours = f"concat({_their_headers_sql()}, {ours})"
    if _lateral_aliases(outputs):  # the row id is still computed once: Spark stacks the projections
        return outputs.selectExpr("*", row_id, children, pairs, f"{ours} AS rk_headers")
    return (
        outputs.selectExpr("*", row_id)
        .selectExpr("*", children)
        .selectExpr("*", pairs)
        .selectExpr("*", f"{ours} AS rk_headers")
    )


def with_headers_jvm(outputs, salt: int):
    """:func:`with_children`'s ``rk_headers`` through reliable-kafka's Java functions
    (``jvm_functions``, registered on the session), with the same bytes: a row with one pair (a
    row-to-row transform's output) gets its child edge from ``xxhash64`` and its header from
    ``rk_anchors_v2``; other rows get both from ``rk_child_header``. Adds ``rk_row`` and
    ``rk_header`` (our header value, null without roots); no array of children: the SQL
    expressions that build one, even where not evaluated, make Spark's generated code too large
    for the JIT (measured: 1.6 us a row)."""
    from reliable_kafka.spark.derive import salt_sql
    from reliable_kafka.spark.jvm_functions import ANCHORS_V2_FUNCTION, CHILD_HEADER_FUNCTION

    # get(): null past the end, where [0] raises under ANSI, and Spark evaluates a subexpression the
    # two conditions share for every row (it does not skip the right side of AND)
    anchors, first = f"`{ANCHORS_COLUMN}`", f"get(`{ANCHORS_COLUMN}`, 0).root"
    one = f"({anchors} IS NOT NULL AND size({anchors}) = 1 AND {first} IS NOT NULL AND {first} != 0)"
    row_id = f"monotonically_increasing_id() AS {ROW_ID}"
    header = (
        f"IF({one}, {ANCHORS_V2_FUNCTION}({first}, {_child_edge_sql(salt, ROW_ID, first)}), "
        f"{CHILD_HEADER_FUNCTION}({salt_sql(salt)}, {ROW_ID}, {anchors})) AS {HEADER}"
    )
    key = f"'{codec.ANCHORS_HEADER}'"
    ours = (
        f"IF({HEADER} IS NULL, CAST(array() AS {_HEADER_TYPE}), array(named_struct('key', {key}, 'value', {HEADER})))"
    )
    if "headers" in outputs.columns:
        ours = f"concat({_their_headers_sql()}, {ours})"
    if _lateral_aliases(outputs):
        return outputs.selectExpr("*", row_id, header, f"{ours} AS rk_headers")
    return outputs.selectExpr("*", row_id).selectExpr("*", header).selectExpr("*", f"{ours} AS rk_headers")


def observe_headers_jvm(rows):
    """:func:`observe_children` of :func:`with_headers_jvm`'s rows: ``pairs`` comes from the
    ``rk_child_xor`` aggregate, one (root, XOR) pair per root, folded in the tasks and merged by
    Spark, instead of every row's pairs."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from reliable_kafka.spark.jvm_functions import CHILD_XOR_FUNCTION

    observation = Observation(f"rk-children-{uuid.uuid4().hex}")
    observed = rows.observe(
        observation, F.expr("count(1)").alias("rows"), F.expr(f"{CHILD_XOR_FUNCTION}({HEADER})").alias("pairs")
    )
    return observed, observation


def observe_children(rows):
    """``rows`` (:func:`with_children`) observed: (observed DataFrame, its ``Observation``), whose
    metrics after the first action are ``rows`` (the row count) and ``pairs`` (every row's
    ``rk_pairs``, concatenated)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"rk-children-{uuid.uuid4().hex}")
    observed = rows.observe(observation, F.expr("count(1)").alias("rows"), F.expr(f"listagg({PAIRS})").alias("pairs"))
    return observed, observation


def observed_metrics(observation, session, *, timeout: float, what: str) -> dict[str, Any]:
    """The observation's metrics once Spark's listener set them (asynchronously, after the action
    returned); a :class:`WaitTimeoutError` after ``timeout`` seconds instead of blocking forever,
    as ``Observation.get`` would for an action that reports no metrics."""
    future = observation._jo.future()  # the JVM Observation (pyspark.sql.Observation keeps it)
    deadline = time.monotonic() + timeout
    delay = 0.001
    while not future.isCompleted():
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"spark output: {what}: Spark reported no observed metrics within {timeout:.0f} s after the "
                f"write; the batch's roots are failed and redelivered (is the Kafka sink's batch write V2?)"
            )
        time.sleep(delay)
        delay = min(2 * delay, 0.05)
    return _collected(observation._jo.getRow(), session)


def _collected(jrow, session) -> dict[str, Any]:
    """A JVM Row as a dict, read through ``collect()``'s socket: ``Observation.get`` moves it
    through py4j, which decodes a byte array byte by byte in Python (measured: about 1.2 s for a
    batch's 2.5 MB of pairs, against 0.03 s this way)."""
    from pyspark.sql import DataFrame

    jvm = session.sparkContext._jvm
    jdf = session._jsparkSession.createDataFrame(jvm.java.util.Collections.singletonList(jrow), jrow.schema())
    return DataFrame(jdf, session).collect()[0].asDict()


def children_from_metrics(metrics: dict[str, Any], *, what: str) -> tuple[int, np.ndarray, np.ndarray]:
    """(rows written, roots, XOR of each root's child edges) from :func:`observe_children`'s metrics.
    Metrics without those fields (Spark sets an empty row when it could not collect them) raise
    :class:`StateError`: acking the inputs without their children would complete trees early."""
    if "rows" not in metrics or "pairs" not in metrics:
        raise StateError(
            f"spark output: {what}: Spark reported no children for the written rows (metrics {sorted(metrics)}); "
            f"the batch's roots are failed and redelivered"
        )
    raw = bytes(metrics["pairs"] or b"")  # listagg of no rows is null
    if len(raw) % 16:
        raise StateError(f"spark output: {what}: observed pairs of {len(raw)} bytes are not 16-byte (root, edge) pairs")
    pairs = np.frombuffer(raw, dtype=">i8").astype(np.int64).reshape(-1, 2)
    roots, xors = fold_by_root(pairs[:, 0], pairs[:, 1])
    return int(metrics["rows"]), roots, xors


def fold_by_root(roots, vals):
    """One entry per distinct root, its vals XORed together (an ack's val may be any XOR split)."""
    if len(roots) == 0:
        return roots, vals
    unique, inverse = np.unique(roots, return_inverse=True)
    folded = np.zeros(len(unique), dtype=np.int64)
    np.bitwise_xor.at(folded, inverse, vals)
    return unique, folded


def sink_rows(rows):
    """The rows as Spark's Kafka sink takes them: key, value and headers. Kafka takes string or
    binary; other types are written as text, as the Python writer does."""
    types = dict(rows.dtypes)
    plain = [
        f"`{n}`" if types[n] in ("string", "binary") else f"CAST(`{n}` AS STRING) AS `{n}`"
        for n in ("key", "value")
        if n in types
    ]
    return rows.selectExpr(*plain, "rk_headers AS headers")


@contextlib.contextmanager
def kafka_sink_v2(session):
    """Within: ``session``'s batch writes to ``format("kafka")`` take Spark's DataSource V2 path
    (``kafka`` left out of :data:`V1_SOURCES`); the setting is restored after. Spark reads it when
    ``save()`` plans the write; a stream's ``foreachBatch`` DataFrames run in the stream's own
    clone of the session."""
    before = session.conf.get(V1_SOURCES)
    names = [name for name in before.split(",") if name.strip().lower() != "kafka"]
    if len(names) == len(before.split(",")):
        yield
        return
    session.conf.set(V1_SOURCES, ",".join(names))
    try:
        yield
    finally:
        session.conf.set(V1_SOURCES, before)


def write_in_jvm(
    outputs,
    *,
    salt: int,
    bootstrap_servers: str,
    topic: str,
    options: dict[str, str],
    metrics_timeout: float = 120.0,
):
    """Steps 1-4 above; returns (written rows, roots, XOR of their child edges) after the sink's
    write succeeded (it raises otherwise, and the caller fails the batch's roots)."""
    from reliable_kafka.spark.jvm_functions import use_jvm_functions

    if use_jvm_functions(outputs.sparkSession):
        rows, observation = observe_headers_jvm(with_headers_jvm(outputs, salt))
    else:
        rows, observation = observe_children(with_children(outputs, salt))
    writer = (
        sink_rows(rows)
        .write.format("kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    with kafka_sink_v2(rows.sparkSession):
        writer.save()
    what = f"outputs to {topic}"
    metrics = observed_metrics(observation, rows.sparkSession, timeout=metrics_timeout, what=what)
    return children_from_metrics(metrics, what=what)
