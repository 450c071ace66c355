"""A SparkSpout driver as its own process, for the kill test (tests/integration/test_spark_kill.py).

Runs until SIGTERM (then stops gracefully and prints its progress as one JSON line) or until it is
killed. Outputs are ``value|partition|offset|attempt`` so the test can trace them to their records.

    python spark_driver_script.py --bootstrap HOST:PORT --topology T --source S --output O \
        --group G --checkpoint DIR [--max-offsets-per-trigger N] [--message-timeout-ms MS]
        [--pause-on VALUE --pause-file PATH] [--single-query]

``--pause-on``: the task that transforms the record ``VALUE`` writes its Python worker's pid to
``PATH`` and waits (up to 120 s) for ``PATH.release``, so a test can kill its executor mid-batch.
``--single-query``: the spout runs as one streaming query (``SparkOptions(single_query=True)``);
the transform (a projection) is row-wise, as that path requires.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading


def tag_with_source(df):
    from pyspark.sql import functions as F

    return df.select(
        "key",
        F.concat_ws(
            "|",
            F.col("value").cast("string"),
            F.col("partition").cast("string"),
            F.col("offset").cast("string"),
            F.col("attempt").cast("string"),
        ).alias("value"),
        "anchors",
    )


def pausing(transform, value: str, marker: str):
    """``transform`` behind a UDF that holds the task of record ``value`` (see the docstring)."""
    import os
    import time

    from pyspark.sql import functions as F

    target = value.encode()

    @F.udf("binary")
    def pause(data):
        if bytes(data) == target and not os.path.exists(marker + ".release"):
            with open(marker + ".tmp", "w") as handle:
                handle.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            deadline = time.monotonic() + 120
            while not os.path.exists(marker + ".release") and time.monotonic() < deadline:
                time.sleep(0.1)
        return data

    return lambda df: transform(df.withColumn("value", pause(F.col("value"))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=300)
    parser.add_argument("--message-timeout-ms", type=int, default=10_000)
    parser.add_argument("--pause-on", default=None)
    parser.add_argument("--pause-file", default=None)
    parser.add_argument("--single-query", action="store_true")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    from reliable_kafka import Tracking
    from reliable_kafka.core.tracker import Backoff
    from reliable_kafka.spark import SparkOptions, SparkSpout, spark_session

    spark = spark_session("rk-kill-test-driver")
    spout = SparkSpout(
        spark,
        topology=args.topology,
        connection=args.bootstrap,
        source_topics=args.source,
        group_id=args.group,
        checkpoint_dir=args.checkpoint,
        transform=pausing(tag_with_source, args.pause_on, args.pause_file) if args.pause_on else tag_with_source,
        output_topic=args.output,
        options=SparkOptions(
            max_offsets_per_trigger=args.max_offsets_per_trigger, commit_interval_ms=300, single_query=args.single_query
        ),
        tracking=Tracking(message_timeout_ms=args.message_timeout_ms, backoff=Backoff(initial_ms=200)),
    )
    spout.start()
    started = {"started": True, "recovered": spout.recovered, "master": spark.sparkContext.master}
    print(json.dumps({**started, "single_query": spout.single_query}), flush=True)
    try:
        while not stop.wait(0.5):
            spout.raise_if_failed()
    finally:
        spout.stop()
        print(json.dumps({"stopped": True, **spout.progress()}, default=str), flush=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
