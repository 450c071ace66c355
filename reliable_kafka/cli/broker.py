"""``reliable-kafka kafka up|status|down``: a local Kafka broker that outlives the command."""

from __future__ import annotations

import argparse
from pathlib import Path

from reliable_kafka.cli.arguments import Subparsers

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    kafka = subparsers.add_parser(
        "kafka",
        help="run a local Kafka broker (embedded KRaft, started from Maven jars)",
        description="A local Kafka broker that keeps running after this command returns.",
    )
    actions = kafka.add_subparsers(dest="kafka_command", required=True, metavar="ACTION")

    start = actions.add_parser("up", help="start a broker in the background")
    start.add_argument(
        "--port",
        type=int,
        default=0,
        help="client port of the (first) broker (default: a free port)",
    )
    start.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="directory for config, logs and data (default: a new temp dir)",
    )
    start.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the data directory when the broker is stopped with `kafka down`",
    )
    start.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="number of brokers; more than 1 starts a cluster (replication factor up to 3)",
    )
    start.add_argument(
        "--secure",
        action="store_true",
        help="SASL/SCRAM-SHA-256 and ACLs (StandardAuthorizer); users admin, spout, bolt, acker, spark, "
        "outsider with client properties in the data directory",
    )
    start.add_argument(
        "--version",
        default=None,
        metavar="V",
        help="Kafka release to run, e.g. 3.9.1 (3.9 or newer; default: $RK_KAFKA_VERSION, else "
        "the tested newest, reliable_kafka.jars.KAFKA_VERSION)",
    )
    start.set_defaults(handler=_kafka_up)

    show = actions.add_parser("status", help="say whether the broker runs, and where")
    show.set_defaults(handler=_kafka_status)

    stop = actions.add_parser("down", help="stop the broker and remove its data")
    stop.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for a clean shutdown before killing (default: 30)",
    )
    stop.set_defaults(handler=_kafka_down)


def _kafka_up(args: argparse.Namespace) -> int:
    from reliable_kafka.broker import daemon

    current, started = daemon.up(
        port=args.port,
        data_dir=args.data_dir,
        keep_data=args.keep_data,
        brokers=args.brokers,
        secure=args.secure,
        version=args.version,
    )
    if not started:
        print(f"already running; {current.describe()}")
        return 0
    print(current.describe())
    return 0 if current.running else 1


def _kafka_status(args: argparse.Namespace) -> int:
    from reliable_kafka.broker import daemon

    current = daemon.status()
    print(current.describe())
    return 0 if current.running else 1


def _kafka_down(args: argparse.Namespace) -> int:
    from reliable_kafka.broker import daemon

    stopped = daemon.down(timeout=args.timeout)
    if stopped is None:
        print("no broker recorded as running; nothing to stop")
    else:
        data = "kept" if stopped.state and stopped.state.get("keep_data") else "removed"
        print(f"stopped Kafka at {stopped.bootstrap} (data {data})")
    return 0
