"""Spark word split, plain against tracked (issue 11, target 2: tracked >= 0.7x plain).

The same work both ways, on the same input, in one Spark JVM (local[2]), configurations
alternating: read a topic of 8-word sentences with Spark's Kafka source (AvailableNow, batches
of ``--batch`` records), split them into words, write the words to a topic with Spark's Kafka sink.

* plain: a Structured Streaming query doing only that;
* tracked: a ``SparkSpout`` doing it (roots and INIT, the ``rk-anchors`` header and the child
  edges' XOR in the JVM, the final acks), with an acker worker and a downstream Python bolt
  acking every word, each in its own process (spawned, so they compete for the same two cores).
  ``--bolt after`` starts the bolt only once the Spark job has written everything: the plain job
  has no downstream consumer, and on two cores a Python bolt acking 8 words a sentence takes
  most of a core from Spark while it runs (the acker runs throughout either way).
  ``--tracked jar,sql`` runs the tracked job both ways in turn: with reliable-kafka's Java
  functions (``reliable_kafka.spark.jvm_functions``) and on the Spark SQL path they replace.

Figures per run: sentences/s of the Spark job, CPU seconds per 1,000 sentences of the Python
driver and of the Spark JVM (which runs the tasks in local mode) over the same span, and for
tracked the time until every tree completed and the group commit reached the end (bound by the
Python bolt acking 8 words a sentence). Each query reads ``--warmup-batches N`` batches (default 4)
beyond ``--sentences``, and two spans of it are reported side by side (``BatchMarks``, at the end of
each batch in Spark's commit log): cold, the batches of the first ``--sentences`` from the query's
start, and steady, as many sentences after the first N batches (the JIT warmer: a streaming job runs
for days); ``--warmup-batches 0`` gives cold only. The ratios are tracked / plain of the medians
(sentences/s) and plain / tracked of the driver + JVM CPU per sentence. Prints figures, asserts nothing.

Usage: ``./rk bench spark_pipeline [--sentences N] [--rounds R] [--batch B] [--bootstrap-servers HOST:PORT]
[--bolt during|after] [--tracked jar,sql] [--warmup-batches N] [--per-batch] [--profile] [--threads]
[--output-path-only ROWS]``
(without ``--bootstrap-servers`` an embedded broker is started and stopped). ``--profile`` runs cProfile around the
tracked job's batch function in the driver and prints where its wall time went (each Spark action there is
synchronous, so its cumulative time is that action's), and CPU seconds of Spark's Python workers (children of the JVM,
e.g. a Python output writer).
``--output-path-only ROWS`` measures the JVM CPU per row of the output path alone (see ``output_path_only``).
``--output-plan-time BATCHES`` times the driver building a batch's output plan (see ``output_plan_time``).
``--threads`` adds the Spark JVM's CPU per thread group (from ``/proc``: compiler threads, executor tasks, the stream
execution thread that also serves the driver's py4j calls in ``foreachBatch``, the producer's network thread, GC),
tracked minus plain, and per run the classes Spark's codegen compiled and the JIT's compile time.
``--per-batch`` prints each batch's figures: JVM CPU, HotSpot's JIT compilations, compile time and classes loaded
(``jvm_perf``: its ``hsperfdata`` file, no call into the JVM) and the classes Spark's codegen compiled.
``RK_BENCH_JAVA_OPTIONS`` passes JVM options (e.g. ``-XX:StartFlightRecording=settings=profile``);
``RK_BENCH_JFR_DUMP=FILE`` dumps the running recordings there before the session stops.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import getpass
import io
import multiprocessing
import os
import pstats
import re
import statistics
import tempfile
import threading
import time

from reliable_kafka import Tracking
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

WORDS = "the quick brown fox jumps over the lazy dog and a cat sat on one mat".split()
WORDS_PER_SENTENCE = 8


def split_words(df):
    from pyspark.sql import functions as F

    words = F.explode(F.split(F.col("value").cast("string"), " "))
    columns = [words.alias("value")] + (["anchors"] if "anchors" in df.columns else [])
    return df.select(*columns)


def _acker(bootstrap: str, topology: str, ready, stop) -> None:
    from reliable_kafka.acker.worker import AckerWorker

    worker = AckerWorker(
        topology=topology, connection=bootstrap, tracking=Tracking(ackers=2, message_timeout_ms=600_000)
    )
    ready.set()
    worker.run(stop)


def _bolt(bootstrap: str, topology: str, topic: str, stop, downstream: str = "batch") -> None:
    """The tracked job's downstream stage: a basic bolt acking every word, called per consumed batch
    (``batch_handler``, as plain's consumer reads a batch at a time) or per tuple (``handler``)."""
    from reliable_kafka.bolt import BasicBolt

    def count(*_: object) -> None:
        return None

    where = {"topology": topology, "connection": bootstrap, "source_topics": topic, "group_id": f"{topic}.count"}
    if downstream == "batch":
        BasicBolt(**where, batch_handler=count).run(stop)  # type: ignore[arg-type]
    else:
        BasicBolt(**where, handler=count).run(stop)  # type: ignore[arg-type]


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def _jvm_cpu(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workers_cpu(jvm_pid: int) -> float:
    """CPU seconds of the JVM's descendant processes (Spark's Python workers) alive now."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = _stat(int(entry))
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in cpu:
        parent = parents.get(pid)
        while parent and parent != jvm_pid:
            parent = parents.get(parent)
        if parent == jvm_pid:
            total += cpu[pid]
    return total


PERF_COUNTERS = {
    "sun.ci.totalCompiles": "compiles",  # methods the JIT compiled (C1 and C2, OSR included)
    "sun.ci.standardTime": "jit_ticks",  # and its time, in sun.os.hrt.frequency ticks
    "sun.ci.osrTime": "jit_osr_ticks",
    "java.cls.loadedClasses": "classes",  # classes loaded, hidden ones (lambda forms) included
    "sun.os.hrt.frequency": "hz",
    "sun.rt.createVmBeginTime": "vm_start_ms",  # epoch ms: a mark's JVM uptime, to match JIT logs
}


def jvm_perf(pid: int) -> dict[str, int]:
    """HotSpot's own counters of the JVM ``pid`` (:data:`PERF_COUNTERS`), read from its
    ``hsperfdata`` file: no call into the JVM, so reading them costs it nothing ({} without it)."""
    try:
        with open(f"/tmp/hsperfdata_{getpass.getuser()}/{pid}", "rb") as file:  # HotSpot's place on Linux
            return parse_perf(file.read())
    except OSError:
        return {}


def parse_perf(data: bytes) -> dict[str, int]:
    """:data:`PERF_COUNTERS` from an ``hsperfdata`` image: a 32-byte prologue (magic, byte order,
    versions, ..., the first entry's offset and the number of entries at 24), then entries (length,
    name offset, vector length, type, flags, units, variability, data offset; the name NUL-ended).
    Scalar longs (type ``J``) are read; other entries are skipped."""
    import struct

    order = "<" if data[4] == 1 else ">"
    offset, entries = struct.unpack_from(order + "II", data, 24)
    found = {}
    for _ in range(entries):
        length, name_at, vector, kind, _flags, _units, _variability, value_at = struct.unpack_from(
            order + "IIIBBBBI", data, offset
        )
        name = data[offset + name_at : data.index(b"\0", offset + name_at)].decode()
        if name in PERF_COUNTERS and kind == ord("J") and vector == 0:
            found[PERF_COUNTERS[name]] = struct.unpack_from(order + "q", data, offset + value_at)[0]
        offset += length
    return found


class _Sampler:
    """A thread that calls ``tick()`` every ``interval`` seconds while a ``with`` block runs and once
    more at its end; ``begin()`` runs before the thread starts, ``end()`` after the last tick."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()

    def begin(self) -> None:
        pass

    def tick(self) -> None:
        raise NotImplementedError

    def end(self) -> None:
        pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def __enter__(self):
        self.begin()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.tick()
        self.end()


class BatchMarks(_Sampler):
    """Figures at each micro-batch's end, to split a run into spans of batches: a thread polls the
    query's checkpoint (``commits/N`` appears once batch N is done) every ``interval`` seconds and
    samples wall time, this process's and the JVM's CPU, HotSpot's counters (:func:`jvm_perf`),
    with ``detail`` also Spark's codegen count (one py4j call) and the JVM's threads (``threads``).
    A mark is taken up to ``interval`` after the batch ended (the next one has begun by then: a few
    ms of CPU fall on the wrong side of a boundary)."""

    def __init__(self, checkpoint: str, jvm_pid: int, *, detail: bool, threads: ThreadCpu | None) -> None:
        self.checkpoint, self.jvm_pid, self.detail, self.threads = checkpoint, jvm_pid, detail, threads
        self.marks: dict[int, dict] = {}  # batch id -> figures at its end; -1: the start
        self.ends: list[int] = []  # per batch, the end offset summed over the partitions (on exit)
        super().__init__(0.01)

    def _mark(self) -> dict:
        mark: dict = {"wall": time.monotonic(), "py": time.process_time(), "jvm": _jvm_cpu(self.jvm_pid)}
        mark["epoch"] = time.time()
        mark.update(jvm_perf(self.jvm_pid))
        if self.detail:
            mark["codegen"] = _jvm_counters()[0]
        if self.threads is not None:  # with the last figure of threads that ended since the start
            mark["threads"] = {**self.threads.last, **self.threads._sample()}
        return mark

    def tick(self) -> None:
        try:
            done = {int(name) for name in os.listdir(os.path.join(self.checkpoint, "commits")) if name.isdigit()}
        except OSError:  # not made yet
            return
        for batch in sorted(done - set(self.marks)):
            self.marks[batch] = self._mark()

    def begin(self) -> None:
        self.marks[-1] = self._mark()

    def end(self) -> None:
        self.ends = self._read_ends()  # while the checkpoint is there

    def _read_ends(self) -> list[int]:
        """Each batch's end offset (summed over the source partitions) from the query's offset log."""
        import json

        ends = []
        for batch in sorted(b for b in self.marks if b >= 0):
            with open(os.path.join(self.checkpoint, "offsets", str(batch))) as file:
                offsets = json.loads(file.read().splitlines()[2])
            ends.append(sum(int(o) for partitions in offsets.values() for o in partitions.values()))
        return ends

    def span(self, first: int, last: int, ends: list[int]) -> dict:
        """Figures of batches ``first`` to ``last``: from the end of the batch before (or the start)
        to the end of ``last``; ``sentences`` from the offset log."""
        a, b = self.marks[first - 1], self.marks[last]
        figures = {key: b[key] - a[key] for key in ("wall", "py", "jvm") if key in a and key in b}
        figures["sentences"] = ends[last] - (ends[first - 1] if first else 0)
        figures["batches"] = last - first + 1
        if "compiles" in a and "compiles" in b:
            figures["compiles"] = b["compiles"] - a["compiles"]
            ticks = sum(b.get(k, 0) - a.get(k, 0) for k in ("jit_ticks", "jit_osr_ticks"))
            figures["jit_s"] = ticks / (b.get("hz") or 1e9)
            figures["classes"] = b.get("classes", 0) - a.get("classes", 0)
            figures["uptime"] = (b["epoch"] - a["epoch"], b["epoch"] - b.get("vm_start_ms", 0) / 1000)
        if "codegen" in a:
            figures["codegen"] = b["codegen"] - a["codegen"]
        if "threads" in a:
            figures["threads"] = (a["threads"], b["threads"])
        return figures

    def cold_and_steady(self, sentences: int, warmup_batches: int) -> tuple[dict, dict | None]:
        """(cold: the batches from the start to the one ending nearest ``sentences``; steady: as
        many sentences after the first ``warmup_batches`` batches, None without any). Spark's rate
        limit splits a batch between the partitions rounding down, so batches fall a few records
        short and a last batch of a few records follows: neither span counts it."""
        ends = self.ends

        def nearest(target: int) -> int:
            return min(range(len(ends)), key=lambda i: abs(ends[i] - target))

        cold = self.span(0, nearest(sentences), ends)
        if not warmup_batches:
            return cold, None
        if warmup_batches >= len(ends):
            raise SystemExit(f"--warmup-batches {warmup_batches}: the run had only {len(ends)} batches")
        last = max(warmup_batches, nearest(ends[warmup_batches - 1] + sentences))
        return cold, self.span(warmup_batches, last, ends)

    def per_batch(self) -> list[dict]:
        return [self.span(i, i, self.ends) for i in range(len(self.ends))]


PROFILE: cProfile.Profile | None = None
THREADS = False  # --threads: the JVM's CPU per thread group (ThreadCpu) for each run
DETAIL = False  # --per-batch: each batch's figures, Spark's codegen count included
SPARK = None  # the bench's session, for --threads' JVM counters
DOWNSTREAM = "batch"  # --downstream: the tracked job's bolt acks per consumed batch or per tuple


def _jvm_counters() -> tuple[int, float]:
    """(classes Spark's codegen compiled, ms the JIT compiled) since the JVM started."""
    from reliable_kafka.spark.writer import jvm_class

    codegen = jvm_class(SPARK, "org.apache.spark.metrics.source.CodegenMetrics").METRIC_COMPILATION_TIME().getCount()  # type: ignore[arg-type]  # main sets SPARK first
    jit = jvm_class(SPARK, "java.lang.management.ManagementFactory").getCompilationMXBean().getTotalCompilationTime()  # type: ignore[arg-type]
    return codegen, jit


def _thread_group(name: str) -> str:
    """A JVM thread's kind from its native name (15 characters of it: ``/proc/PID/task/TID/comm``):
    numbers dropped, so a pool's threads add up (py4j's connection threads are ``Thread-N``)."""
    return re.sub(r"[-#_ ]*\d+", "", name).strip(" -") or name


class ThreadCpu(_Sampler):
    """CPU seconds per JVM thread group over a span, sampled every ``interval`` seconds from
    ``/proc`` so that threads that end inside the span (a pool's idle ones) keep their last figure."""

    def __init__(self, jvm_pid: int, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.jvm_pid = jvm_pid
        self.start: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}

    def _sample(self) -> dict[int, tuple[str, float]]:
        found = {}
        tick = os.sysconf("SC_CLK_TCK")
        for tid in os.listdir(f"/proc/{self.jvm_pid}/task"):
            try:
                with open(f"/proc/{self.jvm_pid}/task/{tid}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            name, rest = text.split("(", 1)[1].rsplit(")", 1)
            fields = rest.split()
            found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
        return found

    def begin(self) -> None:
        self.start = {tid: cpu for tid, (_, cpu) in self._sample().items()}

    def tick(self) -> None:
        self.last.update(self._sample())

    def groups(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for tid, (name, cpu) in self.last.items():
            group = _thread_group(name)
            totals[group] = totals.get(group, 0.0) + cpu - self.start.get(tid, 0.0)
        return totals


def _profiled(function):
    def run(*args, **kwargs):
        PROFILE.enable()
        try:
            return function(*args, **kwargs)
        finally:
            PROFILE.disable()

    return run


class Meter:
    """Wall and CPU seconds (this Python process, the Spark JVM) over a span."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid

    def __enter__(self):
        self.threads = ThreadCpu(self.jvm_pid).__enter__() if THREADS else None
        self.counters = _jvm_counters() if THREADS else (0, 0.0)
        self.wall, self.py, self.jvm = time.monotonic(), time.process_time(), _jvm_cpu(self.jvm_pid)
        self.workers = _workers_cpu(self.jvm_pid)
        return self

    def __exit__(self, *exc) -> None:
        if self.threads is not None:
            self.threads.__exit__(*exc)
            self.counters = tuple(b - a for a, b in zip(self.counters, _jvm_counters()))
        self.wall = time.monotonic() - self.wall
        self.py = time.process_time() - self.py
        self.jvm = _jvm_cpu(self.jvm_pid) - self.jvm
        self.workers = _workers_cpu(self.jvm_pid) - self.workers


def _plain_consumer(bootstrap: str, topic: str, expected: int, ready, done, cpu) -> None:
    """Plain's downstream stage: reads every output (what a user's next job does), no tracking."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.count", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    ready.set()
    begin, seen = time.process_time(), 0
    while seen < expected:
        seen += sum(1 for message in consumer.consume(1000, 0.5) if message.error() is None)
    cpu.value = time.process_time() - begin
    done.set()
    consumer.close()


def _process_cpu(pid: int | None) -> float:
    """CPU seconds of process ``pid`` so far (0 once it is gone, or before it started)."""
    if pid is None:
        return 0.0
    try:
        return _jvm_cpu(pid)
    except OSError:
        return 0.0


def run_plain(spark, bootstrap: str, source: str, batch: int, jvm_pid: int, total: int) -> dict:
    output = unique_name("bench-plain-words")
    create_topics(bootstrap, {output: 2})
    context = multiprocessing.get_context("spawn")
    ready, done, consumer_cpu = context.Event(), context.Event(), context.Value("d", 0.0)
    consumer = context.Process(
        target=_plain_consumer,
        args=(bootstrap, output, total * WORDS_PER_SENTENCE, ready, done, consumer_cpu),
        daemon=True,
    )
    consumer.start()
    ready.wait(120)
    started, py, jvm = time.monotonic(), time.process_time(), _jvm_cpu(jvm_pid)
    with (
        tempfile.TemporaryDirectory(prefix="rk-bench-plain-") as checkpoint,
        Meter(jvm_pid) as meter,
        BatchMarks(checkpoint, jvm_pid, detail=DETAIL, threads=meter.threads) as marks,
    ):
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(batch))
            .load()
        )
        query = (
            split_words(reader)
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", output)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    done.wait(900)
    parts = {"driver": time.process_time() - py, "JVM": _jvm_cpu(jvm_pid) - jvm, "consumer": consumer_cpu.value}
    end_to_end = {"wall": time.monotonic() - started, "cpu": sum(parts.values()), "parts": parts}
    consumer.join(30)
    figures = {"wall": meter.wall, "py": meter.py, "jvm": meter.jvm, "workers": meter.workers}
    return {
        **figures,
        "threads": meter.threads,
        "counters": meter.counters,
        "marks": marks,
        "end_to_end": end_to_end if done.is_set() else None,
    }


def run_tracked(
    spark, bootstrap: str, source: str, batch: int, sentences: int, jvm_pid: int, bolt: str, path: str
) -> dict:
    from reliable_kafka.spark import SparkOptions, SparkSpout
    from reliable_kafka.spark.jvm_functions import MODE_ENV

    os.environ[MODE_ENV] = {"jar": "on", "sql": "off", "single": "on"}[path]  # read by the writer at each batch
    from reliable_kafka.kafka.admin import admin_client, ensure_topics
    from reliable_kafka.topology import TopologyTopics

    topology = unique_name("bench-tracked")
    output = f"{topology}.words"
    create_topics(bootstrap, {output: 2})
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=2))
    context = multiprocessing.get_context("spawn")
    stop, ready = context.Event(), context.Event()
    helpers = [context.Process(target=_acker, args=(bootstrap, topology, ready, stop), daemon=True)]
    downstream = context.Process(target=_bolt, args=(bootstrap, topology, output, stop, DOWNSTREAM), daemon=True)
    if bolt == "during":
        helpers.append(downstream)
    for process in helpers:
        process.start()
    ready.wait(120)
    try:
        with tempfile.TemporaryDirectory(prefix="rk-bench-tracked-") as checkpoint:
            job = SparkSpout(
                spark,
                topology=topology,
                connection=bootstrap,
                source_topics=source,
                group_id=f"{topology}.spark",
                checkpoint_dir=checkpoint,
                transform=split_words,
                output_topic=output,
                options=SparkOptions(available_now=True, max_offsets_per_trigger=batch, single_query=path == "single"),
                tracking=Tracking(max_pending=sentences + batch, message_timeout_ms=600_000),
            )
            if PROFILE is not None:
                job._on_stream_batch = _profiled(job._on_stream_batch)  # type: ignore[method-assign]
            helper_cpu = [_process_cpu(process.pid) for process in helpers]
            started, py, jvm = time.monotonic(), time.process_time(), _jvm_cpu(jvm_pid)
            with (
                Meter(jvm_pid) as meter,
                BatchMarks(checkpoint, jvm_pid, detail=DETAIL, threads=meter.threads) as marks,
            ):
                job.start()
                job.query.awaitTermination()
            if bolt == "after":
                helpers.append(downstream)
                downstream.start()
            done = job.run_until(lambda _: job.caught_up(), timeout=900, poll_interval=0.2)
            completed = time.monotonic() - started
            parts = {  # the helpers: the acker and the downstream bolt (with --bolt during)
                "driver": time.process_time() - py,
                "JVM": _jvm_cpu(jvm_pid) - jvm,
                **{
                    name: _process_cpu(process.pid) - before
                    for name, process, before in zip(("acker", "bolt"), helpers, helper_cpu, strict=False)
                },
            }
            end_to_end = {"wall": completed, "cpu": sum(parts.values()), "parts": parts}
            progress = job.progress()
            job.stop()
    finally:
        stop.set()
        for process in helpers:
            process.join(30)
            if process.is_alive():
                process.terminate()
    assert progress["inputs"] == sentences, progress
    return {
        "marks": marks,
        "wall": meter.wall,
        "py": meter.py,
        "jvm": meter.jvm,
        "workers": meter.workers,
        "threads": meter.threads,
        "counters": meter.counters,
        "completed": completed if done else None,
        "end_to_end": end_to_end if done and bolt == "during" else None,
        "trees": progress["tracker"]["completed"],
        "plans": (progress.get("plans_reused", 0), progress["batches"]),
    }


