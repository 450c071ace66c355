"""``reliable-kafka demo``, ``chaos`` and ``sim``: runs that check their own results."""

from __future__ import annotations

import argparse

from reliable_kafka.cli.arguments import Subparsers, bootstrap_argument, message_timeout_argument, setup_logging

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    _register_demo(subparsers)
    _register_chaos(subparsers)
    _register_sim(subparsers)


def _register_sim(subparsers: Subparsers) -> None:
    from reliable_kafka.testing import shipped_simulation

    sim = subparsers.add_parser(
        "sim",
        help="run the seeded simulation of the shipped classes over many seeds (no broker)",
        description="The shipped Spout, BasicBolt and AckerWorker on the in-memory Kafka under a seeded "
        "scheduler with faults, crashes and rebalances; docs/design.md section 8 checked after every step "
        "(docs/testing.md). Prints each failing seed with its replay command; exits 1 if one failed.",
    )
    shipped_simulation.add_arguments(sim)
    sim.set_defaults(handler=shipped_simulation.run)


def _register_demo(subparsers: Subparsers) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run the demo pipeline on an embedded Kafka broker and verify its summary",
        description="Embedded broker, acker workers, a word-count job reading `sentences`, a downstream "
        "bolt that fails a few percent of tuples; live progress, then a summary whose figures are "
        "checked (lost = 0, committed offsets = end of topic). Exits 1 if a check fails.",
    )
    demo.add_argument("--sentences", type=int, default=20_000, help="sentences to generate (default: 20000)")
    demo.add_argument(
        "--fail-rate", type=float, default=0.03, help="share of word tuples the downstream bolt fails (default: 0.03)"
    )
    demo.add_argument(
        "--engine",
        choices=["spark", "python"],
        default=None,
        help="word-count job: PySpark Structured Streaming or a Python bolt "
        "(default: spark when PySpark is installed, else python)",
    )
    bootstrap_argument(demo, required=False, help="use this Kafka instead of an embedded broker")
    demo.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    demo.add_argument("--log-level", default="error", help="logging level (default: error)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from reliable_kafka import demo

    setup_logging(args.log_level)
    summary = demo.run(  # a missing [spark] extra raises before anything starts (demo.choose_engine)
        sentences=args.sentences,
        fail_rate=args.fail_rate,
        engine=args.engine,
        bootstrap_servers=args.bootstrap_servers,
        timeout_s=args.timeout,
    )
    return 0 if summary.ok else 1


# -- chaos: the fault-injection harness -----------------------------------------------------------


def _register_chaos(subparsers: Subparsers) -> None:
    chaos = subparsers.add_parser(
        "chaos",
        help="fault-injection harness: kill processes and brokers at random, then check the invariants",
        description="Runs spouts, bolts and acker workers as separate processes on an embedded broker "
        "(or a 3-broker cluster), SIGKILLs and restarts them at random moments and restarts brokers; "
        "then checks from the topics: no record lost, commits never passed an incomplete record. "
        "Exits 1 if a check fails.",
    )
    chaos.add_argument("--records", type=int, default=50_000, help="source records (default: 50000)")
    chaos.add_argument(
        "--seconds",
        type=float,
        default=150.0,
        help="the records are written (and processes killed) over this long (default: 150)",
    )
    chaos.add_argument(
        "--brokers",
        type=int,
        default=1,
        choices=[1, 3],
        help="1: restart the broker; 3: a cluster, kill one broker at a time (default: 1)",
    )
    chaos.add_argument("--broker-restarts", type=int, default=2, help="broker faults (default: 2)")
    chaos.add_argument(
        "--transactional",
        action="store_true",
        help="bolts in Kafka transactions; checks that the sink holds every effect once",
    )
    chaos.add_argument("--spare-spouts", action="store_true", help="do not kill spout processes")
    chaos.add_argument(
        "--spark",
        action="store_true",
        help="run the split stage as a PySpark Structured Streaming job (killed like the rest)",
    )
    chaos.add_argument(
        "--spark-spout",
        action="store_true",
        help="run the spout stage as one PySpark SparkSpout in single-query mode (killed like the rest)",
    )
    message_timeout_argument(
        chaos,
        default=None,
        help="message timeout (default: 10000; 30000 with --spark or --spark-spout; 120000 with --transactional, "
        "above the longest stall of a transactional worker, since a timeout replays)",
    )
    chaos.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="the split and sink bolts keep N calls in flight (ordering key), each waiting a few ms (default: 1)",
    )
    chaos.add_argument("--seed", type=int, default=1, help="random seed for the fault schedule (default: 1)")
    chaos.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds the topology may take to finish after the faults (default: 240; 480 "
        "with --spark or --spark-spout, whose restarted driver catches up slowly on 2 cores)",
    )
    chaos.set_defaults(handler=_chaos)


def _chaos(args: argparse.Namespace) -> int:
    from reliable_kafka.chaos.harness import ChaosConfig, run

    if args.parallel < 1:
        raise SystemExit(f"chaos: --parallel must be >= 1, got {args.parallel}")
    if args.parallel > 1 and args.transactional:
        raise SystemExit("chaos: --parallel above 1 and --transactional do not mix (a transactional bolt is serial)")
    if args.spark_spout and args.transactional:
        raise SystemExit("chaos: --spark-spout and --transactional do not mix (a Spark spout is not transactional)")
    spark = args.spark or args.spark_spout
    report = run(
        ChaosConfig(
            records=args.records,
            produce_seconds=args.seconds,
            brokers=args.brokers,
            broker_restarts=args.broker_restarts,
            transactional=args.transactional,
            kill_spouts=not args.spare_spouts,
            spark=args.spark,
            spark_spout=args.spark_spout,
            seed=args.seed,
            parallelism=args.parallel,
            message_timeout_ms=args.message_timeout_ms
            or (120_000 if args.transactional else 30_000 if spark else 10_000),
            settle_timeout=args.settle or (480.0 if spark else 240.0),
        )
    )
    return 0 if report.ok else 1
