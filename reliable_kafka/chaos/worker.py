"""One process of the chaos topology: ``python -m reliable_kafka.chaos.worker --role ROLE ...``.

The topology: source records ``"<id>"`` -> spout (forwards to ``<T>.stage1``) -> split bolt (emits
``FANOUT`` children ``"<id>:<j>"`` to ``<T>.stage2``) -> sink bolt (writes each child, unanchored,
to ``<T>.sink`` and acks it). Every process stops cleanly on SIGTERM and can be SIGKILLed anywhere.
Role ``spark`` is a PySpark split stage, ``spark-spout`` a PySpark spout stage
(:mod:`reliable_kafka.spark.chaos_role`).

With ``--parallelism N`` (above 1) the split and sink bolts keep up to N handler calls in flight
(``ordering="key"``), and each call waits a moment as an I/O-bound handler would, so that a kill
finds many tuples of one bolt in flight at once.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from typing import Any, cast

from reliable_kafka.acker import AckerWorker
from reliable_kafka.bolt import BasicBolt, BoltCollector, Parallel, Tuple
from reliable_kafka.config import Connection, Loop, Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.spout import Spout, TransactionalSpout

FANOUT = 3
ROLES = ("spout", "split", "sink", "acker", "spark", "spark-spout")
CLIENT_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}  # consumers only: producers warn of them
PARALLEL_WAIT_S = (0.0005, 0.005)  # a parallel bolt's call waits this long (uniform), as on I/O


def topic_names(topology: str) -> dict[str, str]:
    return {name: f"{topology}.{name}" for name in ("source", "stage1", "stage2", "sink")}


def build(
    role: str,
    *,
    topology: str,
    bootstrap: str,
    name: str,
    transactional: bool,
    message_timeout_ms: int,
    ackers: int,
    max_pending: int = 10_000,
    parallelism: int = 1,
) -> AckerWorker | Spout | TransactionalSpout | BasicBolt:
    topics = topic_names(topology)
    on: dict[str, Any] = {
        "topology": topology,
        "connection": Connection(bootstrap, consumer_config=dict(CLIENT_CONFIG)),
        "name": name,
    }
    if role == "acker":
        return AckerWorker(
            **on,
            tracking=Tracking(ackers=ackers, message_timeout_ms=message_timeout_ms),
            loop=Loop(commit_interval_ms=500),
        )
    if role == "spout":
        spout: Spout | TransactionalSpout = Spout(
            **on,
            source_topics=topics["source"],
            group_id=f"{topology}-spout",
            emit_to=topics["stage1"],
            tracking=Tracking(
                message_timeout_ms=message_timeout_ms,
                backstop_grace_ms=message_timeout_ms,
                max_retries=50,
                max_pending=max_pending,
                backoff=Backoff(initial_ms=100, max_ms=2000),
            ),
            transactional=transactional,
            loop=Loop(commit_interval_ms=250),
        )
        return spout

    def split(tuple_: Tuple, collector: BoltCollector) -> None:
        wait()
        for j in range(FANOUT):
            # every source record has a value (its id)
            collector.emit(topics["stage2"], cast(bytes, tuple_.value) + f":{j}".encode(), key=tuple_.value)

    def sink(tuple_: Tuple, collector: BoltCollector) -> None:
        wait()
        collector.emit(topics["sink"], tuple_.value, key=tuple_.key, anchors=())  # the effect, untracked

    def wait() -> None:
        if parallelism > 1:
            time.sleep(random.uniform(*PARALLEL_WAIT_S))

    handler, source = (split, topics["stage1"]) if role == "split" else (sink, topics["stage2"])
    return BasicBolt(
        **on,
        source_topics=source,
        group_id=f"{topology}-{role}",
        handler=handler,
        transactional=transactional,
        loop=Loop(commit_interval_ms=250),
        parallel=Parallel(parallelism, ordering="key"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reliable_kafka.chaos.worker")
    parser.add_argument("--role", choices=ROLES, required=True)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--bootstrap-servers", "--bootstrap", dest="bootstrap", required=True)
    parser.add_argument("--name", required=True, help="stable across restarts (transactional.id)")
    parser.add_argument("--transactional", action="store_true")
    parser.add_argument("--message-timeout-ms", type=int, default=10_000)
    parser.add_argument("--ackers", type=int, default=4)
    parser.add_argument("--max-pending", type=int, default=10_000, help="for --role spout and spark-spout")
    parser.add_argument("--parallelism", type=int, default=1, help="for --role split and sink: calls in flight")
    parser.add_argument(
        "--checkpoint-dir", help="for --role spark and spark-spout: the Spark checkpoint (stable across restarts)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format=f"%(asctime)s {args.name} %(levelname)s %(name)s: %(message)s"
    )
    if args.role in ("spark", "spark-spout"):
        _run_spark(args)
        return 0
    component = build(
        args.role,
        topology=args.topology,
        bootstrap=args.bootstrap,
        name=args.name,
        transactional=args.transactional,
        message_timeout_ms=args.message_timeout_ms,
        ackers=args.ackers,
        max_pending=args.max_pending,
        parallelism=args.parallelism,
    )
    component.run(handle_signals=True)
    return 0


def _run_spark(args: argparse.Namespace) -> None:
    """A PySpark role, stopped by SIGTERM or SIGINT (pyspark is imported only here)."""
    import signal
    import threading

    from reliable_kafka.spark.chaos_role import run_spark_split, run_spark_spout

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    on: dict[str, Any] = {
        "topology": args.topology,
        "bootstrap": args.bootstrap,
        "name": args.name,
        "checkpoint_dir": args.checkpoint_dir,
        "kafka_config": {},
        "stop": stop,
    }
    if args.role == "spark":
        run_spark_split(**on, fanout=FANOUT)
    else:
        run_spark_spout(**on, message_timeout_ms=args.message_timeout_ms, max_pending=args.max_pending)


if __name__ == "__main__":
    sys.exit(main())
