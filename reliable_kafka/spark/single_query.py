"""A Spark spout as one streaming query (docs/spark.md, "One streaming query").

The query reads Spark's Kafka source, gives the user's ``transform`` each record with its root
(derived from the query's salt and the record's coordinates, as the driver derives it), and writes
through Spark's Kafka sink the rows of ``jvm/TrackedRows.java``: the outputs with their
``rk-anchors`` header (child edges random per task attempt) and, after each record's rows, the
record's ``INIT(root, XOR of its child edges)`` to ``<topology>.acks``, partition ``root mod N``.
The driver never sees a row. It follows the query's commit log (:class:`CommitFollower`) and, per
committed batch, registers the batch's offsets with the tracker, applies the outcomes that came
before it (:class:`EarlyOutcomes`) and sends ``INIT(root, 0)`` for each other root: a record
without outputs completes with it, a tree already decided starts again empty and completes at once
(the driver keeps the first outcome it hears of a root, so that one is ignored).

Why that is safe, and what it needs (a row-wise plan, an idempotent sink): docs/spark.md; the
property test ``tests/unit/test_spark_single_query_protocol.py`` checks it against the acker's rule.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import ConfigError, DecodeError
from reliable_kafka.spark import writer
from reliable_kafka.spark.anchors import ANCHORS_COLUMN, FAIL_COLUMN, FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN
from reliable_kafka.spark.batch_roots import OffsetLog, Ranges
from reliable_kafka.spark.checkpoint import CheckpointFiles, HadoopFiles, LocalFiles
from reliable_kafka.spark.writer import jvm_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

__all__ = [
    "TRACKED_ROWS_CLASS",
    "CommitFollower",
    "EarlyOutcomes",
    "check_outputs",
    "check_row_wise",
    "checkpoint_files",
    "committed_ranges",
    "not_row_wise",
    "real_time_supported",
    "real_time_trigger",
    "sink_options",
    "tracked_rows",
]

TRACKED_ROWS_CLASS = "reliablekafka.spark.TrackedRows"
HEADERS_TYPE = "array<struct<key:string,value:binary>>"

_FORCED_PRODUCER = {"kafka.enable.idempotence": "true", "kafka.acks": "all"}
_UNSUPPORTED = (FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN)

# Logical plan nodes after which a source record's rows may come from several tasks, or not one
# after another in their task: an INIT per record sent by the task that wrote its rows would then
# not hold all of the record's child edges (a tree could complete early).
_NOT_ROW_WISE = re.compile(
    r"^[\s:|+\-~]*(Aggregate|Join|Union|Sort|Window|Repartition\w*|Rebalance\w*|Deduplicate\w*|Distinct|"
    r"Intersect|Except|GlobalLimit|LocalLimit|Tail|Offset|MapPartitions\w*|MapInPandas|MapInArrow|"
    r"PythonMapInArrow|FlatMap\w*|MapGroups\w*|CoGroup|TransformWithState\w*|AppendColumns\w*)\b",
    re.MULTILINE,
)


def _python_real_time() -> bool:
    """True when the installed PySpark's ``DataStreamWriter.trigger`` takes ``realTime`` (4.2+)."""
    from pyspark.sql.streaming import DataStreamWriter

    return "realTime" in inspect.signature(DataStreamWriter.trigger).parameters


def real_time_supported() -> bool:
    """True when the installed Spark has real-time mode: PySpark's ``trigger(realTime=...)`` (4.2+),
    or Spark 4.1, whose JVM has it (``Trigger.RealTime``) though its Python API does not."""
    import pyspark

    from reliable_kafka.spark.connector import spark_release

    return _python_real_time() or spark_release(pyspark.__version__)[:2] >= (4, 1)


def real_time_trigger(writer: DataStreamWriter, duration: str) -> DataStreamWriter:
    """``writer`` in real-time mode with batches of ``duration``: ``trigger(realTime=...)``, or on
    PySpark 4.1 the JVM's public ``Trigger.RealTime``, set as PySpark 4.2's ``trigger`` sets it."""
    if _python_real_time():
        return cast("DataStreamWriter", cast(Any, writer).trigger(realTime=duration))  # (stubs lack realTime)
    trigger = jvm_class(writer._spark, "org.apache.spark.sql.streaming.Trigger").RealTime(duration)
    writer._jwrite = writer._jwrite.trigger(trigger)
    return writer


def sink_options(options: dict[str, str], *, component: str) -> dict[str, str]:
    """The sink's ``kafka.*`` options with an idempotent producer: a duplicated INIT record (a
    producer's retry) would cancel the record's child edges, and so complete its tree early."""
    for key, wanted in _FORCED_PRODUCER.items():
        given = options.get(key)
        if given is not None and given.strip().lower() != wanted:
            raise ConfigError(
                f"{component}: spark_kafka_options {key}={given!r} is not allowed with a single query: its "
                f"Kafka sink writes ack records and must be an idempotent producer ({key}={wanted})"
            )
    return {**options, **_FORCED_PRODUCER}


