"""Writing a batch's outputs with their anchors through Spark's own Kafka sink (``write_in_jvm``,
docs/design.md section 7.2): no output row passes through Python; the driver learns each root's XOR of child edges
from the write itself and folds it into the inputs' final acks.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from reliable_kafka import codec
from reliable_kafka.errors import ConfigError, StateError, WaitTimeoutError
from reliable_kafka.spark.anchors import ANCHORS_COLUMN, FAIL_COLUMN, FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

__all__ = ["check_outputs", "in_session", "release_observations", "v2_write_session", "write_in_jvm"]

log = logging.getLogger(__name__)


# --- the JVM output path (docs/design.md section 7.2) ---------------------------------------------------------------
#
# No output row passes through Python, and the outputs are computed once, by the write itself.
# ``write_in_jvm``:
# 1. gives the transform's outputs a row id (``monotonically_increasing_id``) and, per distinct root
#    of the row's anchors, a child edge ``xxhash64(salt, row id, root, CHILD_TAG)`` (never 0); builds
#    the (root, child edge) pairs as big-endian bytes and the ``rk-anchors`` v2 header around them;
# 2. observes the rows (``DataFrame.observe``): the row count and every row's pairs (``listagg``),
#    collected in the same job as the write;
#    (with reliable-kafka's Java functions, ``jvm_functions``: the header from ``rk_output_header``,
#    and instead of every row's pairs one (root, XOR) pair per root from the
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
# must hold: ``test_a_retried_task_is_observed_once`` (tests/integration/test_spark_jvm_functions.py)
# checks the count under retries, on both paths.
# Child edges are distinct within a root: row ids are unique in the job and roots unique within a
# row, so two edges of one root are equal only if xxhash64 collides (about 2^-64 a pair, the odds
# docs/design.md section 2 accepts for any XOR coincidence).

ROW_ID = "rk_row"
CHILDREN = "rk_children"
PAIRS = "rk_pairs"
HEADER = "rk_header"
RESERVED_COLUMNS = frozenset({ROW_ID, CHILDREN, PAIRS, HEADER, "rk_headers", "rk_anchors"})
"""Columns the output path adds to a transform's outputs: an output column of the same name would
be read in place of ours (Spark resolves a name to an input column before a lateral alias), so
child edges could repeat within a root and cancel out of its XOR."""
_HEADER_TYPE = "array<struct<key:string,value:binary>>"
V1_SOURCES = "spark.sql.sources.useV1SourceList"


def check_outputs(columns: set[str], *, component: str, transform: object) -> None:
    """What every tracked write takes from a transform's outputs: ``value`` and the anchors, and
    none of :data:`RESERVED_COLUMNS` (:class:`ConfigError` otherwise, naming the transform)."""
    name = getattr(transform, "__name__", transform)
    if "value" not in columns or ANCHORS_COLUMN not in columns:
        raise ConfigError(
            f"{component}: transform {name} must return a DataFrame with 'value' and '{ANCHORS_COLUMN}' columns (and "
            f"optionally key, headers, {FAIL_COLUMN}, {FAIL_REASON_COLUMN}, {FAIL_RETRY_COLUMN}); got {sorted(columns)}"
        )
    reserved = sorted(columns & RESERVED_COLUMNS)
    if reserved:
        raise ConfigError(
            f"{component}: transform {name} returned column(s) {reserved}, which reliable-kafka's output path "
            "adds itself; rename or drop them"
        )


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
    ``bytes`` (zigzag varint of 16n, then n big-endian int64 pairs; docs/design.md section 3). ``body``: an
    expression already holding :func:`pairs_bytes_sql` of ``pairs``. One pair: 0x02 0x20 root edge."""
    body = body or pairs_bytes_sql(pairs)
    zigzag = f"CAST(size({pairs}) AS BIGINT) * 32"  # 2 * 16n: non-negative, so zigzag doubles it
    return f"concat(IF(size({pairs}) = 1, X'0220', unhex(concat('02', {_varint_hex(zigzag, 5)}))), {body})"


def anchors_header_v2(pairs: str) -> Column:
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


def _lateral_aliases(df: DataFrame) -> bool:
    """True when a projection may refer to aliases it defines (Spark's lateral column aliases, on
    by default): one ``selectExpr`` then does what took three, each analysed on its own."""
    conf = df.sparkSession.conf.get("spark.sql.lateralColumnAlias.enableImplicitResolution", "true")
    return str(conf).lower() == "true"


def with_children(outputs: DataFrame, salt: int) -> DataFrame:
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