def output_path_only(rows: int, rounds: int) -> int:
    """``--output-path-only N``: JVM CPU per output row of the output path alone, no Kafka: N
    one-pair rows (an 8-word split, as above) written to Spark's ``noop`` sink plain, through the
    SQL path and through the Java functions, each with and without its observation."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from reliable_kafka.spark import spark_session
    from reliable_kafka.spark.jvm_functions import MODE_ENV, use_jvm_functions
    from reliable_kafka.spark.writer import (
        observe_children,
        observe_headers_jvm,
        observed_metrics,
        sink_rows,
        with_children,
        with_headers_jvm,
    )

    os.environ[MODE_ENV] = "on"
    spark = spark_session("rk-bench-spark-output-path", master="local[2]")
    use_jvm_functions(spark)  # registers them (write_in_jvm does it at each batch)
    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()  # type: ignore[union-attr]  # a live JVM
    sentences = spark.range(0, rows // WORDS_PER_SENTENCE, 1, 2).selectExpr(
        "CAST(id AS STRING) AS s", "array(named_struct('root', xxhash64(id), 'edge', id * 7 + 1)) AS anchors"
    )
    outputs = sentences.selectExpr("explode(split(concat(s, ' a b c d e f g'), ' ')) AS value", "anchors")

    def write(df, observation=None) -> None:
        df.write.format("noop").mode("overwrite").save()
        if observation is not None:
            observed_metrics(observation, spark, timeout=120, what="bench")

    def counted(df):
        observation = Observation(f"bench-{time.monotonic_ns()}")
        return df.observe(observation, F.expr("count(1)").alias("rows")), observation

    variants = {
        "plain": lambda: write(outputs.select("value")),
        "plain+count": lambda: write(*counted(outputs.select("value"))),
        "sql header": lambda: write(sink_rows(with_children(outputs, 5))),
        "sql": lambda: write(*observe_children(sink_rows(with_children(outputs, 5)))),  # as write_in_jvm
        "jar header": lambda: write(sink_rows(with_headers_jvm(outputs, 5))),
        "jar": lambda: write(*observe_headers_jvm(sink_rows(with_headers_jvm(outputs, 5)))),
    }
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for round_ in range(rounds + 1):
            for name, run in variants.items():
                before = _jvm_cpu(jvm_pid)
                run()
                if round_:  # after a warm-up
                    cpu[name].append(_jvm_cpu(jvm_pid) - before)
    finally:
        spark.stop()
    print(f"{rows:,} one-pair output rows to the noop sink, local[2], {rounds} rounds; load {os.getloadavg()[0]:.1f}")
    for name, values in cpu.items():
        median = statistics.median(values)
        print(f"{name:12} JVM CPU {median:.2f} s, {1e6 * median / rows:.2f} us per row")
    return 0


def output_plan_time(batches: int, rows: int) -> int:
    """``--output-plan-time BATCHES``: the driver's wall time to build ``write_in_jvm``'s rows
    (Java functions; each DataFrame step is analysed over the whole plan), per batch of ``rows``
    sentences split as above, each batch with a new salt and written to the ``noop`` sink."""
    from reliable_kafka.spark import spark_session
    from reliable_kafka.spark.derive import EDGE_TAG, ROOT_TAG, id_sql
    from reliable_kafka.spark.jvm_functions import MODE_ENV, use_jvm_functions
    from reliable_kafka.spark.writer import observed_metrics, output_rows_jvm, v2_write_session

    os.environ[MODE_ENV] = "on"
    spark = spark_session("rk-bench-spark-output-plan", master="local[2]")
    session = v2_write_session(spark)
    source = session.range(0, rows, 1, 2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(NULL AS BINARY) AS key", "'t' AS topic", "0 AS partition", "id AS offset"
    )
    seconds = []
    try:
        for salt in range(1000, 1000 + batches + 2):  # two warm-ups
            root, edge = id_sql(salt, ROOT_TAG, attempt="1"), id_sql(salt, EDGE_TAG, attempt="1")
            anchors = f"array(named_struct('root', {root}, 'edge', {edge})) AS anchors"
            inputs = source.selectExpr("value", "key", anchors)
            outputs = split_words(inputs)
            started = time.perf_counter()
            use_jvm_functions(outputs.sparkSession)
            observed, observation = output_rows_jvm(outputs, salt)
            seconds.append(time.perf_counter() - started)
            observed.write.format("noop").mode("overwrite").save()
            observed_metrics(observation, session, timeout=120, what="bench")
    finally:
        spark.stop()
    seconds = seconds[2:]
    print(
        f"output plan of a batch ({rows:,} sentences), driver wall s over {batches} batches, load "
        f"{os.getloadavg()[0]:.1f}: median {statistics.median(seconds):.3f}, min {min(seconds):.3f}, "
        f"max {max(seconds):.3f}"
    )
    return 0


def _span_groups(span: dict) -> dict[str, float]:
    """CPU seconds per JVM thread group between a span's two thread snapshots (:class:`BatchMarks`)."""
    before, after = span["threads"]
    totals: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        group = _thread_group(name)
        totals[group] = totals.get(group, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    return totals


def _print_threads(spans: dict[str, list[dict]], title: str) -> None:
    """The JVM's CPU per thread group, ms per 1,000 sentences, medians over the rounds, the groups
    above 1% of a run's JVM CPU, with tracked minus plain."""
    medians: dict[str, dict[str, float]] = {}
    for name, runs in spans.items():
        per_run = [(_span_groups(run), run["sentences"]) for run in runs]
        groups = {group for figures, _ in per_run for group in figures}
        medians[name] = {
            group: statistics.median(1e6 * figures.get(group, 0.0) / n for figures, n in per_run) for group in groups
        }
    names = list(spans)
    shown = sorted(
        {g for name in names for g, ms in medians[name].items() if ms > 0.01 * sum(medians[name].values())},
        key=lambda g: -max(medians[name].get(g, 0.0) for name in names),
    )
    print(f"\nJVM CPU per thread group, {title}, ms per 1,000 sentences (medians): " + ", ".join(names))
    for group in shown + ["(all)"]:
        if group == "(all)":
            values = [sum(medians[name].values()) for name in names]
        else:
            values = [medians[name].get(group, 0.0) for name in names]
        extra = "".join(f"  {name} - plain {v - values[0]:+.1f}" for name, v in zip(names[1:], values[1:]))
        print(f"  {group:18} " + "  ".join(f"{v:6.1f}" for v in values) + extra)


def _jit(span: dict) -> str:
    """The JIT's work in a span, per 1,000 sentences (HotSpot's counters; empty without them)."""
    if "compiles" not in span:
        return ""
    k = span["sentences"] / 1000
    text = f"  JIT {span['compiles'] / k:5.1f} compiles {span['jit_s'] / k:.3f} s/1k, {span['classes']} classes loaded"
    return text + (f", codegen {span['codegen']}" if "codegen" in span else "")


def _span_line(label: str, span: dict, uptime: bool = False) -> str:
    k = span["sentences"] / 1000
    at = f", JVM uptime {span['uptime'][1] - span['uptime'][0]:.2f} to {span['uptime'][1]:.2f} s" if uptime else ""
    return (
        f"  {label:6} {span['batches']} batches {span['sentences']:7} sentences "
        f"{span['sentences'] / span['wall']:9,.0f} sentences/s  driver CPU {span['py'] / k:.3f} s/1k  "
        f"JVM CPU {span['jvm'] / k:.3f} s/1k" + _jit(span) + at
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=25_000, help="maxOffsetsPerTrigger")
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",
        help="Kafka bootstrap servers (default: start an embedded broker)",
    )
    parser.add_argument(
        "--bolt",
        choices=("during", "after"),
        default="during",
        help="start the downstream Python bolt with the tracked job (default) or after it wrote everything",
    )
    parser.add_argument(
        "--tracked",
        default="jar",
        help="tracked variants to alternate, comma-separated: jar (foreachBatch with the Java functions), sql "
        "(foreachBatch, Spark SQL path), single (one streaming query: SparkOptions(single_query=True))",
    )
    parser.add_argument(
        "--downstream",
        choices=("batch", "tuple"),
        default="batch",
        help="the tracked job's downstream bolt acks per consumed batch (batch_handler, default; plain's consumer "
        "also reads a batch at a time) or calls its handler per tuple",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the tracked job's batches")
    parser.add_argument(
        "--threads", action="store_true", help="print the Spark JVM's CPU per thread group (medians over the rounds)"
    )
    parser.add_argument(
        "--output-path-only",
        type=int,
        metavar="ROWS",
        help="measure only the output path's JVM CPU per row (noop sink, no Kafka) over ROWS rows",
    )
    parser.add_argument(
        "--output-plan-time",
        type=int,
        metavar="BATCHES",
        help="measure only the driver's time to build a batch's output plan (batches of --batch sentences)",
    )
    parser.add_argument(
        "--warmup-batches",
        type=int,
        default=4,
        metavar="N",
        help="each run reads N batches more; besides the cold figures (the first --sentences from the query's start) "
        "print the steady ones (the batches after the first N, JIT warm: a streaming job runs for days); 0: cold only",
    )
    parser.add_argument(
        "--per-batch",
        action="store_true",
        help="print each batch's JVM CPU, JIT compilations, classes loaded and Spark codegen compilations",
    )
    args = parser.parse_args(argv)
    if args.output_plan_time:
        return output_plan_time(args.output_plan_time, args.batch)
    if args.output_path_only:
        return output_path_only(args.output_path_only, args.rounds)
    global PROFILE, THREADS, DETAIL, DOWNSTREAM
    THREADS, DETAIL, DOWNSTREAM = args.threads, args.per_batch, args.downstream
    if args.warmup_batches < 0:
        parser.error("--warmup-batches: 0 or more")
    if args.profile:
        PROFILE = cProfile.Profile()
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from reliable_kafka.broker import EmbeddedKafka

            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        from reliable_kafka.spark import spark_session

        source = unique_name("bench-sentences")
        create_topics(bootstrap, {source: 2})
        total = args.sentences + args.warmup_batches * args.batch  # what each run reads
        lines = [
            " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(WORDS_PER_SENTENCE)).encode() for i in range(total)
        ]
        produce_values(bootstrap, source, lines, timeout=300)
        global SPARK
        java_options = os.environ.get("RK_BENCH_JAVA_OPTIONS")  # e.g. a JFR recording of the run
        java_conf = {"spark.driver.extraJavaOptions": java_options} if java_options else None
        spark = SPARK = spark_session("rk-bench-spark-pipeline", master="local[2]", extra_conf=java_conf)
        jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()  # type: ignore[union-attr]  # a live JVM
        n = args.sentences
        print(
            f"{n} sentences of {WORDS_PER_SENTENCE} words, local[2], batches of {args.batch}, "
            f"{args.rounds} rounds alternating (after one warm-up of each), downstream bolt {args.bolt} the "
            f"tracked job; each run reads {total} sentences: cold = the batches of the first {n} from the query's "
            f"start, steady = the batches after the first {args.warmup_batches}; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        paths = [path.strip() for path in args.tracked.split(",") if path.strip()]
        if not paths or set(paths) - {"jar", "sql", "single"}:
            parser.error(f"--tracked: jar, sql and/or single, got {args.tracked!r}")
        names = ["plain", *(f"tracked-{path}" for path in paths)]
        results: dict[str, list[dict]] = {name: [] for name in names}
        try:
            for round_ in range(args.rounds + 1):
                for name in names:
                    load = os.getloadavg()[0]
                    if name == "plain":
                        figures = run_plain(spark, bootstrap, source, args.batch, jvm_pid, total)
                    else:
                        path = name.split("-", 1)[1]
                        figures = run_tracked(spark, bootstrap, source, args.batch, total, jvm_pid, args.bolt, path)
                    figures["cold"], figures["steady"] = figures["marks"].cold_and_steady(n, args.warmup_batches)
                    label = "warm-up" if round_ == 0 else f"round {round_}"
                    extra = f", load {load:.1f}"
                    if THREADS:
                        extra += f", codegen compiled {figures['counters'][0]} classes, JIT {figures['counters'][1]} ms"
                    if name != "plain":
                        extra += (
                            f", all {figures['trees']} trees completed and committed after {figures['completed']:.1f} s"
                            if figures["completed"]
                            else ", NOT caught up"
                        )
                        if "plans" in figures:  # main's progress has no plans_reused
                            extra += f", plans rebound {figures['plans'][0]} of {figures['plans'][1]} batches"
                    print(
                        f"{label:8} {name:11} {total / figures['wall']:9,.0f} sentences/s  "
                        f"driver CPU {1000 * figures['py'] / total:.3f} s/1k  JVM CPU "
                        f"{1000 * figures['jvm'] / total:.3f} s/1k  Python workers CPU "
                        f"{1000 * figures['workers'] / total:.3f} s/1k (the whole run){extra}",
                        flush=True,
                    )
                    for span in ("cold", "steady"):
                        if figures[span] is not None:
                            print(_span_line(span, figures[span]), flush=True)
                    if DETAIL:
                        for batch, figures_ in enumerate(figures["marks"].per_batch()):
                            print(_span_line(f"#{batch}", figures_, "uptime" in figures_), flush=True)
                    if round_:
                        results[name].append(figures)
        finally:
            if os.environ.get("RK_BENCH_JFR_DUMP"):  # the JVM ends without its dumponexit when py4j closes
                import subprocess

                subprocess.run(["jcmd", str(jvm_pid), "JFR.dump", f"filename={os.environ['RK_BENCH_JFR_DUMP']}"])
            spark.stop()
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    spans = ["cold", "steady"] if args.warmup_batches else ["cold"]
    for span in spans:
        figures_by = {name: [run[span] for run in runs] for name, runs in results.items()}
        rate = {name: statistics.median(f["sentences"] / f["wall"] for f in runs) for name, runs in figures_by.items()}
        print(
            f"{span}: median sentences/s "
            + ", ".join(f"{name} {rate[name]:,.0f}" for name in names)
            + "; "
            + ", ".join(f"ratio {name}/plain {rate[name] / rate['plain']:.2f}" for name in names[1:])
            + " (target >= 0.7)"
        )
        cpu_per = {
            name: statistics.median((f["py"] + f["jvm"]) / f["sentences"] for f in runs)
            for name, runs in figures_by.items()
        }
        print(
            f"  {span} CPU ratio (plain's driver + JVM CPU per sentence over theirs): "
            + ", ".join(f"{name} {cpu_per['plain'] / cpu_per[name]:.2f}" for name in names[1:])
        )
        for name, runs in figures_by.items():
            cpu = {key: statistics.median(1000 * f[key] / f["sentences"] for f in runs) for key in ("py", "jvm")}
            jit = (
                f", JIT {statistics.median(1000 * f['compiles'] / f['sentences'] for f in runs):.1f} compiles / 1k"
                if all("compiles" in f for f in runs)
                else ""
            )
            print(f"  {name:11} driver CPU {cpu['py']:.3f} s per 1,000 sentences, JVM CPU {cpu['jvm']:.3f}{jit}")
    if all(run.get("end_to_end") for runs in results.values() for run in runs):
        wall = {name: statistics.median(run["end_to_end"]["wall"] for run in runs) for name, runs in results.items()}
        cpu = {name: statistics.median(run["end_to_end"]["cpu"] for run in runs) for name, runs in results.items()}
        print(
            "end to end (from the query's start until the downstream stage handled every output; tracked: every "
            "tree completed and the group committed to the end), median wall s: "
            + ", ".join(f"{name} {wall[name]:.1f}" for name in names)
            + "; wall ratio plain/tracked "
            + ", ".join(f"{name} {wall['plain'] / wall[name]:.2f}" for name in names[1:])
            + "; CPU ratio (driver + JVM + downstream processes, plain/tracked) "
            + ", ".join(f"{name} {cpu['plain'] / cpu[name]:.2f}" for name in names[1:])
            + " (target >= 0.7)"
        )
        for name, runs in results.items():
            keys = runs[0]["end_to_end"]["parts"]
            print(
                f"  {name:11} end-to-end CPU s per 1,000 sentences: "
                + ", ".join(
                    f"{key} {statistics.median(1000 * run['end_to_end']['parts'][key] / total for run in runs):.3f}"
                    for key in keys
                )
            )
    for name, runs in results.items():
        print(
            f"{name:11} whole runs: Python workers CPU "
            f"{1000 * statistics.median(f['workers'] for f in runs) / total:.3f} s per 1,000 sentences"
        )
    if THREADS:
        for span in spans:
            _print_threads({name: [run[span] for run in runs] for name, runs in results.items()}, span)
    if PROFILE is not None:
        out = io.StringIO()
        pstats.Stats(PROFILE, stream=out).sort_stats("cumulative").print_stats(25)
        print("\ntracked batches in the driver, all runs (cumulative wall s):\n" + out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