def check_outputs(columns: set[str], *, component: str, transform: object) -> None:
    """What a single query takes from a transform's outputs (refused at start otherwise): a tracked
    write's (``writer.check_outputs``), and no failure details (its tasks write no failure records)."""
    writer.check_outputs(columns, component=component, transform=transform)
    name = getattr(transform, "__name__", transform)
    unsupported = sorted(columns & set(_UNSUPPORTED))
    if unsupported:
        raise ConfigError(
            f"{component}: transform {name} returned {unsupported}, which a single query does not take (its "
            f"tasks write no failure records); fail rows with {FAIL_COLUMN} alone, or run without single_query"
        )


def check_row_wise(outputs: DataFrame, *, component: str, transform: object) -> None:
    """Refuse a transform whose plan is not row-wise (:data:`_NOT_ROW_WISE`), from the optimized
    logical plan that ``DataFrame.explain`` prints (public API; the node names are Spark's)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        outputs.explain(extended=True)
    found = not_row_wise(text.getvalue())
    if found:
        name = getattr(transform, "__name__", transform)
        raise ConfigError(
            f"{component}: transform {name} is not row-wise (its plan has {', '.join(found)}): a single query "
            "needs each source record's outputs made in one task, one after another (projections, filters, "
            "explode, UDFs); run it without single_query (the foreachBatch path takes any transform)"
        )


def not_row_wise(plan: str) -> list[str]:
    """The node names of :data:`_NOT_ROW_WISE` in the optimized logical plan of ``plan`` (the text
    ``DataFrame.explain(extended=True)`` prints), sorted; the other plans are not read (the parsed
    and analysed ones hold nodes the optimizer removes, the physical one Spark's own operators)."""
    start = plan.find("== Optimized Logical Plan ==")
    end = plan.find("== Physical Plan ==")
    section = plan[start:end] if 0 <= start < end else plan[start:] if start >= 0 else plan
    return sorted({match.group(1) for match in _NOT_ROW_WISE.finditer(section)})


def tracked_rows(
    outputs: DataFrame, *, output_topic: str, acks_topic: str, ack_partitions: int, sender: int, flush_ms: int
) -> DataFrame:
    """The sink rows (``topic, partition, key, value, headers``) of the transform's ``outputs``:
    ``TrackedRows`` over key, value, the anchors' one root, rk_fail (and the outputs' own headers, if
    any), through the public ``Dataset.mapPartitions``, then one projection that names each row's
    topic and partition and builds its headers."""
    from pyspark.sql import DataFrame

    types = dict(outputs.dtypes)
    theirs = "headers" in types

    def as_binary(name: str) -> str:
        if name not in types:
            return f"CAST(NULL AS BINARY) AS `{name}`"
        return f"`{name}`" if types[name] == "binary" else f"CAST(CAST(`{name}` AS STRING) AS BINARY) AS `{name}`"

    fail = f"CAST(`{FAIL_COLUMN}` AS BOOLEAN)" if FAIL_COLUMN in types else "false"
    columns = [as_binary("key"), as_binary("value"), f"{_ONE_ROOT} AS root", f"{fail} AS rk_fail"]
    rows = outputs.selectExpr(*columns, *(["`headers`"] if theirs else []))
    session = outputs.sparkSession
    flat = (
        f"ack_partition int, key binary, value binary, rk_header binary{f', headers {HEADERS_TYPE}' if theirs else ''}"
    )
    schema = jvm_class(session, "org.apache.spark.sql.types.StructType").fromDDL(flat)
    encoder = jvm_class(session, "org.apache.spark.sql.Encoders").row(schema)
    function = jvm_class(session, TRACKED_ROWS_CLASS)(ack_partitions, sender, theirs, flush_ms * 1_000_000)
    tracked = DataFrame(rows._jdf.mapPartitions(function, encoder), session)
    ours = "array(named_struct('key', 'rk-anchors', 'value', rk_header))"
    headers = f"concat(coalesce(headers, CAST(array() AS {HEADERS_TYPE})), {ours})" if theirs else ours
    return tracked.selectExpr(
        f"IF(ack_partition IS NULL, {_sql_string(output_topic)}, {_sql_string(acks_topic)}) AS topic",
        "ack_partition AS partition",
        "key",
        "value",
        f"IF(rk_header IS NULL, {'headers' if theirs else f'CAST(NULL AS {HEADERS_TYPE})'}, {headers}) AS headers",
    )


# an output row's one root (0: untracked), read by TrackedRows as a long: one pair is the common
# case (no array reaches the JVM code, where a Row's array costs a Scala Seq of boxed Longs a row);
# a row anchored to two records cannot come from a row-wise plan and fails its task, rather than
# be tracked wrongly (each record's INIT must hold all of its child edges)
_ROOTS = f"array_distinct(filter(`{ANCHORS_COLUMN}`.root, r -> r IS NOT NULL AND r != 0))"
_ONE_ROOT = (
    f"CASE WHEN size(`{ANCHORS_COLUMN}`) = 1 THEN coalesce(`{ANCHORS_COLUMN}`[0].root, 0L) "
    f"WHEN `{ANCHORS_COLUMN}` IS NULL OR size(`{ANCHORS_COLUMN}`) < 1 THEN 0L "
    f"WHEN size({_ROOTS}) > 1 THEN raise_error(concat('reliable-kafka single query: an output row is anchored to "
    f"two source records (', array_join(CAST(slice({_ROOTS}, 1, 2) AS array<string>), ', '), '); a single query "
    "needs a row-wise transform (no aggregation, join or union), see docs/spark.md')) "
    f"ELSE coalesce(get({_ROOTS}, 0), 0L) END"
)


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def checkpoint_files(checkpoint_dir: str, spark: SparkSession) -> CheckpointFiles:
    """Local files for a local checkpoint (the follower reads it ten times a second: no py4j call),
    Hadoop's FileSystem in the session's JVM for any other location."""
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*):", checkpoint_dir)
    return LocalFiles() if scheme is None or scheme.group(1) == "file" else HadoopFiles(spark)