def _headers_jvm_sql(outputs: DataFrame, salt: int, anchors: str) -> tuple[str, str, str]:
    """SQL of :func:`with_headers_jvm`'s columns over the anchors expression ``anchors``: (row id,
    ``rk_header``, ``rk_headers``), each with its alias."""
    from reliable_kafka.spark.derive import salt_sql
    from reliable_kafka.spark.jvm_functions import OUTPUT_HEADER_FUNCTION

    row_id = f"monotonically_increasing_id() AS {ROW_ID}"
    # one static call with the row's values, any number of pairs: each child edge is hashed once
    # (SQL's nullif(xxhash64(...), 0) inside an IF computed it twice per row)
    header = f"{OUTPUT_HEADER_FUNCTION}({salt_sql(salt)}, {ROW_ID}, {anchors}) AS {HEADER}"
    return row_id, header, _our_headers_sql("headers" in outputs.columns)


def _our_headers_sql(theirs: bool) -> str:
    """SQL: the Kafka headers of a row with ``rk_header`` (ours, when not null), after the user's
    ``headers`` (minus any ``rk-anchors``) when ``theirs``."""
    key = f"'{codec.ANCHORS_HEADER}'"
    ours = (
        f"IF({HEADER} IS NULL, CAST(array() AS {_HEADER_TYPE}), array(named_struct('key', {key}, 'value', {HEADER})))"
    )
    return f"concat({_their_headers_sql()}, {ours})" if theirs else ours


def with_headers_jvm(
    outputs: DataFrame, salt: int, *, empty_anchors_as_null: bool = False, headers_column: bool = True
) -> DataFrame:
    """:func:`with_children`'s ``rk_headers`` through reliable-kafka's Java functions
    (``jvm_functions``, registered on the session), with the same bytes: every row's child edges
    and header from ``rk_output_header``, a static call in Spark's generated code. Adds ``rk_row``
    and ``rk_header`` (our header value, null without roots); no array of children: the SQL
    expressions that build one, even where not evaluated, make Spark's generated code too large
    for the JIT (measured: 1.6 us a row). ``empty_anchors_as_null``: read empty anchors as NULL
    (adds ``rk_anchors``, in the row id's projection; the same bytes either way). Three projections, not one
    with lateral column aliases: Spark analyses those more slowly than three plain steps (measured
    on the driver after warm-up, 25,000 sentences' outputs: 0.06 to 0.2 s against 0.03 to 0.04).
    ``headers_column=False``: no ``rk_headers`` projection; :func:`sink_rows` builds the headers
    (the same SQL) in its own projection. ``write_in_jvm`` takes :func:`output_rows_jvm`: the same
    rows in fewer steps."""
    anchors, nullified = f"`{ANCHORS_COLUMN}`", []
    if empty_anchors_as_null:
        nullified = [f"IF(size({anchors}) > 0, {anchors}, NULL) AS rk_anchors"]
        anchors = "rk_anchors"
    row_id, header, ours = _headers_jvm_sql(outputs, salt, anchors)
    rows = outputs.selectExpr("*", *nullified, row_id).selectExpr("*", header)
    return rows.selectExpr("*", f"{ours} AS rk_headers") if headers_column else rows


def observe_headers_jvm(rows: DataFrame) -> tuple[DataFrame, Observation]:
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


