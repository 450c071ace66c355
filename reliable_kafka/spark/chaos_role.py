"""The chaos harness's PySpark process: a SparkBolt in place of the split bolts.

It reads ``<T>.stage1`` and writes ``FANOUT`` children per record to ``<T>.stage2``, each anchored
to its input; the harness SIGKILLs the driver (its JVM dies with it) and restarts it on the same
checkpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reliable_kafka.config import Connection
from reliable_kafka.spark.bolt import SparkBolt
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["run_spark_split"]


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
    job.start()
    try:
        while not stop.wait(0.5):
            job.raise_if_failed()
    finally:
        job.stop()
        spark.stop()
