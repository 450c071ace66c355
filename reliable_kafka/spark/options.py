"""How a Spark job's streaming query runs (:class:`SparkOptions`, a Spark job's ``options=``).

The Spark counterpart of :class:`~reliable_kafka.config.Loop`: what the Python components' loops
are to them, Structured Streaming's trigger and Kafka reader are to a :class:`SparkSpout` or a
:class:`SparkBolt`. No pyspark import here: the object is checked (and made in tests) without Spark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from reliable_kafka.errors import ConfigError
from reliable_kafka.validation import require_bool, require_choice, require_int, require_mapping, require_number

__all__ = ["SparkOptions", "BatchErrorPolicy"]

BatchErrorPolicy = Literal["fail_roots", "stop"]

_DURATION = re.compile(r"^\s*(\d+)\s*(milliseconds?|seconds?|minutes?|hours?)\s*$")
_UNIT_SECONDS = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0}


@dataclass(frozen=True)
class SparkOptions:
    """A Spark job's query settings; ``SparkOptions()`` is every default.

    - ``trigger_seconds`` [1.0]: a micro-batch every that many seconds (Spark's ProcessingTime).
    - ``available_now`` [False]: process what the source topics hold, then stop reading new data
      (Spark's AvailableNow; a spout still redelivers what fails); ``trigger_seconds`` is then unused.
    - ``max_offsets_per_trigger`` [None]: at most this many offsets per micro-batch (Spark's
      ``maxOffsetsPerTrigger``; None: all that is there).
    - ``on_batch_error`` ["fail_roots"]: a batch whose transform or write fails has its roots
      failed (redelivered, in the end dead-lettered) and the stream goes on; ``"stop"`` stops the
      query instead.
    - ``spark_kafka_options`` [None]: options for Spark's Kafka reader and sink (``kafka.*``),
      over the ones translated from the connection's security settings;
      ``kafka.isolation.level`` defaults to ``read_committed``.
    - ``commit_interval_ms`` [1000]: a spout commits its consumer group at most this often.
    - ``reuse_batch_plans`` [True]: with reliable-kafka's Java functions, a spout's stream batch
      output plan is built (and ``transform`` called) once per query and rebound to each later
      batch; False: built anew every batch (for a transform whose plan changes between batches).

    - ``single_query`` [False]: a spout runs as one streaming query, Spark's Kafka source to
      Spark's Kafka sink, with no ``foreachBatch`` (docs/spark.md, "One streaming query"); its
      ``transform`` must be row-wise (projections, filters, explode, UDFs: each source record's
      outputs made in one task), which is checked when the query starts.
    - ``real_time`` [None]: a batch duration such as ``"20 seconds"``: the spout's single query runs
      in Spark's real-time mode (``trigger(realTime=...)``, Spark 4.1 and later), records
      processed as they arrive; implies ``single_query``. A :class:`SparkSpout` refuses one not
      shorter than its ``tracking.message_timeout_ms`` (a quiet partition's last record completes
      at the batch's end at the latest).

    A :class:`SparkBolt` reads none of the last four (it commits after every batch and builds
    every batch's plan, through ``foreachBatch``).
    """

    trigger_seconds: float = 1.0
    available_now: bool = False
    max_offsets_per_trigger: int | None = None
    on_batch_error: BatchErrorPolicy = "fail_roots"
    spark_kafka_options: Mapping[str, str] | None = None
    commit_interval_ms: int = 1000
    reuse_batch_plans: bool = True
    single_query: bool = False
    real_time: str | None = None

    def __post_init__(self) -> None:
        require_number("SparkOptions", "trigger_seconds", self.trigger_seconds, above=0)
        require_bool("SparkOptions", "available_now", self.available_now)
        require_int("SparkOptions", "max_offsets_per_trigger", self.max_offsets_per_trigger, minimum=1, optional=True)
        require_choice("SparkOptions", "on_batch_error", self.on_batch_error, ("fail_roots", "stop"))
        require_mapping("SparkOptions", "spark_kafka_options", self.spark_kafka_options)
        require_int("SparkOptions", "commit_interval_ms", self.commit_interval_ms, minimum=0)
        require_bool("SparkOptions", "reuse_batch_plans", self.reuse_batch_plans)
        require_bool("SparkOptions", "single_query", self.single_query)
        if self.real_time is not None:
            match = _DURATION.match(self.real_time) if isinstance(self.real_time, str) else None
            if match is None or int(match.group(1)) == 0:
                raise ConfigError(
                    f"SparkOptions: real_time must be a batch duration above 0 such as '5 minutes' or '30 seconds', "
                    f"got {self.real_time!r}"
                )
            if self.available_now:
                raise ConfigError("SparkOptions: real_time and available_now=True exclude each other (one trigger)")

    @property
    def real_time_seconds(self) -> float | None:
        """``real_time`` in seconds (None without it)."""
        if self.real_time is None:
            return None
        match = _DURATION.match(self.real_time)
        assert match is not None  # checked in __post_init__
        return float(match.group(1)) * _UNIT_SECONDS[match.group(2).removesuffix("s")]

    @property
    def one_query(self) -> bool:
        """True when a spout runs as one streaming query (``single_query``, or ``real_time``)."""
        return self.single_query or self.real_time is not None
