"""Spark's real-time mode, plain against tracked: latency at a steady input rate.

The same word split as ``bench_spark_pipeline`` (sentences of ``--words`` words; Spark's Kafka
source and sink, local[2]) runs as a query in real-time mode (``trigger(realTime=...)``, Spark
4.1+; batches of ``--batch-duration``, so none ends while it is measured), fed ``--rate`` sentences a
second by a producer thread for ``--warmup`` seconds and then ``--seconds`` more, which are measured:

* plain: the query alone; its latency is each output's Kafka timestamp (the sink's send) minus its
  sentence's (the source producer's send);
* tracked: a ``SparkSpout`` with ``SparkOptions(real_time=...)``, an acker worker and a downstream
  Python bolt acking every word (per consumed batch), each its own process on the same two cores.
  Its **completion latency** is each sentence's tree's COMPLETED outcome record's timestamp (the
  acker's send, once the bolt acked every word) minus the sentence's timestamp; its output latency
  is measured as plain's.

Prints p50, p90, p99 and max in milliseconds per configuration, the sentences measured and the load
average; the configurations alternate for ``--rounds``. Asserts nothing. Target (issue: tracked in
real-time mode): completion p99 <= 100 ms at 1,000 sentences/s.

Usage: ``./rk bench spark_real_time [--rate 1000] [--seconds 20] [--warmup 15] [--rounds 1]
[--words 8] [--batch-duration "5 minutes"] [--bootstrap-servers HOST:PORT]``
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import tempfile
import time

import numpy as np

from reliable_kafka import Tracking
from reliable_kafka.testing.records import read_topic
from reliable_kafka.testing.topics import create_topics, unique_name

# above the default batch duration of 5 minutes (a SparkSpout refuses a batch as long as its timeout)
TRACKING = Tracking(ackers=2, message_timeout_ms=600_000)
WORDS = "the quick brown fox jumps over the lazy dog and a cat sat on one mat".split()


def split_words(df):
    from pyspark.sql import functions as F

    words = F.explode(F.split(F.col("value").cast("string"), " "))
    columns = [words.alias("value")] + (["anchors"] if "anchors" in df.columns else [])
    sent = F.unix_millis(F.col("timestamp")).cast("string")  # the sentence's send time, for the latency
    return df.select(sent.alias("key"), *columns)


def _acker(bootstrap: str, topology: str, ready, stop) -> None:
    from reliable_kafka.acker.worker import AckerWorker

    worker = AckerWorker(topology=topology, connection=bootstrap, tracking=TRACKING)
    ready.set()
    worker.run(stop)


def _bolt(bootstrap: str, topology: str, topic: str, stop) -> None:
    from reliable_kafka.bolt import BasicBolt

    BasicBolt(
        topology=topology,
        connection=bootstrap,
        source_topics=topic,
        group_id=f"{topic}.count",
        batch_handler=lambda batch, collector: None,
    ).run(stop)


def feed(bootstrap: str, topic: str, rate: float, seconds: float, words: int) -> tuple[float, float]:
    """Sentences at ``rate`` a second for ``seconds``; (first, last) send time, epoch seconds."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    first = time.time()
    start, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate) + 1
        while sent < due:
            line = " ".join(WORDS[(sent * 7 + j) % len(WORDS)] for j in range(words))
            producer.produce(topic, line.encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    return first, time.time()


def source_times(bootstrap: str, topic: str) -> dict[tuple[int, int], int]:
    """(partition, offset) -> the sentence's timestamp (ms)."""
    return {(int(m.partition() or 0), int(m.offset() or 0)): m.timestamp()[1] for m in read_topic(bootstrap, topic)}


def output_latencies(bootstrap: str, topic: str, window: tuple[float, float]) -> list[float]:
    """Per output: its timestamp minus its sentence's (carried in the key), for sentences sent in ``window``."""
    low, high = (int(1000 * t) for t in window)
    found: list[float] = []
    for message in read_topic(bootstrap, topic):
        sent = int(message.key() or b"0")
        if low <= sent <= high:
            found.append(message.timestamp()[1] - sent)
    return found


def percentiles(values: list[float]) -> str:
    if not values:
        return "no samples"
    p = np.percentile(np.array(values, dtype=float), [50, 90, 99])
    return f"p50 {p[0]:.1f}  p90 {p[1]:.1f}  p99 {p[2]:.1f}  max {max(values):.1f} ms ({len(values):,} samples)"


def run_plain(spark, bootstrap: str, args) -> dict[str, list[float]]:
    source, output = unique_name("rt-plain-src"), unique_name("rt-plain-out")
    create_topics(bootstrap, {source: 2, output: 2})
    with tempfile.TemporaryDirectory(prefix="rk-bench-rt-plain-") as checkpoint:
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
        )
        from reliable_kafka.spark.single_query import real_time_trigger  # PySpark 4.1 has no realTime=

        writer = (
            split_words(reader)
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", output)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
        )
        query = real_time_trigger(writer, args.batch_duration).start()
        try:
            window = timed_feed(bootstrap, source, args)
        finally:
            query.stop()
    return {"output": output_latencies(bootstrap, output, window)}


