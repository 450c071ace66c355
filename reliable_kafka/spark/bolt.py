"""A Spark Structured Streaming job as a bolt: it reads a tracked topic and acks its inputs.

Each input record's ``rk-anchors`` header is decoded into the ``anchors`` column, so the job's
outputs are anchored to the inputs they derive from and trees pass through Spark like through a
Python bolt. Per micro-batch: (1) records whose header does not decode are counted and copied to
``<topology>.quarantine`` (they are skipped: their trees time out upstream and replay); (2) the
transform runs and Spark's own Kafka sink writes the outputs, each anchored to its inputs' roots
with fresh child edges whose XOR per root the same write reports (``writer.write_in_jvm``, docs/design.md
section 7.2; rows failed with ``rk_fail`` fail their roots); (3) after the write succeeded the driver acks
every input's own edges, folded with those XORs. A batch whose transform or write fails fails its
inputs' roots (Storm's ``collector.fail``), so the spouts redeliver them.

Records without the header are untracked; so are outputs derived only from them. The job's
consumer group is committed to each finished batch's end, for lag tools: as for any bolt, safety
does not depend on it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from confluent_kafka import Consumer, KafkaException, TopicPartition

from reliable_kafka.codec import ParkedRecord
from reliable_kafka.config import Connection
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import StateError
from reliable_kafka.kafka.parking import park
from reliable_kafka.kafka.produce import flush_or_raise
from reliable_kafka.spark.anchors import anchors_from_headers
from reliable_kafka.spark.job import SOURCE_COLUMNS, SparkJob, Transform, final_acks
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.writer import fold_by_root, pairs_bytes_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

__all__ = ["BatchInputs", "SparkBolt", "batch_inputs", "input_summary"]

log = logging.getLogger(__name__)


class SparkBolt(SparkJob):
    """A PySpark streaming job that processes tracked tuples (see the module docstring).

    Keyword arguments (defaults in brackets): ``topology``, ``connection`` (a bootstrap servers
    string or a :class:`~reliable_kafka.config.Connection`), ``source_topics``, ``group_id``,
    ``checkpoint_dir``, ``transform`` (DataFrame -> DataFrame with value, anchors and optionally
    key, headers, rk_fail), ``output_topic``: required; ``options``
    [``SparkOptions()``, :mod:`reliable_kafka.spark.options`]: the trigger, the batch size, the
    batch error policy and Spark's Kafka options; ``name``.
    The transform's input has key, value, topic, partition, offset, timestamp, headers, anchors
    (null for untracked records).
    """

    component = "spark-bolt"

    def __init__(
        self,
        spark: SparkSession,
        *,
        topology: str,
        connection: str | Connection,
        source_topics: str | list[str],
        group_id: str,
        checkpoint_dir: str,
        transform: Transform,
        output_topic: str,
        options: SparkOptions | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(
            spark,
            topology=topology,
            connection=connection,
            source_topics=source_topics,
            group_id=group_id,
            checkpoint_dir=checkpoint_dir,
            transform=transform,
            output_topic=output_topic,
            options=options,
            name=name,
        )
        self.acked = 0  # input (root, edge) pairs acked
        self.failed = 0  # roots failed because their batch failed
        self.untracked = 0
        self._group: Consumer | None = None

    def _prepare(self) -> None:
        self._group = self._new_group_consumer()

    def _on_stream_batch(self, df: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        if self._stopping.is_set():
            raise StateError(f"{self.name}: stopping; batch {batch_id} is left to the next run")
        with self._batch_lock:
            self.stats.batches += 1
            what = f"batch {batch_id}"
            batch = (
                df.select(*SOURCE_COLUMNS)
                .withColumn("rk_decoded", anchors_from_headers("headers"))
                .persist(StorageLevel.MEMORY_AND_DISK)
            )
            roots: list[int] = []
            try:
                self._quarantine(batch.filter(F.col("rk_decoded.error").isNotNull()).collect())
                inputs = (
                    batch.filter(F.col("rk_decoded.error").isNull())
                    .withColumn("anchors", F.col("rk_decoded.anchors"))
                    .drop("rk_decoded")
                )
                # in columns: one Spark aggregation, one row to the driver (the pairs as bytes), NumPy
                summary = batch_inputs(input_summary(inputs).collect()[0])
                roots = summary.pairs[:, 0].tolist()  # known before the write: failed if it fails
                self.untracked += summary.untracked
                self.stats.inputs += summary.inputs
                _, _, children = self._write(inputs, new_id())
                self._send_entries(EventKind.ACK, final_acks(summary.pairs, children), what=f"input acks of {what}")
                self.acked += summary.acked
                self._commit_ends(summary.ends)
            except Exception as exc:
                self.failed += len(roots)
                self._send_fails(roots)
                self._batch_failed(what, exc)
            finally:
                batch.unpersist()

    def _quarantine(self, rows: list[Row]) -> None:
        """Copy records whose ``rk-anchors`` header does not decode to the quarantine topic."""
        if not rows:
            return
        for row in rows:
            reason = row.rk_decoded.error
            log.warning(
                "%s: %s[%d]@%d: %s; copied to %s and skipped",
                self.name,
                row.topic,
                row.partition,
                row.offset,
                reason,
                self.topics.quarantine,
            )
            headers = [(h.key, bytes(h.value) if h.value is not None else None) for h in (row.headers or [])]
            park(
                self._started()[1],
                self.topics.quarantine,
                key=bytes(row.key) if row.key is not None else None,
                value=bytes(row.value) if row.value is not None else None,
                headers=headers,
                parked=ParkedRecord(
                    reason=reason,
                    attempts=0,
                    source_topic=row.topic,
                    source_partition=row.partition,
                    source_offset=row.offset,
                    source_timestamp_ms=int(row.timestamp.timestamp() * 1000) if row.timestamp is not None else -1,
                    component=self.name,
                ),
            )
        flush_or_raise(self._started()[1], what=f"{self.name} quarantined records")
        self.stats.quarantined += len(rows)

    def _commit_ends(self, ends: dict[tuple[str, int], int]) -> None:
        try:
            # made by _prepare(), before the query starts
            self._commit_group(self._group, [TopicPartition(t, p, o) for (t, p), o in ends.items()])  # type: ignore[arg-type]
        except KafkaException as exc:
            log.warning("%s: group commit skipped: %s", self.name, exc)

    def _close(self) -> None:
        try:
            if self._group is not None:
                self._group.close()
                self._group = None
        finally:
            super()._close()


@dataclass(frozen=True)
class BatchInputs:
    """A batch's tracked inputs as the driver needs them, from :func:`input_summary`."""

    pairs: np.ndarray  # (roots, 2) int64: each root once, with the XOR of its inputs' edges
    acked: int  # input (root, edge) pairs
    inputs: int  # input records
    untracked: int  # input records without anchors
    ends: dict[tuple[str, int], int]  # (topic, partition) -> last offset + 1


