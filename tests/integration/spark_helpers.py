"""Shared pieces of the Spark integration tests: a test topology's topics, the standard SparkSpout
over them, an acker and downstream bolts on threads, and readers that turn output, outcome and
dead-letter topics into plain data to assert on."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from reliable_kafka import Loop, Tracking, codec
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt import BasicBolt, Bolt, BoltCollector, Tuple
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.testing.records import read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from reliable_kafka.spark import SparkBolt, SparkSpout


def new_topology(prefix: str, bootstrap: str, *, partitions: int = 2) -> tuple[str, str, str]:
    """A unique topology name and its created ``<topology>.src`` and ``<topology>.out`` topics."""
    topology = unique_name(prefix)
    source, output = f"{topology}.src", f"{topology}.out"
    create_topics(bootstrap, {source: partitions, output: partitions})
    return topology, source, output


def source_tagged_value() -> Column:
    """``value|partition|offset|attempt`` as a string column: every output traces back to its
    record and attempt (read back by ``source_of``)."""
    from pyspark.sql import functions as F  # only the Spark tests load pyspark

    return F.concat_ws("|", *(F.col(name).cast("string") for name in ("value", "partition", "offset", "attempt")))


def tag_with_source(df: DataFrame) -> DataFrame:
    """The tests' transform: each record's key, its ``source_tagged_value`` and its anchors."""
    return df.select("key", source_tagged_value().alias("value"), "anchors")


@dataclass(frozen=True)
class SparkTopology:
    """A scenario's topology (``new_topology``'s topics) and checkpoint: ``spout()`` makes its SparkSpouts."""

    spark: SparkSession
    bootstrap: str
    topology: str
    source: str
    output: str
    checkpoint: Path

    @property
    def group(self) -> str:
        """The SparkSpouts' consumer group, where their commits go."""
        return f"{self.topology}.job"

    def spout(self, *, spout_class=None, **options) -> SparkSpout:
        """``topology_spout`` over this topology: each call a new spout on the same checkpoint (a restart)."""
        return topology_spout(
            self.spark,
            self.bootstrap,
            self.topology,
            self.source,
            self.output,
            self.checkpoint,
            spout_class=spout_class,
            **options,
        )


def spark_topology(spark, bootstrap: str, prefix: str, tmp_path: Path, *, partitions: int = 2) -> SparkTopology:
    """A new topology's topics (``new_topology``), checkpoint at ``tmp_path/ckpt``."""
    topology, source, output = new_topology(prefix, bootstrap, partitions=partitions)
    return SparkTopology(spark, bootstrap, topology, source, output, tmp_path / "ckpt")


def topology_spout(
    spark, bootstrap: str, topology: str, source: str, output: str, checkpoint, *, spout_class=None, **options
) -> SparkSpout:
    """The tests' SparkSpout: ``source`` to ``output`` in group ``<topology>.job``, checkpoint at
    ``checkpoint``; ``options`` (the transform, timeouts, ...) are the scenario's own."""
    if spout_class is None:
        from reliable_kafka.spark import SparkSpout as spout_class
    return spout_class(
        spark,
        topology=topology,
        connection=bootstrap,
        source_topics=source,
        group_id=f"{topology}.job",
        checkpoint_dir=str(checkpoint),
        output_topic=output,
        **options,
    )


def topology_bolt(
    spark,
    bootstrap: str,
    topology: str,
    *,
    source: str,
    output: str,
    group_id: str,
    checkpoint,
    transform,
    **options,
) -> SparkBolt:
    """The tests' SparkBolt: ``transform`` from ``source`` to ``output`` in group ``group_id``;
    ``options`` (``available_now``, ...) are the scenario's own."""
    from reliable_kafka.spark import SparkBolt

    return SparkBolt(
        spark,
        topology=topology,
        connection=bootstrap,
        source_topics=source,
        group_id=group_id,
        checkpoint_dir=str(checkpoint),
        transform=transform,
        output_topic=output,
        **options,
    )


@contextmanager
def started(job):
    """A Spark spout or bolt started, and stopped on exit whatever happened."""
    job.start()
    try:
        yield job
    finally:
        job.stop()


@contextmanager
def acker_running(bootstrap: str, topology: str, *, ackers: int = 2, timeout_ms: int = 10_000):
    """An acker worker on a thread (creates the topology's topics), stopped on exit."""
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=ackers))
    stop = threading.Event()
    worker = AckerWorker(
        topology=topology,
        connection=bootstrap,
        tracking=Tracking(ackers=ackers, message_timeout_ms=timeout_ms),
        loop=Loop(commit_interval_ms=200),
    )
    thread = threading.Thread(target=worker.run, args=(stop,), name="acker", daemon=True)
    thread.start()
    assert worker.ready.wait(60), "acker worker did not start consuming within 60 s"
    try:
        yield worker
    finally:
        stop.set()
        thread.join(60)