def timed_feed(bootstrap: str, source: str, args) -> tuple[float, float]:
    """Warm-up, then the measured window's feed; the window (epoch seconds)."""
    feed(bootstrap, source, args.rate, args.warmup, args.words)
    window = feed(bootstrap, source, args.rate, args.seconds, args.words)
    time.sleep(3.0)  # the last sentences' outputs and trees
    return window


def run_tracked(spark, bootstrap: str, args) -> dict[str, list[float]]:
    from reliable_kafka.kafka.admin import admin_client, ensure_topics
    from reliable_kafka.spark import SparkOptions, SparkSpout
    from reliable_kafka.spark.derive import derive_ids
    from reliable_kafka.topology import TopologyTopics

    topology = unique_name("rt-tracked")
    source, output = f"{topology}.src", f"{topology}.words"
    create_topics(bootstrap, {source: 2, output: 2})
    topics = TopologyTopics(topology, ackers=2)
    ensure_topics(admin_client(bootstrap), topics)
    context = multiprocessing.get_context("spawn")
    stop, ready = context.Event(), context.Event()
    helpers = [
        context.Process(target=_acker, args=(bootstrap, topology, ready, stop), daemon=True),
        context.Process(target=_bolt, args=(bootstrap, topology, output, stop), daemon=True),
    ]
    for process in helpers:
        process.start()
    ready.wait(120)
    try:
        with tempfile.TemporaryDirectory(prefix="rk-bench-rt-tracked-") as checkpoint:
            job = SparkSpout(
                spark,
                topology=topology,
                connection=bootstrap,
                source_topics=source,
                group_id=f"{topology}.spark",
                checkpoint_dir=checkpoint,
                transform=split_words,
                output_topic=output,
                options=SparkOptions(real_time=args.batch_duration),
                tracking=TRACKING,
            )
            job.start()
            try:
                window = timed_feed(bootstrap, source, args)
                salt = job._query_salt
            finally:
                job.stop()
    finally:
        stop.set()
        for process in helpers:
            process.join(30)
            if process.is_alive():
                process.terminate()
    sent = source_times(bootstrap, source)
    low, high = (int(1000 * t) for t in window)
    by_root: dict[int, int] = {}
    for partition in (0, 1):
        offsets = sorted(o for p, o in sent if p == partition)
        roots, _ = derive_ids(salt, source, partition, np.array(offsets, dtype=np.int64), 1)
        by_root.update(zip(roots.tolist(), (sent[(partition, o)] for o in offsets)))
    completion: list[float] = []
    seen: set[int] = set()
    from reliable_kafka import codec
    from reliable_kafka.core.kinds import OutcomeKind

    for message in read_topic(bootstrap, topics.outcomes):
        batch = codec.decode_outcomes(message.value())
        for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
            sent_ms = by_root.get(root)
            if kind == OutcomeKind.COMPLETED and sent_ms is not None and root not in seen and low <= sent_ms <= high:
                seen.add(root)  # the first COMPLETED (a later one: the driver's INIT after the batch)
                completion.append(message.timestamp()[1] - sent_ms)
    measured = sum(1 for ms in sent.values() if low <= ms <= high)
    return {
        "completion": completion,
        "output": output_latencies(bootstrap, output, window),
        "not_completed": [float(measured - len(completion))],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=1000.0, help="sentences a second")
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds fed before the window (JIT, connections)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--words", type=int, default=8, help="words a sentence (outputs a record)")
    parser.add_argument("--batch-duration", default="5 minutes", help="the real-time batch duration")
    parser.add_argument("--bootstrap-servers", "--bootstrap", dest="bootstrap")
    args = parser.parse_args(argv)
    from reliable_kafka.spark.single_query import real_time_supported

    if not real_time_supported():
        import pyspark

        print(f"PySpark {pyspark.__version__} has no real-time mode (4.1+): nothing to measure")
        return 1
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from reliable_kafka.broker import EmbeddedKafka

            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        from reliable_kafka.spark import spark_session

        spark = spark_session("rk-bench-spark-real-time", master="local[2]")
        stack.callback(spark.stop)
        print(
            f"real-time mode, {args.rate:,.0f} sentences/s of {args.words} words, {args.warmup:.0f} s warm-up then "
            f"{args.seconds:.0f} s measured, batches of {args.batch_duration}, {args.rounds} round(s) alternating; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        results: dict[str, list[float]] = {}
        for round_ in range(1, args.rounds + 1):
            for name, run in (("plain", run_plain), ("tracked", run_tracked)):
                load = os.getloadavg()[0]
                figures = run(spark, bootstrap, args)
                for kind, values in figures.items():
                    if kind == "not_completed":
                        print(f"round {round_} {name:8} sentences in the window with no completion: {int(values[0])}")
                        continue
                    print(
                        f"round {round_} {name:8} {kind:10} latency {percentiles(values)}, load {load:.1f}", flush=True
                    )
                    results.setdefault(f"{name} {kind}", []).extend(values)
        if args.rounds > 1:
            print()
            for key, values in results.items():
                print(f"all rounds {key:20} {percentiles(values)}")
    print("target: tracked completion p99 <= 100 ms at 1,000 sentences/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
