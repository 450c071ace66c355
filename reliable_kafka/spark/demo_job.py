"""The demo's word-count job on PySpark (``reliable-kafka demo``, engine ``spark``).

Each sentence Spark reads is a root; per micro-batch the job counts words, and every (word,
count) row is anchored to all the sentences it counted, so a sentence completes only when the
downstream bolt has acked every count it went into.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any

from reliable_kafka.config import Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.spark.anchors import merge_anchors
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.session import spark_session
from reliable_kafka.spark.spout import SparkSpout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from reliable_kafka.local import Component

__all__ = ["count_words", "SparkWordCount"]


def count_words(sentences: DataFrame) -> DataFrame:
    """Per micro-batch: (word, count) rows, each anchored to every sentence it counted."""
    from pyspark.sql import functions as F

    words = sentences.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"), "anchors")
    return (
        words.groupBy("word")
        .agg(F.count("*").cast("string").alias("value"), merge_anchors().alias("anchors"))
        .withColumnRenamed("word", "key")
    )


class SparkWordCount:
    """A :class:`SparkSpout` running :func:`count_words` from ``sentences`` into ``words``."""

    components: list[Component] = []  # the job runs in Spark, not as LocalCluster threads

    def __init__(self, bootstrap: str, topology: str, sentences: str, words: str) -> None:
        self.group_id = f"{topology}-spark"
        self._checkpoint = tempfile.TemporaryDirectory(prefix="rk-demo-checkpoint-")
        print("demo: starting Spark (local mode) with its Kafka connector...", flush=True)
        self.spark = spark_session("reliable-kafka-demo", log_level="ERROR")  # its intended failures: no warnings
        self.job = SparkSpout(
            self.spark,
            topology=topology,
            connection=bootstrap,
            source_topics=sentences,
            group_id=self.group_id,
            checkpoint_dir=self._checkpoint.name,
            transform=count_words,
            output_topic=words,
            options=SparkOptions(trigger_seconds=1.0, max_offsets_per_trigger=4000),
            tracking=Tracking(max_retries=10, message_timeout_ms=30_000, backoff=Backoff(initial_ms=200, max_ms=2000)),
        )

    def start(self) -> None:
        self.job.start()

    def stop(self) -> None:
        try:
            self.job.stop()
        finally:
            self.spark.stop()
            self._checkpoint.cleanup()

    def stats(self) -> dict[str, Any]:
        progress = self.job.progress()
        tracker = progress["tracker"]
        return {
            "read": progress["inputs"],
            "completed": tracker["completed"],
            "replayed": tracker["redelivered"],
            "dead_lettered": progress["dead_lettered"],
            "pending": progress["pending_roots"],
        }
