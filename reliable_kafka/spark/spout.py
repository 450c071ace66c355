"""A Spark Structured Streaming job as a spout: every source record it reads is a root.

Spark's Kafka source and micro-batch engine do the reading; ``foreachBatch`` adds tracking
(docs/design.md section 7 and 7.1). Per batch the driver

1. derives each record's root and edge from a fresh salt (``reliable_kafka.spark.derive``): for
   a stream batch in NumPy from its offset ranges in Spark's offset log, otherwise collected as
   columns (``reliable_kafka.spark.batch_roots``); registers them with the in-flight tracker a
   partition at a time and sends INIT for every root, flushed before anything else happens;
2. runs the user's ``transform`` over the batch (key, value, topic, partition, offset,
   timestamp, headers, attempt, anchors) and writes its outputs through Spark's Kafka sink, with
   the per-root XOR of their child edges observed in the same job (``writer.write_in_jvm``; rows
   failed with ``rk_fail`` are observed too, and their roots failed before the acks below);
3. after the write action succeeded, acks each input's own edge, folded with that XOR.

A background driver loop consumes this spout's outcomes, redelivers failed and timed-out records
(re-read by offset with a batch Kafka read, processed with new roots, joined to the next
micro-batch or run on their own when no data arrives), dead-letters records past the retry limit
and commits the job's consumer group up to the tracker's commit point, with the offsets done above
it in the commit metadata. A record Kafka deleted while in flight (retention, ``delete_records``)
leaves a dead-letter reference (coordinates, attempts, no value), and is done once that is delivered.
Only that commit says what is done: Spark's checkpoint says only what was read. On start, records
between the group's commit and the point where Spark resumes (``reliable_kafka.spark.recovery``)
that are not recorded as done are processed again first.

With ``SparkOptions(single_query=True)`` (or ``real_time=...``) there is no ``foreachBatch``: the
query writes each record's outputs and its INIT itself, and the driver loop follows Spark's commit
log to register each committed batch (``reliable_kafka.spark.single_query``, docs/spark.md).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from confluent_kafka import Consumer, KafkaException, TopicPartition

from reliable_kafka import validation as v
from reliable_kafka.config import Connection, Tracking
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.core.tracker import InFlightTracker, Redelivery
from reliable_kafka.errors import ConfigError, StateError
from reliable_kafka.kafka.admin import admin_client, partition_count
from reliable_kafka.kafka.clients import new_consumer
from reliable_kafka.spark.batch_roots import BatchRoots, OffsetLog, register_ranges
from reliable_kafka.spark.checkpoint import HadoopFiles, ResumePoint, read_resume_point
from reliable_kafka.spark.derive import EDGE_TAG, ROOT_TAG, edge_column, id_sql, root_column
from reliable_kafka.spark.job import SOURCE_COLUMNS, SparkJob, Transform, final_ack_columns
from reliable_kafka.spark.jvm_functions import MODE_ENV, functions_mode, require_class
from reliable_kafka.spark.offset_reads import chunks, read_ranges, read_redeliveries
from reliable_kafka.spark.options import SparkOptions
from reliable_kafka.spark.recovery import committed_offsets, plan_recovery
from reliable_kafka.spark.single_query import (
    TRACKED_ROWS_CLASS,
    CommitFollower,
    EarlyOutcomes,
    check_outputs,
    check_row_wise,
    checkpoint_files,
    committed_ranges,
    real_time_supported,
    real_time_trigger,
    sink_options,
    tracked_rows,
)
from reliable_kafka.spout.reread import RereadFailed, SourceRereader
from reliable_kafka.spout.roots import RootOwner, RootStats
from reliable_kafka.spout.spout import source_record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["SparkSpout"]

log = logging.getLogger(__name__)

TP = tuple[str, int]

REAL_TIME_FLUSH_MS = 2
MICRO_BATCH_FLUSH_MS = 200
"""A single query's task writes the INITs it has queued once the oldest waited this long (checked
at its next row): promptly in real-time mode, where tasks last the whole batch and a tree's
completion waits for its INIT (5 ms gave p50 27 ms at 1,000 sentences/s, 1 ms 21 ms: ``./rk bench
spark_real_time``); within a fraction of the message timeout in a micro-batch, so that a long
task's early downstream acks never wait ownerless at the acker until they expire (its trees would
time out)."""


class _BeforeEmit(Exception):
    """A batch failed before its records were registered: nothing of it is tracked yet."""


class _Connection(TypedDict):
    """How the batch reads of source records connect (``offset_reads``)."""

    bootstrap_servers: str
    options: dict[str, str]


class SparkSpout(SparkJob):
    """A PySpark streaming job whose source records are the roots of tuple trees.

    Keyword arguments (defaults in brackets):

    - ``topology``, ``connection`` (a bootstrap servers string or a
      :class:`~reliable_kafka.config.Connection`: the driver's and tasks' librdkafka settings, and
      their security settings translated for Spark's Kafka reader and sink), ``source_topics``,
      ``group_id``, ``checkpoint_dir``, ``transform`` (DataFrame -> DataFrame with value, anchors
      and optionally key, headers, rk_fail), ``output_topic``: required. ``group_id`` is the
      consumer group whose committed offsets are the job's true progress (Spark's own source never
      commits).
    - ``tracking`` [``Tracking()``]: a :class:`~reliable_kafka.config.Tracking`, as the Python
      spout's: ``max_retries``, ``max_pending`` (holds the next micro-batch back while that many
      roots are in flight; not with ``single_query``, which has no hook between batches: bound
      its batches with ``max_offsets_per_trigger``), ``backoff``, ``message_timeout_ms``, ``backstop_grace_ms``, the
      dead-letter guard (a tripped guard stops the job: ``run_until``/``raise_if_failed`` raise
      :class:`~reliable_kafka.errors.DeadLetterGuardTripped`) and ``root_index``; the guarantee is
      always ``"at_least_once"``, and ``ackers`` is the ackers' alone.
    - ``options`` [``SparkOptions()``]: a :class:`~reliable_kafka.spark.options.SparkOptions`: the
      trigger (``trigger_seconds`` or ``available_now``), ``max_offsets_per_trigger``,
      ``on_batch_error``, ``spark_kafka_options``, ``commit_interval_ms`` and ``reuse_batch_plans``.
    - ``name`` [``spark-spout-XXXX``].
    """

    component = "spark-spout"

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
        tracking: Tracking | None = None,
        options: SparkOptions | None = None,
        name: str | None = None,
    ) -> None:
        tracking = Tracking() if tracking is None else tracking
        v.require_instance("SparkSpout", "tracking", tracking, Tracking)
        if tracking.guarantee != "at_least_once":  # a Spark spout always tracks and replays
            raise ConfigError(
                f"SparkSpout: tracking.guarantee must be 'at_least_once' (a Spark spout tracks every "
                f"record), got {tracking.guarantee!r}"
            )
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
        self.tracking = tracking
        self.single_query = self.options.one_query
        if self.options.real_time is not None and not real_time_supported():
            import pyspark

            raise ConfigError(
                f"SparkSpout: options.real_time={self.options.real_time!r} needs Spark's real-time mode "
                f"(Spark 4.1 or later); PySpark {pyspark.__version__} is installed"
            )
        seconds, timeout_ms = self.options.real_time_seconds, self.tracking.message_timeout_ms
        if seconds is not None and timeout_ms is not None and seconds * 1000 >= timeout_ms:
            raise ConfigError(
                f"SparkSpout: options.real_time={self.options.real_time!r} is not below tracking.message_timeout_ms="
                f"{timeout_ms}: a record's INIT is written when its task reads the next record "
                f"or the batch ends, so after the last record before a pause its tree would time out and be replayed; "
                f"give a shorter batch duration (e.g. '20 seconds' with the default 30 s timeout) or a longer "
                f"message_timeout_ms (to the acker workers too)"
            )
        if self.single_query and functions_mode() == "off":
            raise ConfigError(
                f"SparkSpout: options.single_query (or real_time) needs reliable-kafka's Java functions "
                f"(TrackedRows), which {MODE_ENV}=off turns off; unset it or run without single_query"
            )
        self.commit_interval_ms = self.options.commit_interval_ms
        self.reuse_batch_plans = self.options.reuse_batch_plans
        self.partitions: list[TP] = []
        self.recovered = 0  # records processed again on start (between group commit and checkpoint)
        self.commits = 0
        self.throttled = 0  # micro-batches held back by max_pending
        self._group: Consumer | None = None  # commits the job's consumer group (made by start())
        self._watermarks: Consumer | None = None
        self._watermarks_lock = threading.Lock()
        self._starting: str | None = None
        self._loop: threading.Thread | None = None
        self._loop_stop = threading.Event()
        self._last_commit = 0.0
        self._resume = ResumePoint()  # where Spark resumes: read by start()
        self._follower: CommitFollower | None = None  # a single query's committed batches (start())
        self._next_expiry = 0.0  # when the driver loop next drops held outcomes older than they can matter
        self._query_salt = 0  # a single query's ids: derived from this salt and the coordinates
        # outcomes that came before their single-query batch was registered: kept until long after
        # that batch can have ended (a real-time batch lasts its whole duration)
        timeout_s = (tracking.message_timeout_ms or 30_000) / 1000.0
        self._early = EarlyOutcomes(keep_s=2 * max(timeout_s, self.options.real_time_seconds or 0.0) + 600.0)
        # the root-owning core: outcomes, dead letters (records read again by offset), commits
        self._roots = RootOwner(
            component=self.name,
            topics=self.topics,
            connection=Connection(self.bootstrap_servers, kafka_config=self.kafka_config),
            tracking=tracking,
            stats=RootStats(),
            lock=self._lock,
            reason_with_attempts=False,
        )  # a Spark job's dead letters always said just FAILED or TIMED_OUT
        self._rereader = SourceRereader(
            component=self.name,
            bootstrap_servers=self.bootstrap_servers,
            group_id=f"{self.group_id}.rk-fetch",
            kafka_config=self.kafka_config,
            records=self._roots.records,
            to_record=source_record,
            gone=self._roots.gone,  # a deleted record leaves a reference in the DLQ; a marker is done
        )
        self._roots.reread = self._rereader
        self._batches = BatchRoots(  # stream batches' offset log: set by start()
            component=self.name,
            owner=self._roots,
            offset_log=None,
            low_watermark=self._low_watermark,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            lock=self._lock,
        )

    @property
    def tracker(self) -> InFlightTracker:
        """The in-flight tracker, which the root owner builds and owns."""
        return self._roots.tracker

    @property
    def skipped(self) -> int:
        """Records Spark handed over again that were already done."""
        return self._batches.skipped

    @property
    def dead_lettered(self) -> int:
        return self._roots.stats.dead_lettered

    @property
    def metadata_truncated(self) -> int:
        return self._roots.stats.metadata_truncated

    @property
    def lost_to_retention(self) -> int:
        """Records Kafka deleted while in flight; each left a reference (no value) in the DLQ."""
        return self._batches.not_redelivered + self._roots.stats.expired_in_flight

    # --- start ----------------------------------------------------------------------------------

    def _prepare(self) -> None:
        self._group = self._new_group_consumer()
        self._watermarks = new_consumer(self.bootstrap_servers, f"{self.group_id}.rk-fetch", self.kafka_config)
        self.partitions = self._source_partitions(self._group)
        self._roots.use_producer(self._producer)
        self._roots.listen(self.task_id)  # before any INIT: no outcome of this incarnation can be missed
        # an older topology has no root index topic (an acker of this version creates it)
        admin = admin_client(self.bootstrap_servers, self.kafka_config, component=self.name)
        if self.tracking.root_index and partition_count(admin, self.topics.roots):
            self._roots.index_roots(self.task_id)  # so that `reliable-kafka trace` finds a record's trees
        self._batches.offset_log = OffsetLog(self.checkpoint_dir, HadoopFiles(self.spark))
        self._recover()
        self._loop = threading.Thread(target=self._drive, name=f"{self.name}-driver", daemon=True)
        self._loop.start()

    def _recover(self) -> None:
        """Track from the group's commit; process again what Spark will not re-read."""
        self._resume = resume = read_resume_point(self.checkpoint_dir, spark=self.spark)  # any Hadoop file system
        assert self._group is not None  # start() made it just before
        committed = committed_offsets(self._group, self.partitions, component=self.name, group_id=self.group_id)
        ranges, self._starting = plan_recovery(self._roots, committed, resume, self.partitions)
        if ranges:
            log.info(
                "%s: recovering %s (group commit .. checkpoint resume point)",
                self.name,
                {f"{t}[{p}]": r for (t, p), r in ranges.items()},
            )
        for chunk in chunks(ranges, self.max_offsets_per_trigger or 100_000):
            self.stats.extra_batches += 1
            with self._batch_lock:
                self._run_batch(
                    read_ranges(self.spark, chunk, **self._connection()), [], what="recovery batch", recovery=True
                )

    def _connection(self) -> _Connection:
        return {"bootstrap_servers": self.bootstrap_servers, "options": self.spark_kafka_options}

    def _starting_offsets(self) -> str | None:
        return self._starting

    def _start_query(self) -> StreamingQuery:
        if not self.single_query:
            return super()._start_query()
        require_class(self.spark, TRACKED_ROWS_CLASS, component=self.name, needs="single_query (TrackedRows)")
        self._query_salt = salt = new_id()  # a new run's roots are new (a re-run batch: new roots)
        outputs = self.transform(_stream_inputs(self._source(), salt, edges=False))
        check_outputs(set(outputs.columns), component=self.name, transform=self.transform)
        check_row_wise(outputs, component=self.name, transform=self.transform)
        real_time = self.options.real_time is not None
        sink = tracked_rows(
            outputs,
            output_topic=self.output_topic,
            acks_topic=self.topics.acks,
            ack_partitions=self._ack_partitions,
            sender=self.task_id,
            flush_ms=REAL_TIME_FLUSH_MS if real_time else MICRO_BATCH_FLUSH_MS,
        )
        writer = (
            sink.writeStream.format("kafka")
            .queryName(self.name)
            .option("checkpointLocation", self.checkpoint_dir)
            .option("kafka.bootstrap.servers", self.bootstrap_servers)
        )
        for key, value in sink_options(self._sink_options(), component=self.name).items():
            writer = writer.option(key, value)
        last = self._resume.last_committed
        self._follower = CommitFollower(
            self.checkpoint_dir,
            checkpoint_files(self.checkpoint_dir, self.spark),
            next_id=0 if last is None else last + 1,
        )
        self._roots.on_unknown = self._early.hold
        if self.options.real_time is not None:
            writer = real_time_trigger(writer.outputMode("update"), self.options.real_time)
        elif self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.trigger_seconds} seconds")
        return writer.start()

    def _take_committed_batches(self) -> None:
        """A single query's batches whose commit Spark wrote since the last look: register each
        one's offsets, apply the outcomes that came first, INIT(root, 0) for the other roots."""
        assert self._follower is not None
        while (batch_id := self._follower.committed()) is not None:
            ranges = committed_ranges(self._batches.offset_log, batch_id, self._low_watermark)  # type: ignore[arg-type]
            with self._lock:
                entries, skipped = register_ranges(self._roots, ranges, self._query_salt)
                self._batches.skipped += len(skipped)
                roots = [root for root, _ in entries]
                early = self._early.take(roots)
                if early:
                    self._roots.apply_outcomes(list(early), np.array(list(early.values()), dtype=np.uint8))
                self.stats.batches += 1
                self.stats.inputs += len(entries)
                self.stats.last_batch_id = batch_id
            self._follower.taken()
            rest = [root for root in roots if root not in early] if early else roots
            try:
                if self._roots.root_index is not None:
                    self._roots.root_index.send()  # flushed with the INITs
                self._send_columns(EventKind.INIT, rest, [0] * len(rest), what=f"INIT of batch {batch_id}")
            except Exception as exc:  # their trees cannot complete: redelivered
                self._batches.fail_locally(rest, exc, task_id=self.task_id)
                self._send_fails(rest)
                log.warning(
                    "%s: batch %d: INIT not delivered (%s); its records are redelivered", self.name, batch_id, exc
                )

    # --- batches --------------------------------------------------------------------------------

    def _on_stream_batch(self, df: DataFrame, batch_id: int) -> None:
        self._roots.raise_if_guard_tripped()  # fails the query: a bad deploy must not divert the stream
        self._wait_below_max_pending()
        if self._stopping.is_set():
            raise StateError(f"{self.name}: stopping; batch {batch_id} is left to the next run")
        with self._batch_lock:
            self.stats.batches += 1
            with self._lock:
                redeliveries = self.tracker.due_redeliveries()
            self._run_batch(df, redeliveries, what=f"batch {batch_id}", batch_id=batch_id)

    def _wait_below_max_pending(self) -> None:
        """Backpressure: the next micro-batch waits while ``max_pending`` roots are in flight."""
        waited = False
        while not self._stopping.is_set():
            with self._lock:
                if not self.tracker.over_max_pending():
                    break
            waited = True
            time.sleep(0.05)
        self.throttled += waited

    def _run_batch(
        self,
        fresh: DataFrame | None,
        redeliveries: list[Redelivery],
        *,
        what: str,
        recovery: bool = False,
        batch_id: int | None = None,
    ) -> None:
        """Track, transform, write and ack one batch (fresh records and/or redeliveries); a stream
        batch (``batch_id``) without redeliveries is registered from its offset ranges."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        salt = new_id()

        def with_ids(frame: DataFrame) -> DataFrame:
            return frame.select("*", root_column(salt).alias("root"), edge_column(salt).alias("edge"))

        ranges = self._batches.stream_ranges(batch_id) if fresh is not None and not redeliveries else None
        # (ranges come only with a fresh batch: fresh is not None where they are used below)
        batch: DataFrame
        inputs: DataFrame | Callable[[], DataFrame]
        if ranges is not None:  # registered from its offset ranges: only the write reads the batch
            batch = fresh  # type: ignore[assignment]
        else:
            frames = []
            if fresh is not None:
                frames.append(fresh.select(*SOURCE_COLUMNS, F.lit(1).alias("attempt")))
            if redeliveries:
                frames.append(read_redeliveries(self.spark, redeliveries, **self._connection()))
            if not frames:
                return
            # collected: one Spark job reads the batch; the write reads the cache
            batch = with_ids(functools.reduce(lambda a, b: a.unionByName(b), frames))
            batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        roots: list[int] = []
        try:
            try:
                entries, skipped = self._batches.register(batch, ranges, salt, redeliveries)
            except Exception as exc:
                raise _BeforeEmit(str(exc)) from exc
            roots = [root for root, _ in entries]
            edges = [edge for _, edge in entries]
            if recovery:
                self.recovered += len(entries)
            if not entries:
                return
            if self._roots.root_index is not None:
                self._roots.root_index.send()  # flushed with the INITs
            self._send_columns(EventKind.INIT, roots, edges, what=f"INIT of {what}")  # (1)
            stream = None  # a stream batch whose inputs are one projection of it: its plan may be reused
            if ranges is not None and not skipped:  # one projection: each DataFrame step is analysed anew
                inputs, stream = functools.partial(_stream_inputs, fresh, salt), fresh  # type: ignore[arg-type]
            else:
                inputs = batch if ranges is None else with_ids(fresh.select(*SOURCE_COLUMNS, F.lit(1).alias("attempt")))  # type: ignore[union-attr]
                if skipped:
                    spark = inputs.sparkSession
                    done = spark.createDataFrame([(root,) for root in skipped], "root long")
                    inputs = inputs.join(F.broadcast(done), "root", "left_anti")
                inputs = inputs.select(*SOURCE_COLUMNS, "attempt", F.array(F.struct("root", "edge")).alias("anchors"))
            self.stats.inputs += len(entries)  # from offset ranges: transaction markers included
            _, _, children = self._write(inputs, salt, batch=stream)  # (2)
            acked, vals = final_ack_columns(entries, children)  # the children's XOR goes into the final acks
            self._send_columns(EventKind.ACK, acked, vals, what=f"input acks of {what}")  # (3)
        except _BeforeEmit as exc:
            self._batches.requeue(redeliveries)
            cause = exc.__cause__ or exc
            log.error("%s: %s failed before its records were tracked: %s", self.name, what, cause)
            raise cause  # noqa: B904 (the original error itself, keeping its own cause)
        except Exception as exc:
            if roots:
                self._batches.fail_locally(roots, exc, task_id=self.task_id)
                self._send_fails(roots)
            self._batch_failed(what, exc)
        finally:
            if ranges is None:
                batch.unpersist()

    # --- the driver loop ------------------------------------------------------------------------

    def _drive(self) -> None:
        while not self._loop_stop.is_set():
            try:
                self._drive_once()
            except Exception as exc:  # Kafka away, a failed redelivery batch...: log, go on
                log.exception("%s: driver loop: %s", self.name, exc)
                self._loop_stop.wait(1.0)

    def _drive_once(self) -> None:
        self._roots.take_outcomes(0.1, max_records=1000)
        if self._follower is not None:
            self._take_committed_batches()
            if time.monotonic() >= self._next_expiry:  # a scan of every held outcome: not every loop
                self._early.expire()
                self._next_expiry = time.monotonic() + 10.0
        if self._roots.dead_letters_waiting:
            self._write_dead_letters()
        if self._roots.guard_tripped is None:
            self._redeliver_if_idle()
        if (time.monotonic() - self._last_commit) * 1000 >= self.commit_interval_ms:
            self.commit()

    def _redeliver_if_idle(self) -> None:
        """Spark runs no batch without new data: redeliveries that are due run on their own."""
        with self._lock:
            due = self.tracker.next_due_ms()
        if due is None or due > time.monotonic_ns() // 1_000_000 or self._stopping.is_set():
            return
        if not self._batch_lock.acquire(blocking=False):
            return  # a stream batch is running; it takes the due redeliveries itself
        try:
            with self._lock:
                redeliveries = self.tracker.due_redeliveries()
            if redeliveries:
                self.stats.extra_batches += 1
                self._run_batch(None, redeliveries, what=f"redelivery of {len(redeliveries)} records")
        finally:
            self._batch_lock.release()

    def _write_dead_letters(self) -> None:
        """The records bound for the DLQ, read again by offset, parked and confirmed by a flush."""
        try:
            self._roots.write_dead_letters()
        except RereadFailed as exc:  # the broker is away: they stay bound for the next round
            log.warning("%s: %s", self.name, exc)
            return
        if not self._roots.confirm_dead_letters(30.0):
            log.warning("%s: dead letters to %s not confirmed yet; they stay pending", self.name, self.topics.dlq)

    # --- commits --------------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the group to the tracker's commit points, with done-above metadata."""
        self._last_commit = time.monotonic()
        offsets = self._roots.offsets_to_commit()
        if not offsets:
            return
        try:
            self._commit_group(self._group, offsets)  # type: ignore[arg-type]  # made by start()
        except KafkaException as exc:
            log.warning("%s: commit postponed: %s", self.name, exc)
            return
        self._roots.committed(offsets)
        self.commits += 1

    def raise_if_failed(self) -> None:
        """Also raise :class:`~reliable_kafka.errors.DeadLetterGuardTripped` once the guard stopped the job."""
        if not self._stopping.is_set():
            self._roots.raise_if_guard_tripped()
        super().raise_if_failed()

    def committed_offsets(self) -> dict[TP, int]:
        """What this job last committed, per source partition."""
        return self._roots.committed_offsets()

    def end_offsets(self) -> dict[TP, int]:
        """High watermarks of the source partitions now."""
        with self._watermarks_lock:
            assert self._watermarks is not None, "SparkSpout.start() was not called"
            return {
                (t, p): self._watermarks.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)[1]
                for t, p in self.partitions
            }

    def _low_watermark(self, tp: TP) -> int:
        with self._watermarks_lock:
            assert self._watermarks is not None, "SparkSpout.start() was not called"
            return self._watermarks.get_watermark_offsets(TopicPartition(*tp), timeout=10, cached=False)[0]

    def caught_up(self) -> bool:
        """True when the committed offsets reached the current end of every source partition."""
        committed = self.committed_offsets()
        return all(committed.get(tp, 0) >= end for tp, end in self.end_offsets().items() if end > 0)

    def idle(self) -> bool:
        """Nothing in flight or waiting for a retry, everything done is committed, and the query's
        last batch read up to the latest offsets (or it finished)."""
        with self._lock:
            busy = self._in_flight()
            points = self.tracker.commit_points()
        followed = self._follower is None or self._follower.committed() is None
        return not busy and followed and points == self.committed_offsets() and super().idle()

    def _in_flight(self) -> bool:
        """True while any record is not done: in flight, waiting for a retry or a dead-letter write."""
        tracker = self.tracker
        return bool(
            tracker.pending_roots()
            or tracker.next_due_ms() is not None
            or self._roots.dead_letters_waiting
            or any(tracker.pending_offsets(tp) for tp in tracker.partitions())
        )

    # --- stop -----------------------------------------------------------------------------------

    def _drain(self, timeout: float) -> None:
        """Keep the driver loop tracking (outcomes, redeliveries) until nothing is in flight."""
        deadline = time.monotonic() + timeout
        self._stopping.clear()  # redeliveries may still run while draining; the query is stopped
        try:
            while time.monotonic() < deadline and self._loop is not None and self._loop.is_alive():
                with self._lock:
                    if not self._in_flight():
                        return
                time.sleep(0.1)
        finally:
            self._stopping.set()

    def _close(self) -> None:
        self._loop_stop.set()
        if self._loop is not None:
            self._loop.join(timeout=60)
        try:
            if self._group is not None:
                self.commit()
        finally:
            for consumer in (self._group, self._watermarks):
                if consumer is not None:
                    consumer.close()
            self._group = self._watermarks = None
            self._rereader.close()
            self._roots.close()
            super()._close()
        log.info("%s: stopped; %s", self.name, self.progress())

    def progress(self) -> dict[str, Any]:
        """A snapshot of the job's counters, the tracker's and the commit points."""
        with self._lock:
            return {
                **asdict(self.stats),
                "tracker": self.tracker.stats.as_dict(),
                "pending_roots": self.tracker.pending_roots(),
                "commit_points": {f"{t}[{p}]": o for (t, p), o in self.tracker.commit_points().items()},
                "recovered": self.recovered,
                "skipped": self.skipped,
                "dead_lettered": self.dead_lettered,
                "lost_to_retention": self.lost_to_retention,
                "commits": self.commits,
                "metadata_truncated": self.metadata_truncated,
                "throttled": self.throttled,
                "early_outcomes": len(self._early),
            }


def _stream_inputs(fresh: DataFrame, salt: int, *, edges: bool = True) -> DataFrame:
    """The transform's input of a stream batch registered from its offset ranges: its source
    columns, attempt 1 and each record's anchors, in one projection. ``edges=False``: each edge 0
    (a single query's INIT holds its children's edges alone: an input's own edge is never read)."""
    root = id_sql(salt, ROOT_TAG, attempt="1")
    edge = id_sql(salt, EDGE_TAG, attempt="1") if edges else "0L"
    anchors = f"array(named_struct('root', {root}, 'edge', {edge})) AS anchors"
    return fresh.selectExpr(*[f"`{c}`" for c in SOURCE_COLUMNS], "1 AS attempt", anchors)