@contextmanager
def bolt_running(bolt: Bolt):
    """A Python bolt on a thread, stopped on exit."""
    stop = threading.Event()
    thread = threading.Thread(target=bolt.run, args=(stop,), name=bolt.name, daemon=True)
    thread.start()
    try:
        yield bolt
    finally:
        stop.set()
        thread.join(60)


def driver_args(
    bootstrap: str, topology: str, source: str, output: str, group: str, checkpoint, **options: object
) -> list[str]:
    """Command line of spark_driver_script.py; ``options`` become flags:
    ``max_offsets_per_trigger=300`` is ``--max-offsets-per-trigger 300``."""
    args = ["--bootstrap", bootstrap, "--topology", topology, "--source", source, "--output", output]
    args += ["--group", group, "--checkpoint", str(checkpoint)]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def source_of(value: bytes) -> tuple[int, int, int, str]:
    """(partition, offset, attempt, payload) from an output value written as
    ``payload|partition|offset|attempt`` by the tests' transforms."""
    payload, partition, offset, attempt = value.decode().rsplit("|", 3)
    return int(partition), int(offset), int(attempt), payload


@dataclass
class DownstreamLog:
    """What a downstream bolt saw: per source (partition, offset), attempts handled successfully."""

    ok: dict = field(default_factory=lambda: defaultdict(set))
    failed: dict = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot_ok(self) -> set[tuple[int, int]]:
        with self.lock:
            return set(self.ok)


def acking_bolt(
    bootstrap: str, topology: str, topic: str, log: DownstreamLog, *, fail_first=None, delay_s: float = 0.0
) -> BasicBolt:
    """A basic bolt over the outputs: records what it handled; ``fail_first(partition, offset)``
    True fails the first attempt of that source record (the tree FAILs, the spout redelivers);
    ``delay_s`` slows it down per tuple (a downstream that lags behind Spark)."""

    def handle(tuple_, collector) -> None:
        if delay_s:
            time.sleep(delay_s)
        partition, offset, attempt, _ = source_of(tuple_.value)
        if fail_first is not None and attempt == 1 and fail_first(partition, offset):
            with log.lock:
                log.failed[(partition, offset)] += 1
            raise RuntimeError("downstream fails this tuple on purpose")
        with log.lock:
            log.ok[(partition, offset)].add(attempt)

    return BasicBolt(
        topology=topology, connection=bootstrap, source_topics=topic, group_id=f"{topic}.downstream", handler=handle
    )


@contextmanager
def acking_downstream(bootstrap: str, topology: str, output: str, **bolt_options):
    """An ``acking_bolt`` over ``output`` on a thread; yields its DownstreamLog."""
    log = DownstreamLog()
    with bolt_running(acking_bolt(bootstrap, topology, output, log, **bolt_options)):
        yield log


@contextmanager
def acked_downstream(
    bootstrap: str, topology: str, output: str, *, ackers: int = 2, timeout_ms: int = 10_000, **bolt_options
):
    """An acker and an ``acking_bolt`` over ``output`` on threads; yields the bolt's DownstreamLog."""
    with (
        acker_running(bootstrap, topology, ackers=ackers, timeout_ms=timeout_ms),
        acking_downstream(bootstrap, topology, output, **bolt_options) as log,
    ):
        yield log


def downstream_bolt(
    bootstrap: str, topology: str, output: str, handler: Callable[[Tuple, BoltCollector], None]
) -> Bolt:
    """A plain Bolt over ``output`` whose ``handler`` decides what to ack (a withholding downstream)."""
    return Bolt(
        topology=topology, connection=bootstrap, source_topics=output, group_id=f"{output}.downstream", handler=handler
    )


def outcomes(bootstrap: str, topology: str) -> dict[int, list[OutcomeKind]]:
    """root -> outcomes the ackers published, in order."""
    decided: dict[int, list[OutcomeKind]] = defaultdict(list)
    for message in read_topic(bootstrap, TopologyTopics(topology).outcomes):
        batch = codec.decode_outcomes(message.value())
        for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
            decided[root].append(OutcomeKind(kind))
    return decided


def outputs_by_root(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int, int, str]]]:
    """root -> the outputs (partition, offset, attempt, payload) anchored to it."""
    by_root: dict[int, list] = defaultdict(list)
    for message in read_topic(bootstrap, topic):
        headers = dict(message.headers() or [])
        anchors = codec.decode_anchors(cast(bytes, headers[codec.ANCHORS_HEADER]))
        for root in anchors:
            by_root[root].append(source_of(cast(bytes, message.value())))
    return by_root


def wait_for(predicate, *, timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
