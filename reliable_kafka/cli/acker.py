"""``reliable-kafka acker``: one acker worker process."""

from __future__ import annotations

import argparse

from reliable_kafka.cli.arguments import (
    Subparsers,
    client_settings,
    consumer_config_argument,
    message_timeout_argument,
    metrics_host_argument,
    replication_arguments,
    setup_logging,
    topology_arguments,
)
from reliable_kafka.config import Connection, Loop, TopicCreation, Tracking

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    acker = subparsers.add_parser(
        "acker",
        help="run an acker worker (a consumer-group member over <topology>.acks)",
        description="Folds ack events per root and publishes outcomes; stops cleanly on SIGTERM. "
        "Run several with the same --topology to share the ack partitions.",
    )
    topology_arguments(acker)
    consumer_config_argument(acker)
    acker.add_argument(
        "--ackers",
        type=int,
        default=None,
        help="N, the ack topic's partitions: created with N (default 1) when missing; an existing topic "
        "must have N (default: any)",
    )
    message_timeout_argument(acker, default=30_000, help="message timeout (default: 30000)")
    acker.add_argument(
        "--timeout-buckets",
        type=int,
        default=4,
        help="rotating timeout buckets; expiry comes within timeout*(1+1/buckets) (default: 4)",
    )
    acker.add_argument(
        "--commit-interval-ms", type=int, default=1000, help="how often the low point is committed (default: 1000)"
    )
    acker.add_argument("--group", default=None, help="consumer group (default: <topology>.ackers)")
    acker.add_argument(
        "--name",
        default=None,
        help="stable worker name: logs, and static group membership across restarts "
        "(default: random, dynamic membership)",
    )
    replication_arguments(acker, "topics this worker creates")
    acker.add_argument(
        "--no-create-topics",
        dest="create_topics",
        action="store_false",
        help="do not create the topology's topics (a secured deployment: an administrator "
        "runs `reliable-kafka topics`; the acker then needs no CREATE)",
    )
    acker.add_argument("--log-level", default="info", help="logging level (default: info)")
    acker.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics on this port (docs/operations.md; default: off)",
    )
    metrics_host_argument(acker)
    acker.add_argument(
        "--status-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="publish a status snapshot every SECONDS (default: 5; the verdict's window is 12 of them)",
    )
    acker.set_defaults(handler=_acker)


def _acker(args: argparse.Namespace) -> int:
    from reliable_kafka.acker import AckerWorker

    setup_logging(args.log_level)
    worker = AckerWorker(
        topology=args.topology,
        connection=Connection(
            args.bootstrap_servers, kafka_config=client_settings(args), consumer_config=dict(args.consumer_config)
        ),
        tracking=Tracking(ackers=args.ackers, message_timeout_ms=args.message_timeout_ms),
        create_topics=TopicCreation(
            replication_factor=args.replication_factor, min_insync_replicas=args.min_insync_replicas
        ),
        loop=Loop(commit_interval_ms=args.commit_interval_ms, metrics_port=args.metrics_port),
        timeout_buckets=args.timeout_buckets,
        group_id=args.group,
        name=args.name,
    )
    worker.metrics_host = args.metrics_host  # read when /metrics starts (ops.reporter.attach)
    if args.status_interval is not None:
        worker.status_interval_s = args.status_interval  # type: ignore[attr-defined]
    worker.run(handle_signals=True)
    return 0
