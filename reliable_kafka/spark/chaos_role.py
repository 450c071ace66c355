"""The chaos harness's PySpark processes: a SparkBolt in place of the split bolts (``--spark``), or
a SparkSpout run as one streaming query in place of the Python spouts (``--spark-spout``).

The bolt reads ``<T>.stage1`` and writes ``FANOUT`` children per record to ``<T>.stage2``, each
anchored to its input. The spout reads ``<T>.source`` and forwards each record to ``<T>.stage1``
under the Python spouts' group ``<T>-spout`` (the group whose commits the harness samples and
checks). The harness SIGKILLs either driver (its JVM dies with it) and restarts it on the same
checkpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reliable_kafka.config import Connection, Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.spark.bolt import SparkBolt
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.session import spark_session
from reliable_kafka.spark.spout import SparkSpout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["run_spark_split", "run_spark_spout"]


def fan_out(fanout: int) -> Callable[[DataFrame], DataFrame]:
    def transform(records: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        children = records.select("value", "anchors", F.explode(F.sequence(F.lit(0), F.lit(fanout - 1))).alias("j"))
        return children.select(
            F.col("value").alias("key"),
            F.concat(F.col("value"), F.lit(b":"), F.col("j").cast("string").cast("binary")).alias("value"),
            "anchors",
        )

    return transform


def forward(records: DataFrame) -> DataFrame:
    """Each source record as it is (what the Python spout forwards): a projection, row-wise."""
    return records.select("key", "value", "anchors")


def run_spark_split(
    *,
    topology: str,
    bootstrap: str,
    name: str,
    checkpoint_dir: str,
    fanout: int,
    kafka_config: dict[str, Any],
    stop: threading.Event,
) -> None:
    spark = spark_session(f"chaos-{name}", master="local[1]")
    job = SparkBolt(
        spark,
        topology=topology,
        connection=Connection(bootstrap, kafka_config=kafka_config),
        source_topics=f"{topology}.stage1",
        group_id=f"{topology}-split",
        checkpoint_dir=checkpoint_dir,
        transform=fan_out(fanout),
        output_topic=f"{topology}.stage2",
        options=SparkOptions(trigger_seconds=0.5, max_offsets_per_trigger=2000),
        name=name,
    )
    _serve(job, spark, stop)


def run_spark_spout(
    *,
    topology: str,
    bootstrap: str,
    name: str,
    checkpoint_dir: str,
    message_timeout_ms: int,
    max_pending: int,
    kafka_config: dict[str, Any],
    stop: threading.Event,
) -> None:
    """The spout stage as one streaming query, tracked as the Python spouts' are (the same retries,
    backoff and group)."""
    spark = spark_session(f"chaos-{name}", master="local[1]")
    job = SparkSpout(
        spark,
        topology=topology,
        connection=Connection(bootstrap, kafka_config=kafka_config),
        source_topics=f"{topology}.source",
        group_id=f"{topology}-spout",
        checkpoint_dir=checkpoint_dir,
        transform=forward,
        output_topic=f"{topology}.stage1",
        tracking=Tracking(
            message_timeout_ms=message_timeout_ms,
            backstop_grace_ms=message_timeout_ms,
            max_retries=50,
            max_pending=max_pending,
            backoff=Backoff(initial_ms=100, max_ms=2000),
        ),
        options=SparkOptions(single_query=True, trigger_seconds=0.5, max_offsets_per_trigger=2000),
        name=name,
    )
    _serve(job, spark, stop)


def _serve(job: SparkBolt | SparkSpout, spark: SparkSession, stop: threading.Event) -> None:
    """Run ``job`` until ``stop`` (or its query fails), then stop it and its session."""
    job.start()
    try:
        while not stop.wait(0.5):
            job.raise_if_failed()
    finally:
        job.stop()
        spark.stop()
