"""``reliable-kafka status``, ``ui`` and ``lag``: what a running topology is doing (read only)."""

from __future__ import annotations

import argparse
import sys

from reliable_kafka.cli.arguments import (
    Subparsers,
    bootstrap_argument,
    client_arguments,
    client_settings,
    topology_arguments,
)

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    _register_status(subparsers)
    _register_ui(subparsers)
    _register_lag(subparsers)


def _register_status(subparsers: Subparsers) -> None:
    status = subparsers.add_parser(
        "status",
        help="what a running topology is doing: components, source partitions, verdicts",
        description="Reads <topology>.status (each component's latest snapshot), the source partitions' "
        "committed and end offsets, dead-letter and quarantine counts, and judges each component and "
        "partition OK / WARN / STALL / DOWN / STOPPED over its last minute (docs/operations.md). "
        "Exit code: 0 when the topology is OK, 1 for an error, 2 otherwise.",
    )
    topology_arguments(status)
    status.add_argument(
        "--json", action="store_true", help="print the report as JSON (stable schema, docs/operations.md)"
    )
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=5.0,
        default=None,
        metavar="SECONDS",
        help="print again every SECONDS (default 5) until interrupted",
    )
    status.add_argument(
        "--all",
        action="store_true",
        help="also list components stopped or silent for more than an hour, and members replaced "
        "for more than a window",
    )
    status.add_argument(
        "--forget",
        metavar="NAME",
        default=None,
        help="remove a stopped or dead component from the status topic for good (a tombstone); refused while it runs",
    )
    status.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    import json
    import time

    from reliable_kafka.ops.status import build_report, forget, render

    if args.forget:
        snap = forget(args.bootstrap_servers, args.topology, args.forget, kafka_config=client_settings(args))
        where = f"{snap.get('host')}:{snap.get('pid')}"
        print(f"forgot {args.forget} ({snap.get('kind')} on {where}, state {snap.get('state')})")
        return 0
    while True:
        report = build_report(
            args.bootstrap_servers, args.topology, kafka_config=client_settings(args), include_all=args.all
        )
        if args.json:
            print(json.dumps(report, indent=None if args.watch else 2), flush=True)
        else:
            if args.watch and sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")
            print(render(report), flush=True)
        if not args.watch:
            return 0 if report["verdict"] == "OK" else 2
        time.sleep(args.watch)


def _register_ui(subparsers: Subparsers) -> None:
    ui = subparsers.add_parser(
        "ui",
        help="serve a live, read-only page of a running topology (components, partitions, charts)",
        description="A small HTTP server: / is the page (no external assets), /api/status the JSON "
        "report of `status --json`. Stops on Ctrl-C.",
    )
    topology_arguments(ui)
    ui.add_argument("--port", type=int, default=8080, help="HTTP port (default: 8080; 0: any free port)")
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    ui.set_defaults(handler=_ui)


def _ui(args: argparse.Namespace) -> int:
    from reliable_kafka.ops.ui import StatusPage

    page = StatusPage(
        bootstrap_servers=args.bootstrap_servers,
        topology=args.topology,
        kafka_config=client_settings(args),
        host=args.host,
        port=args.port,
    )
    print(f"reliable-kafka ui: topology {args.topology} at {page.url} (Ctrl-C stops)", flush=True)
    page.serve_forever()
    return 0


def _register_lag(subparsers: Subparsers) -> None:
    lag = subparsers.add_parser(
        "lag",
        help="a spout's consumer-group lag, minus the records done above its commit point",
        description="Kafka's group tool counts every record above a spout's commit point as lag, "
        "although the spout recorded the ones already done in its commit metadata; this shows both "
        "figures per partition. Reads only (joins no group).",
    )
    lag.add_argument("--group", required=True, help="the spout's consumer group (a Spark job: its group_id)")
    lag.add_argument("--topic", required=True, help="a source topic of the spout")
    bootstrap_argument(lag)
    client_arguments(lag)
    lag.set_defaults(handler=_lag)


def _lag(args: argparse.Namespace) -> int:
    from reliable_kafka.offsets import true_lag

    rows = true_lag(args.bootstrap_servers, args.group, args.topic, kafka_config=client_settings(args))
    if not rows:
        print(f"topic {args.topic!r} not found or has no partitions")
        return 1
    print(f"{'PARTITION':>9} {'END':>12} {'COMMITTED':>12} {'DONE-ABOVE':>10} {'KAFKA-LAG':>10} {'LAG':>10}")
    for row in rows:
        committed = "-" if row.committed is None else row.committed
        done = "?" if row.done_above is None else row.done_above
        print(f"{row.partition:>9} {row.end:>12} {committed:>12} {done:>10} {row.kafka_lag:>10} {row.lag:>10}")
        if row.note:
            print(f"  partition {row.partition}: commit metadata ignored: {row.note}")
    print(
        f"{'total':>9} {'':>12} {'':>12} {sum(r.done_above or 0 for r in rows):>10} "
        f"{sum(r.kafka_lag for r in rows):>10} {sum(r.lag for r in rows):>10}"
    )
    return 0
