"""Spark batch reads of source records by offset: the records a Spark spout processes again on
start (ranges between the group's commit and Spark's checkpoint) and those it redelivers (exact
offsets, with their attempt numbers). The data stays in the JVM; only offsets pass through Python."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from reliable_kafka.core.tracker import Redelivery
from reliable_kafka.spark.job import SOURCE_COLUMNS, offsets_json

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read_offsets", "read_ranges", "read_redeliveries", "chunks"]

TP = tuple[str, int]


def read_offsets(
    spark: SparkSession, starts: dict[TP, int], ends: dict[TP, int], *, bootstrap_servers: str, options: dict[str, str]
) -> DataFrame:
    """A batch read of ``[starts[tp], ends[tp])`` per partition; ``options`` for Spark's Kafka reader."""
    assign: dict[str, list[int]] = {}
    for topic, partition in starts:
        assign.setdefault(topic, []).append(partition)
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", offsets_json(starts))
        .option("endingOffsets", offsets_json(ends))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def read_ranges(spark: SparkSession, ranges: dict[TP, tuple[int, int]], **connection: Any) -> DataFrame:
    """Batch read of ``[start, end)`` per partition (recovery)."""
    starts = {tp: start for tp, (start, _) in ranges.items()}
    ends = {tp: end for tp, (_, end) in ranges.items()}
    return read_offsets(spark, starts, ends, **connection)


def read_redeliveries(spark: SparkSession, redeliveries: list[Redelivery], **connection: Any) -> DataFrame:
    """The exact records to redeliver, with their attempt numbers."""
    from pyspark.sql import functions as F

    starts: dict[TP, int] = {}
    ends: dict[TP, int] = {}
    for r in redeliveries:
        starts[r.tp] = min(starts.get(r.tp, r.offset), r.offset)
        ends[r.tp] = max(ends.get(r.tp, r.offset + 1), r.offset + 1)
    wanted = spark.createDataFrame(
        [(t, p, r.offset, r.attempt) for r in redeliveries for (t, p) in [r.tp]],
        "topic string, partition int, offset long, attempt int",
    )
    records = read_offsets(spark, starts, ends, **connection).select(*SOURCE_COLUMNS)
    return records.join(F.broadcast(wanted), ["topic", "partition", "offset"], "inner").select(
        *SOURCE_COLUMNS, "attempt"
    )


def chunks(ranges: dict[TP, tuple[int, int]], size: int) -> Iterator[dict[TP, tuple[int, int]]]:
    """``ranges`` cut into batches of at most ``size`` offsets per partition."""
    pending = dict(ranges)
    while pending:
        chunk = {}
        for tp, (start, end) in list(pending.items()):
            stop = min(end, start + size)
            chunk[tp] = (start, stop)
            if stop >= end:
                del pending[tp]
            else:
                pending[tp] = (stop, end)
        yield chunk