def committed_ranges(offset_log: OffsetLog, batch_id: int, low_watermark: Callable[[tuple[str, int]], int]) -> Ranges:
    """``(topic, partition) -> (start, end)`` of a committed batch, from the offset log: a partition
    without an end in the batch before (added since) starts where Spark starts a new partition, at
    its earliest offset."""
    ranges = offset_log.ranges(batch_id)
    if ranges is not None:
        return ranges
    ends = offset_log.ends(batch_id)
    if ends is None:
        raise DecodeError(
            "spark offset log",
            f"{offset_log.root}: batch {batch_id} is committed but offsets/{batch_id} is missing",
            None,
        )
    starts = offset_log.ends(batch_id - 1) or {}
    found: Ranges = {}
    for tp, end in ends.items():
        start = starts.get(tp)
        if start is None or start < 0:
            start = min(low_watermark(tp), end)
        if end > start:
            found[tp] = (start, end)
    return found


class CommitFollower:
    """The batches of a streaming query the driver has not handled yet whose ``commits/<id>`` is
    written (every task of the batch succeeded, its sink flushed), in order from ``next_id``."""

    def __init__(self, checkpoint_dir: str, files: CheckpointFiles, *, next_id: int = 0) -> None:
        self.root = checkpoint_dir.rstrip("/")
        self.files = files
        self.next_id = next_id

    def committed(self) -> int | None:
        """The next committed batch's id, or None; the caller calls :meth:`taken` once it handled it."""
        return self.next_id if self.files.read(f"{self.root}/commits/{self.next_id}") is not None else None

    def taken(self) -> None:
        self.next_id += 1


class EarlyOutcomes:
    """Outcomes of roots the driver has not registered yet: in real-time mode a tree completes within
    milliseconds, and its batch is committed (and registered) only at the batch's end. The first
    outcome of a root is kept (a RESET_TIMEOUT is no outcome: not held); entries older than
    ``keep_s`` are dropped (roots never registered: a task's INIT for a record already done, a
    zombie attempt's tree)."""

    def __init__(self, keep_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_s = keep_s
        self.clock = clock
        self._first: dict[int, tuple[int, float]] = {}  # root -> (outcome kind, when heard)
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._first)

    def hold(self, root: int, kind: int) -> None:
        if kind == OutcomeKind.RESET_TIMEOUT:
            # no decision (a bolt pushed the tree's deadline): held as the first outcome, it would
            # hide the decision after it, and the registered root would wait for its backstop
            return
        self._first.setdefault(root, (kind, self.clock()))

    def take(self, roots: list[int]) -> dict[int, int]:
        """The held outcomes of ``roots`` (root -> kind), no longer held."""
        if not self._first:
            return {}
        found = {}
        for root in roots:
            held = self._first.pop(root, None)
            if held is not None:
                found[root] = held[0]
        return found

    def expire(self) -> None:
        cutoff = self.clock() - self.keep_s
        old = [root for root, (_, heard) in self._first.items() if heard < cutoff]
        for root in old:
            del self._first[root]
        self.dropped += len(old)
