"""What Spark spouts and Spark bolts share: the streaming query, the writer, the driver's acks.

A job is one Structured Streaming query over Spark's Kafka source whose ``foreachBatch`` runs the
tracking of docs/design.md section 7.1 around the user's ``transform``. Subclasses decide where a batch's anchors
come from (fresh roots for a spout, the ``rk-anchors`` header for a bolt).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from reliable_kafka import validation as v
from reliable_kafka.config import Connection
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import AuthorizationError, ConfigError, DeliveryError, StateError, TopologyError
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.admin import admin_client, partition_count
from reliable_kafka.kafka.clients import check_ack_sender_config, new_consumer, new_producer
from reliable_kafka.kafka.produce import flush_or_raise, release_producer
from reliable_kafka.ops import reporter as ops_reporter
from reliable_kafka.ops.failures import FailureLog, FailureRecord
from reliable_kafka.ops.waiting import wait_serving
from reliable_kafka.security import spark_kafka_options as spark_security_options
from reliable_kafka.spark import writer
from reliable_kafka.spark.anchors import FAIL_COLUMN
from reliable_kafka.spark.batch_plans import BatchPlans
from reliable_kafka.spark.failed_rows import FailedRow, failed_from_metrics, observe_failed
from reliable_kafka.spark.jvm_functions import use_jvm_functions
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.writer import (
    fold_by_root,
    in_session,
    observed_metrics,
    release_observations,
    v2_write_session,
    write_in_jvm,
)
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from pyspark.sql import DataFrame, Observation, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from reliable_kafka.ops.reporter import ComponentReporter

__all__ = ["SOURCE_COLUMNS", "SparkJobStats", "Transform", "final_ack_columns", "final_acks"]

log = logging.getLogger(__name__)

SOURCE_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
"""Columns of Spark's Kafka source that a transform's input keeps (plus ``anchors``)."""

_CONSUMER_ONLY_OPTIONS = {"kafka.isolation.level", "kafka.group.id", "kafka.auto.offset.reset"}

Transform = Callable[..., Any]  # (DataFrame) -> DataFrame; pyspark stays an optional import


@dataclass
class SparkJobStats:
    """Counters of one job since ``start()`` (driver side).

    ``batches`` counts stream micro-batches, ``extra_batches`` recovery and redelivery batches
    the driver ran itself; ``inputs`` rows handed to the transform (a spout's stream batch registered
    from its offset ranges counts offsets: transaction markers too); ``outputs`` rows written;
    ``failed_rows`` output rows with ``rk_fail``; ``failed_batches`` batches whose transform or
    write failed (their roots were failed).
    """

    batches: int = 0
    extra_batches: int = 0
    inputs: int = 0
    outputs: int = 0
    failed_rows: int = 0
    failed_batches: int = 0
    quarantined: int = 0
    plans_reused: int = 0  # stream batches whose output plan was rebound, not built (batch_plans)
    last_batch_id: int | None = None  # the last stream micro-batch handed to the job
    last_input_rows_per_second: float | None = None  # its inputs / seconds since the previous one started


class SparkJob:
    """Base of :class:`SparkSpout` and :class:`SparkBolt` (see their docstrings)."""

    component = "spark-job"
    metrics_port: int | None = None  # set before start() to serve /metrics (0: a free port; reliable_kafka.ops)
    reuse_batch_plans = False  # a spout's stream batches rebind one plan per query (batch_plans)

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
        where = type(self).__name__  # the arguments' checks (reliable_kafka.validation)
        v.require_topology(where, "topology", topology)
        connection = Connection.of(where, connection)
        if connection.clients is not None:  # Spark's connector and the driver's clients are Kafka's own
            raise ConfigError(
                f"{where}: connection.clients must be None (a Spark job reaches Kafka through Spark's "
                f"connector and confluent-kafka), got {connection.clients!r}"
            )
        sources = v.require_topics(where, "source_topics", source_topics)
        v.require_str(where, "group_id", group_id)
        v.require_str(where, "checkpoint_dir", str(checkpoint_dir) if checkpoint_dir is not None else None)
        v.require_callable(where, "transform", transform)
        v.require_output_topic(
            where, "output_topic", output_topic, v.refused_outputs(TopologyTopics(topology), sources)
        )
        options = SparkOptions() if options is None else options
        v.require_instance(where, "options", options, SparkOptions)
        v.require_str(where, "name", name, optional=True)
        self.spark = spark
        self.topics = TopologyTopics(topology)
        self.connection = connection
        self.options = options
        self.bootstrap_servers = connection.bootstrap_servers
        self.source_topics = sources
        self.checkpoint_dir = str(checkpoint_dir)
        self.transform = transform
        self.output_topic = output_topic
        self.group_id = group_id
        self.trigger_seconds = options.trigger_seconds
        self.available_now = options.available_now
        self.max_offsets_per_trigger = options.max_offsets_per_trigger
        self.on_batch_error = options.on_batch_error
        self.kafka_config = connection.client_config()
        # Security settings of kafka_config reach Spark's Kafka reader too (docs/design.md section 10).
        self.spark_kafka_options = {
            "kafka.isolation.level": "read_committed",
            **spark_security_options(self.kafka_config),
            **dict(options.spark_kafka_options or {}),
        }
        self.task_id = new_id()
        self.name = name or f"{self.component}-{self.task_id & 0xFFFF:04x}"
        check_ack_sender_config(self.kafka_config, component=self.name)
        self.stats = SparkJobStats()
        self.query: Any = None  # a pyspark StreamingQuery once started
        self._producer: Producer | None = None
        self._acks: AckSender | None = None
        self._ack_partitions = 0
        self._failures_topic: str | None = None
        self._last_batch_start: float | None = None
        self._sink_session: Any = None  # where the outputs are written (writer.v2_write_session), once started
        self._batch_plans: BatchPlans | None = None  # a spout's stream batches' plan (batch_plans), per query
        self._reporter: ComponentReporter | None = None
        self._lock = threading.RLock()  # tracker, ack sender and stats: driver threads share them
        self._batch_lock = threading.Lock()  # one batch at a time (stream or driver-run)
        self._stopping = threading.Event()

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Wait for the cluster to answer (``ops.waiting.wait_serving``: the metrics port says so
        meanwhile), connect, prepare (subclass), then start the streaming query."""
        admin = admin_client(self.bootstrap_servers, self.kafka_config, component=self.name)
        if not wait_serving(self, admin, self._stopping, bootstrap_servers=self.bootstrap_servers):
            raise StateError(f"{self.name}: stopped while waiting for Kafka at {self.bootstrap_servers}; not started")
        found = partition_count(admin, self.topics.acks, wait=30.0)
        if found is None:
            raise TopologyError(
                f"{self.name}: ack topic {self.topics.acks} does not exist; start an acker worker for "
                f"topology {self.topics.topology!r} first"
            )
        self._ack_partitions = found
        # an older topology has no failures topic: its records would hold up the writers' flush
        self._failures_topic = self.topics.failures if partition_count(admin, self.topics.failures) else None
        self._producer = producer = new_producer(self.bootstrap_servers, self.kafka_config, ack_sender=self.name)
        self._acks = AckSender(producer, acks_topic=self.topics.acks, ack_partitions=found, sender=self.task_id)
        self._sink_session = v2_write_session(self.spark)  # a clone made now: the user's session is left alone
        try:
            self._prepare()
        except BaseException:
            self._close()
            raise
        self.query = self._start_query()
        self._reporter = ops_reporter.attach(self)  # status snapshots from the driver (reliable_kafka.ops)
        log.info(
            "%s: query %s reading %s, writing %s (%d ack partitions)",
            self.name,
            self.query.id,
            self.source_topics,
            self.output_topic,
            found,
        )

    def _prepare(self) -> None:
        """Subclass hook run before the query starts."""

    def _starting_offsets(self) -> str | None:
        """Subclass hook: Spark's ``startingOffsets`` for a new checkpoint (None: earliest)."""
        return None

    def _start_query(self) -> StreamingQuery:
        self._batch_plans = BatchPlans(self.name) if self.reuse_batch_plans else None  # a template per query
        writer = (
            self._source()
            .writeStream.queryName(self.name)
            .option("checkpointLocation", self.checkpoint_dir)
            .foreachBatch(self._on_batch)
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.trigger_seconds} seconds")
        return writer.start()

    def _source(self) -> DataFrame:
        """The stream of the source topics through Spark's Kafka source, as the query reads it."""
        reader = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap_servers)
            .option("subscribe", ",".join(self.source_topics))
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "false")
            .option("startingOffsets", self._starting_offsets() or "earliest")
        )
        if self.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_offsets_per_trigger))
        for key, value in self.spark_kafka_options.items():
            reader = reader.option(key, value)
        return reader.load()

    def stop(self, *, drain_timeout: float = 0.0) -> None:
        """Stop the query after the running batch; with ``drain_timeout``, keep tracking what is
        in flight for up to that many seconds; then commit what is done and close."""
        self._stopping.set()
        with self._batch_lock:  # the running batch finishes; the next one refuses to start
            pass
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as exc:  # the query may already have failed
                log.warning("%s: stopping the query: %s", self.name, exc)
        if drain_timeout > 0:
            self._drain(drain_timeout)
        self._close()
        if self._reporter is not None:
            self._reporter.close()

    def _drain(self, timeout: float) -> None:
        """Subclass hook: wait for in-flight work after the query stopped."""

    def _started(self) -> tuple[AckSender, Producer]:
        """The ack sender and producer; a :class:`StateError` before ``start()`` or after ``stop()``."""
        if self._acks is None or self._producer is None:
            raise StateError(f"{self.name}: not running; call start() first (and not after stop())")
        return self._acks, self._producer

    def _close(self) -> None:
        release_producer(self._producer, owner=self.name)
        # Dropping the last references destroys the librdkafka client (its threads, connections).
        self._acks = self._producer = None
        self._sink_session = None

    def run_until(
        self, predicate: Callable[[SparkJob], bool] | None = None, *, timeout: float = 60.0, poll_interval: float = 0.2
    ) -> bool:
        """Wait until ``predicate(self)`` is true (default: :meth:`idle`) or ``timeout`` seconds
        pass; True when the predicate held. Raises the error that stopped the query."""
        predicate = predicate or (lambda job: job.idle())
        deadline = time.monotonic() + timeout
        while True:
            self.raise_if_failed()
            if predicate(self):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_interval)

    def idle(self) -> bool:
        """True when nothing is in flight and the query has no data waiting (subclasses refine)."""
        return self.query is not None and not self._batch_lock.locked() and self._source_drained()

    def _source_drained(self) -> bool:
        """True when the query stopped, or its last batch read up to the latest offsets."""
        if not self.query.isActive:
            return True
        progress = self.query.lastProgress
        if not progress or not progress.get("sources"):
            return False
        source = progress["sources"][0]
        drained: bool = progress.get("numInputRows") == 0 or source.get("endOffset") == source.get("latestOffset")
        return drained

    def raise_if_failed(self) -> None:
        """Raise the error that stopped the streaming query, if any (not after ``stop()``)."""
        if self.query is not None and not self._stopping.is_set():
            exception = self.query.exception()
            if exception is not None:
                raise exception

    # --- one batch ------------------------------------------------------------------------------

    def _on_batch(self, df: DataFrame, batch_id: int) -> None:
        """``foreachBatch``: the subclass's batch, then the figures a Python StreamingQueryListener
        gave (it cost the JVM and the driver dozens of py4j calls per progress event)."""
        started, inputs = time.monotonic(), self.stats.inputs
        try:
            self._on_stream_batch(df, batch_id)
        finally:
            previous, self._last_batch_start = self._last_batch_start, started
            self.stats.last_batch_id = batch_id
            if previous is not None and started > previous:
                self.stats.last_input_rows_per_second = (self.stats.inputs - inputs) / (started - previous)

    def _on_stream_batch(self, df: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def _write(
        self, inputs: DataFrame | Callable[[], DataFrame], salt: int, *, batch: DataFrame | None = None
    ) -> tuple[int, int, tuple[Any, Any]]:
        """Run the transform and write its outputs through Spark's Kafka sink (``writer.write_in_jvm``,
        docs/design.md section 7.2); (outputs written, rows failed with ``rk_fail``, children). ``children`` is (roots,
        XOR of their child edges) as int64 arrays, observed during the write, which the caller must
        fold into the inputs' final acks (:func:`final_acks`). Rows failed with ``rk_fail`` are
        observed in the same write; their failure records and FAIL entries are sent (flushed) before
        this returns, so before any final ack. ``inputs``: the transform's input, or a callable
        returning it. ``batch``: the stream batch (``foreachBatch``'s DataFrame) ``inputs`` is one
        projection of, with its columns and ``salt`` only: its plan is then kept or rebound
        (``batch_plans``; with the Java functions and ``reuse_batch_plans``)."""
        session = self._sink_session
        plans = self._batch_plans if batch is not None and session is not None and use_jvm_functions(session) else None
        # plans only with a batch
        observed = plans.rows(batch, salt, session) if plans is not None else None  # type: ignore[arg-type]
        if observed is not None:
            self.stats.plans_reused += 1
            return self._write_rows(None, salt, session, observed=observed)
        outputs = self.transform(inputs() if callable(inputs) else inputs)
        columns = set(getattr(outputs, "columns", ()))
        writer.check_outputs(columns, component=self.name, transform=self.transform)
        if session is None:
            raise StateError(f"{self.name}: not running; call start() first (and not after stop())")
        outputs = in_session(outputs, session)
        if FAIL_COLUMN not in columns and plans is not None:
            observed = writer.output_rows_jvm(outputs, salt)
            plans.remember(observed[0], observed[1], batch, salt)  # type: ignore[arg-type]  # (as above)
            return self._write_rows(outputs, salt, session, observed=observed)
        return self._write_rows(outputs, salt, session, observe_fail=FAIL_COLUMN in columns)

    def _write_rows(
        self,
        outputs: DataFrame | None,
        salt: int,
        session: SparkSession,
        *,
        observed: tuple[DataFrame, Observation] | None = None,
        observe_fail: bool = False,
    ) -> tuple[int, int, tuple[Any, Any]]:
        """:meth:`_write` of the transform's ``outputs`` (in ``session``), or of their observed sink
        rows ``observed`` (``writer.output_rows_jvm``); ``observe_fail``: observe rows failed with ``rk_fail``."""
        failed_observation = None
        if observe_fail:
            outputs, failed_observation = observe_failed(outputs)  # type: ignore[arg-type]  # with outputs
        what = f"outputs to {self.output_topic}"
        try:
            written, roots, xors = write_in_jvm(
                outputs,
                salt=salt,
                bootstrap_servers=self.bootstrap_servers,
                topic=self.output_topic,
                options=self._sink_options(),
                session=session,
                observed=observed,
            )
            failed, failed_rows = 0, list[FailedRow]()
            if failed_observation is not None:  # completed by the same write
                metrics = observed_metrics(failed_observation, session, timeout=120.0, what=what)
                failed, failed_rows = failed_from_metrics(metrics, what=what)
        except BaseException:
            if failed_observation is not None:
                release_observations(outputs)  # type: ignore[arg-type]  # observed: outputs were given
            raise
        self._fail_rows(failed_rows)
        self.stats.outputs += written
        self.stats.failed_rows += failed
        return written, failed, (roots, xors)

    def _fail_rows(self, rows: list[FailedRow]) -> None:
        """For rows failed with ``rk_fail``: a failure record each (why, for ``reliable-kafka trace``
        and the dead letters' ``rk-reason``), then FAIL for their roots, flushed in that order."""
        rows = [row for row in rows if row.roots]  # an untracked row fails no tree
        if not rows:
            return
        _, producer = self._started()
        if self._failures_topic is not None:
            failures = FailureLog(producer, topic=self._failures_topic, component=self.name, task_id=self.task_id)
            for row in rows:
                failures.write(
                    FailureRecord.of(
                        roots=list(row.roots),
                        component=self.name,
                        task_id=self.task_id,
                        reason=row.reason,
                        retry=row.retry,
                    )
                )
        roots = sorted({root for row in rows for root in row.roots})
        self._send_entries(EventKind.FAIL, [(root, 0) for root in roots], what="FAIL of rows failed with rk_fail")

    def _sink_options(self) -> dict[str, str]:
        """The reader's ``kafka.*`` client options (security...) minus the consumer-only ones."""
        return {
            key: value
            for key, value in self.spark_kafka_options.items()
            if key.startswith("kafka.") and key not in _CONSUMER_ONLY_OPTIONS
        }

    def _send_entries(self, kind: EventKind, entries: list[tuple[int, int]], *, what: str) -> None:
        """Send ack-topic entries from the driver and wait until the broker has them."""
        self._send_columns(kind, [root for root, _ in entries], [val for _, val in entries], what=what)

    def _send_columns(self, kind: EventKind, roots: list[int], vals: list[int], *, what: str) -> None:
        """:meth:`_send_entries` of ``(roots[i], vals[i])``: a batch's entries in columns, added to the
        packer with two list extends (entry by entry, 25,000 of them took about 20 ms)."""
        if not roots:
            return
        acks, producer = self._started()
        with self._lock:
            errors_before = len(acks.delivery_errors)
            acks.extend(kind, roots, vals)
            acks.send()
        flush_or_raise(producer, what=f"{self.name} {what}")
        if len(acks.delivery_errors) > errors_before:
            raise DeliveryError(
                f"{self.name}: {what} not delivered to {self.topics.acks}: {acks.delivery_errors[-1]}",
                topic=self.topics.acks,
            )

    def _send_fails(self, roots: list[int]) -> None:
        """FAIL entries for ``roots``, best effort: the ackers then drop their trees early."""
        try:
            acks, producer = self._started()
            with self._lock:
                for root in roots:
                    acks.add(EventKind.FAIL, root)
                acks.send()
            producer.poll(0)
        except Exception as exc:
            log.warning("%s: FAIL entries for %d roots not sent (%s); their trees time out", self.name, len(roots), exc)

    def _batch_failed(self, what: str, exc: BaseException) -> None:
        """Log a failed batch; re-raise when the policy (or the error's kind) says stop."""
        self.stats.failed_batches += 1
        # a refused permission is no batch's fault: failing its roots would dead-letter the stream
        if isinstance(exc, (ConfigError, AuthorizationError)) or self.on_batch_error == "stop":
            log.error("%s: %s failed; stopping: %s", self.name, what, exc)
            raise exc
        log.error("%s: %s failed; its roots were failed and will be redelivered", self.name, what, exc_info=exc)

    def _commit_group(self, consumer: Consumer, offsets: list[TopicPartition]) -> None:
        """Commit explicit offsets (``TopicPartition`` list) synchronously."""
        if offsets:
            consumer.commit(offsets=offsets, asynchronous=False)

    def _source_partitions(self, consumer: Consumer, timeout: float = 30.0) -> list[tuple[str, int]]:
        partitions: list[tuple[str, int]] = []
        for topic in self.source_topics:
            described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                raise TopologyError(f"{self.name}: source topic {topic} does not exist")
            partitions.extend((topic, p) for p in sorted(described.partitions))
        return partitions

    def _new_group_consumer(self) -> Consumer:
        return new_consumer(self.bootstrap_servers, self.group_id, self.kafka_config)


def offsets_json(offsets: dict[tuple[str, int], int]) -> str:
    """Spark's Kafka offsets JSON for ``(topic, partition) -> offset``."""
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(by_topic)


def final_acks(inputs: list[tuple[int, int]] | np.ndarray, children: tuple[Any, Any]) -> list[tuple[int, int]]:
    """The inputs' own (root, edge) pairs folded with their children's XOR (roots, xors): one ACK
    entry per root, whose val cancels both the inputs' edges and the children's (docs/design.md section 7.2).
    ``inputs``: a list of pairs or an (n, 2) int64 array (a batch's pairs already folded in Spark)."""
    roots, vals = final_ack_columns(inputs, children)
    return list(zip(roots, vals))


def final_ack_columns(
    inputs: list[tuple[int, int]] | np.ndarray, children: tuple[Any, Any]
) -> tuple[list[int], list[int]]:
    """:func:`final_acks` as (roots, vals) lists, for :meth:`SparkJob._send_columns`."""
    if isinstance(inputs, np.ndarray):
        pairs = inputs.astype(np.int64, copy=False).reshape(-1, 2)
    else:
        flat = itertools.chain.from_iterable(inputs)  # a third of np.array's time over a list of tuples
        pairs = np.fromiter(flat, dtype=np.int64, count=2 * len(inputs)).reshape(-1, 2)
    roots, xors = children
    folded = fold_by_root(
        np.concatenate([pairs[:, 0], np.asarray(roots, dtype=np.int64)]),
        np.concatenate([pairs[:, 1], np.asarray(xors, dtype=np.int64)]),
    )
    return folded[0].tolist(), folded[1].tolist()