def observe_children(rows: DataFrame) -> tuple[DataFrame, Observation]:
    """``rows`` (:func:`with_children`) observed: (observed DataFrame, its ``Observation``), whose
    metrics after the first action are ``rows`` (the row count) and ``pairs`` (every row's
    ``rk_pairs``, concatenated)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"rk-children-{uuid.uuid4().hex}")
    observed = rows.observe(observation, F.expr("count(1)").alias("rows"), F.expr(f"listagg({PAIRS})").alias("pairs"))
    return observed, observation


def jvm_class(session: SparkSession, name: str) -> Any:  # a py4j JavaClass: the JVM's, untyped
    """The JVM class ``name`` (fully qualified) as a py4j proxy, without a round trip: reaching it
    as ``_jvm.org.apache...`` costs one per dotted step, in each of which the JVM tries the prefix
    as a class in every jar on its classpath (measured: 13% of a tracked job's JVM samples)."""
    from py4j.java_gateway import JavaClass

    gateway = session.sparkContext._gateway  # typed optional: set for a running session's context
    return JavaClass(name, gateway._gateway_client)  # type: ignore[union-attr]


def observed_metrics(observation: Observation, session: SparkSession, *, timeout: float, what: str) -> dict[str, Any]:
    """The observation's metrics once Spark's listener set them (asynchronously, after the action
    returned); a :class:`WaitTimeoutError` after ``timeout`` seconds instead of blocking forever,
    as ``Observation.get`` would for an action that reports no metrics."""
    # the JVM Observation (pyspark.sql.Observation keeps it; typed optional, set once it observes)
    future = observation._jo.future()  # type: ignore[union-attr]
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
    return _collected(observation._jo.getRow(), session)  # type: ignore[union-attr]


def _collected(jrow: Any, session: SparkSession) -> dict[str, Any]:  # jrow: a JVM Row, through py4j
    """A JVM Row as a dict, read through ``collect()``'s socket: ``Observation.get`` moves it
    through py4j, which decodes a byte array byte by byte in Python (measured: about 1.2 s for a
    batch's 2.5 MB of pairs, against 0.03 s this way)."""
    from pyspark.sql import DataFrame

    rows = jvm_class(session, "java.util.Collections").singletonList(jrow)
    jdf = session._jsparkSession.createDataFrame(rows, jrow.schema())
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


def fold_by_root(roots: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One entry per distinct root, its vals XORed together (an ack's val may be any XOR split)."""
    if len(roots) == 0:
        return roots, vals
    order = np.argsort(roots, kind="stable")  # sorted runs reduced in place: half np.unique's time
    roots, vals = roots[order], vals[order]
    starts = np.flatnonzero(np.concatenate(([True], roots[1:] != roots[:-1])))
    return roots[starts], np.bitwise_xor.reduceat(vals, starts)


def _key_value_sql(types: dict[str, str]) -> list[str]:
    """SQL of the rows' key and value as the Kafka sink takes them: string or binary as they are,
    other types as text (as the Python writer writes them)."""
    return [
        f"`{n}`" if types[n] in ("string", "binary") else f"CAST(`{n}` AS STRING) AS `{n}`"
        for n in ("key", "value")
        if n in types
    ]


def sink_rows(rows: DataFrame) -> DataFrame:
    """The rows as Spark's Kafka sink takes them: key, value and headers (``rk_headers``, else built
    from ``rk_header`` and the user's ``headers``, as :func:`with_headers_jvm`), plus what the observation
    reads (``rk_header`` or ``rk_pairs``, which the sink ignores: its table accepts any schema). Kafka
    takes string or binary; other types are written as text, as the Python writer does. Observed
    after this projection, the rows reach the sink without another copy (an observation is not
    part of Spark's generated code, so a projection above it would copy every row again)."""
    types = dict(rows.dtypes)
    plain = _key_value_sql(types)
    observed = [n for n in (HEADER, PAIRS) if n in types]
    headers = "rk_headers" if "rk_headers" in types else _our_headers_sql("headers" in types)
    return rows.selectExpr(*plain, f"{headers} AS headers", *observed)


def output_rows_jvm(outputs: DataFrame, salt: int) -> tuple[DataFrame, Observation]:
    """``write_in_jvm``'s rows through the Java functions, observed (:func:`observe_headers_jvm`):
    :func:`sink_rows_jvm`, observed."""
    return observe_headers_jvm(sink_rows_jvm(outputs, salt))


def sink_rows_jvm(outputs: DataFrame, salt: int) -> DataFrame:
    """The rows of ``sink_rows(with_headers_jvm(outputs, salt, headers_column=False))``, the same
    bytes, in two DataFrame steps where that takes three. Each step is a new Dataset, which Spark
    analyses over the whole plan (about 10 ms to 0.1 s a step on this busy machine, 25,000
    sentences a batch). The row id is an argument of ``rk_output_header``, not a column: it is read
    only there, so it is still computed once per row."""
    from reliable_kafka.spark.derive import salt_sql
    from reliable_kafka.spark.jvm_functions import OUTPUT_HEADER_FUNCTION

    types = dict(outputs.dtypes)
    plain = _key_value_sql(types)
    theirs = ["`headers`"] if "headers" in types else []
    header = f"{OUTPUT_HEADER_FUNCTION}({salt_sql(salt)}, monotonically_increasing_id(), `{ANCHORS_COLUMN}`)"
    rows = outputs.selectExpr(*plain, *theirs, f"{header} AS {HEADER}")
    names = [f"`{n}`" for n in ("key", "value") if n in types]
    return rows.selectExpr(*names, f"{_our_headers_sql(bool(theirs))} AS headers", HEADER)


def without_kafka(sources: str) -> str:
    """A :data:`V1_SOURCES` list without ``kafka`` (the same list when it has none)."""
    names = [name for name in sources.split(",") if name.strip()]
    kept = [name for name in names if name.strip().lower() != "kafka"]
    return sources if len(kept) == len(names) else ",".join(kept)


def v2_write_session(session: SparkSession) -> SparkSession:
    """A session whose batch writes to ``format("kafka")`` take Spark's DataSource V2 path: ``session``
    itself when ``kafka`` is off its :data:`V1_SOURCES` already, otherwise a clone (its conf, temp
    views and UDFs as they are now) with ``kafka`` left out. The setting is made once, on a session
    no other code holds: switching it on a shared session while ``save()`` runs would also switch
    any other thread's Kafka writes, and two writers restoring it would race."""
    sources: str = session.conf.get(V1_SOURCES)  # type: ignore[assignment]  # a setting with a default: set
    if without_kafka(sources) == sources:
        return session
    from pyspark.sql import SparkSession

    clone = SparkSession(session.sparkContext, session._jsparkSession.cloneSession())
    clone.conf.set(V1_SOURCES, without_kafka(sources))
    return clone


def in_session(df: DataFrame, session: SparkSession) -> DataFrame:
    """``df``'s (analysed) plan as a DataFrame of ``session``: its data, caches and UDFs are shared
    by every session of the SparkContext, so only the conf its writes are planned with changes."""
    if df.sparkSession._jsparkSession.equals(session._jsparkSession):
        return df
    from pyspark.sql import DataFrame

    datasets = jvm_class(session, "org.apache.spark.sql.classic.Dataset")
    return DataFrame(datasets.ofRows(session._jsparkSession, df._jdf.logicalPlan()), session)


def release_observations(observed: DataFrame) -> None:
    """Unregister the ``Observation`` s in ``observed``'s plan after a write that failed.

    Spark drops an observation only when a query over its plan ends; a write that fails before its
    query runs (or a V1 write, which runs its query apart) would leave it registered with the
    session for good. A ``limit(0)`` query over the plan ends one without reading a row (Spark
    plans it as an empty relation)."""
    try:
        observed.limit(0).collect()
    except Exception as exc:  # the session may be gone; nothing is left to leak then
        log.warning("spark output: observations of a failed write not released: %s", exc)


def write_in_jvm(
    outputs: DataFrame | None,
    *,
    salt: int,
    bootstrap_servers: str,
    topic: str,
    options: dict[str, str],
    metrics_timeout: float = 120.0,
    session: SparkSession | None = None,
    observed: tuple[DataFrame, Observation] | None = None,
) -> tuple[int, np.ndarray, np.ndarray]:
    """Steps 1-4 above; returns (written rows, roots, XOR of their child edges) after the sink's
    write succeeded (it raises otherwise, and the caller fails the batch's roots). ``session``: a
    :func:`v2_write_session` to write in (default: one made from the outputs' session).
    ``observed``: the outputs' :func:`output_rows_jvm` already (``outputs`` is then not read)."""
    # outputs is None only with observed given
    rows, observation = observed if observed is not None else _observed_rows(outputs, salt, session)  # type: ignore[arg-type]
    try:
        writer = (
            rows.write.format("kafka")
            .mode("append")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("topic", topic)
        )
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save()
        what = f"outputs to {topic}"
        metrics = observed_metrics(observation, rows.sparkSession, timeout=metrics_timeout, what=what)
    except BaseException:
        release_observations(rows)
        raise
    return children_from_metrics(metrics, what=what)


def _observed_rows(outputs: DataFrame, salt: int, session: SparkSession | None) -> tuple[DataFrame, Observation]:
    """``write_in_jvm``'s observed rows of ``outputs``: (DataFrame, its ``Observation``)."""
    from pyspark.sql import functions as F

    from reliable_kafka.spark.jvm_functions import use_jvm_functions

    outputs = in_session(outputs, session or v2_write_session(outputs.sparkSession))
    if use_jvm_functions(outputs.sparkSession):  # rk_output_header reads empty anchors as no roots
        return output_rows_jvm(outputs, salt)
    # no anchors as NULL, not an empty array (no roots either way): Spark (ANSI mode) may evaluate
    # ``anchors[0]`` of the child edges' expression ahead of its size guard, and fail the batch
    anchors = f"`{ANCHORS_COLUMN}`"
    outputs = outputs.withColumn(ANCHORS_COLUMN, F.expr(f"IF(size({anchors}) > 0, {anchors}, NULL)"))
    return observe_children(sink_rows(with_children(outputs, salt)))
