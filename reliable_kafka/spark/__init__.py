"""PySpark Structured Streaming jobs as members of tuple trees (docs/design.md section 7).

The only subpackage that imports pyspark (lazily: importing it starts no JVM).

- :func:`spark_session`: a local SparkSession with Spark's Kafka connector on its classpath.
- :class:`SparkSpout`: a streaming job whose source records are roots; commits its consumer group
  only as far as every record's tree has completed; redelivers, dead-letters, recovers on restart.
- :class:`SparkBolt`: a streaming job that reads a tracked topic and acks its inputs.
- :class:`SparkOptions`: how either job's streaming query runs (trigger, batch size, errors).
- :func:`merge_anchors` / :func:`concat_anchors`: carry anchors through aggregations and joins.
"""

try:
    import pyspark  # noqa: F401  (an optional dependency: extra [spark])
except ImportError as _exc:
    from reliable_kafka.errors import MissingExtraError

    raise MissingExtraError(
        "reliable_kafka.spark needs PySpark, which is an optional dependency: pip install 'reliable-kafka[spark]'"
    ) from _exc

from reliable_kafka.spark.anchors import ANCHORS_COLUMN, ANCHORS_TYPE, FAIL_COLUMN, concat_anchors, merge_anchors
from reliable_kafka.spark.bolt import SparkBolt
from reliable_kafka.spark.checkpoint import ResumePoint, read_resume_point
from reliable_kafka.spark.job import SparkJobStats
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.session import connector_jars, spark_session
from reliable_kafka.spark.spout import SparkSpout

__all__ = [
    "spark_session",
    "connector_jars",
    "SparkSpout",
    "SparkBolt",
    "SparkOptions",
    "SparkJobStats",
    "merge_anchors",
    "concat_anchors",
    "ANCHORS_COLUMN",
    "ANCHORS_TYPE",
    "FAIL_COLUMN",
    "ResumePoint",
    "read_resume_point",
]