def input_summary(inputs: DataFrame) -> DataFrame:
    """One row (DataFrame) summing up a batch's ``inputs`` (with ``anchors``) in Spark, for
    :func:`batch_inputs`: ``pairs``, every input (root, edge) pair as 16 big-endian bytes
    (``listagg``, as the output path observes its children); ``ends``, ``inputs`` and
    ``untracked``, per partition. One aggregation by partition, then one row: measured twice as
    fast as a ``bit_xor`` per root, whose shuffle costs more than folding the pairs in NumPy."""
    from pyspark.sql import functions as F

    tracked = f"IF(size(anchors) > 0, {pairs_bytes_sql('anchors')}, NULL)"  # listagg skips nulls
    per_partition = inputs.groupBy("topic", "partition").agg(
        (F.max("offset") + 1).alias("end"),
        F.count(F.lit(1)).alias("inputs"),
        F.expr("count_if(anchors IS NULL OR size(anchors) = 0)").alias("untracked"),
        F.expr(f"listagg({tracked})").alias("pairs"),
    )
    return per_partition.agg(
        F.expr("listagg(pairs)").alias("pairs"),
        F.collect_list(F.struct("topic", "partition", "end")).alias("ends"),
        F.sum("inputs").alias("inputs"),
        F.sum("untracked").alias("untracked"),
    )


def batch_inputs(row: Row | Mapping[str, Any]) -> BatchInputs:
    """The row of :func:`input_summary` (a ``Row`` or mapping) as arrays and counts, the pairs
    folded per root (the fold :func:`final_acks` does: any XOR split of an ack is the same ack).
    A sum over no rows is null, as is ``listagg``: read as 0 and no pairs."""
    raw = bytes(row["pairs"] or b"")
    if len(raw) % 16:
        raise StateError(f"spark bolt: input pairs of {len(raw)} bytes are not 16-byte (root, edge) pairs")
    pairs = np.frombuffer(raw, dtype=">i8").astype(np.int64).reshape(-1, 2)
    roots, xors = fold_by_root(pairs[:, 0], pairs[:, 1])
    return BatchInputs(
        pairs=np.stack([roots, xors], axis=1),
        acked=len(pairs),
        inputs=int(row["inputs"] or 0),
        untracked=int(row["untracked"] or 0),
        ends={(end["topic"], int(end["partition"])): int(end["end"]) for end in row["ends"] or []},
    )
