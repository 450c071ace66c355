"""Word count with a PySpark Structured Streaming job as the spout of the tuple trees.

Each sentence read by Spark is a root. The job splits sentences into words and counts them per
micro-batch; every count row is anchored to all the sentences it counted (``merge_anchors``), so a
sentence's tree completes only when the Python bolt downstream has acked every count it went into.
The job's consumer group (``<topology>.spark``) is committed as far as sentences are done.

Run:  python examples/spark_word_count.py [--bootstrap-servers HOST:PORT] [--sentences N]
(without --bootstrap-servers an embedded Kafka broker is started and stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections import Counter

from reliable_kafka import Tracking
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.local import LocalCluster
from reliable_kafka.spark import SparkOptions, SparkSpout, spark_session
from reliable_kafka.spark.demo_job import count_words
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

WORDS = "the quick brown fox jumps over the lazy dog and the cat".split()


def run(bootstrap: str, *, sentences: int = 500, timeout: float = 180.0) -> dict:
    """Write ``sentences`` sentences, count their words through Spark; returns a summary."""
    topology = unique_name("spark-wordcount")
    source, counts_topic = f"{topology}.sentences", f"{topology}.counts"
    create_topics(bootstrap, {source: 2, counts_topic: 2})
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=2))
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 5)) for i in range(sentences)]
    produce_values(bootstrap, source, [line.encode() for line in lines])
    expected = Counter(word for line in lines for word in line.split())

    totals: Counter = Counter()

    def add_count(tuple_, collector) -> None:
        totals[tuple_.key.decode()] += int(tuple_.value)

    on = {"topology": topology, "connection": bootstrap}
    with (
        LocalCluster(
            AckerWorker(**on, tracking=Tracking(ackers=2, message_timeout_ms=20_000)),
            BasicBolt(**on, source_topics=counts_topic, group_id=f"{topology}.sum", handler=add_count),
        ),
        tempfile.TemporaryDirectory(prefix="rk-wordcount-ckpt-") as checkpoint,
    ):
        spark = spark_session("spark-word-count")
        try:
            job = SparkSpout(
                spark,
                topology=topology,
                connection=bootstrap,
                source_topics=source,
                group_id=f"{topology}.spark",
                checkpoint_dir=checkpoint,
                transform=count_words,
                output_topic=counts_topic,
                options=SparkOptions(available_now=True),
                tracking=Tracking(message_timeout_ms=20_000),
            )
            job.start()
            try:
                done = job.run_until(lambda j: j.caught_up(), timeout=timeout)
                progress = job.progress()
            finally:
                job.stop()
        finally:
            spark.stop()
    return {
        "caught_up": done,
        "expected": dict(expected),
        "counted": dict(totals),
        "at_least_once": all(totals[w] >= n for w, n in expected.items()),
        "exact": totals == expected,
        "progress": progress,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",
        help="Kafka bootstrap servers (default: start an embedded broker)",
    )
    parser.add_argument("--sentences", type=int, default=500)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from reliable_kafka.broker import EmbeddedKafka

            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        summary = run(bootstrap, sentences=args.sentences)
    progress = summary["progress"]
    print(
        f"counted {sum(summary['counted'].values())} words in {args.sentences} sentences "
        f"({'exact' if summary['exact'] else 'at least once'}): {dict(sorted(summary['counted'].items()))}"
    )
    print(f"trees completed: {progress['tracker']['completed']}, commit points: {progress['commit_points']}")
    return 0 if summary["caught_up"] and summary["at_least_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
