"""``reliable-kafka dlq list|show|replay``, ``trace`` and ``failures``: acting on failures."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from reliable_kafka.cli.arguments import Subparsers, client_settings, topology_arguments
from reliable_kafka.errors import ReliableKafkaError

if TYPE_CHECKING:  # the commands import reliable_kafka.ops when they run, not when the parser is built
    from reliable_kafka.ops.dlq import DeadLetter

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    _register_dlq(subparsers)
    _register_trace(subparsers)
    _register_failures(subparsers)


def _dlq_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", default=None, help="reason contains this text (any case)")
    parser.add_argument("--source-topic", default=None, help="parked from this source topic")
    parser.add_argument("--source-partition", type=int, default=None, help="parked from this source partition")
    parser.add_argument("--component", default=None, help="failed or parked by a component whose name contains this")
    parser.add_argument(
        "--since", default=None, help="parked at or after: ms since the epoch, ISO 8601 (UTC) or an age (15m, 2h, 1d)"
    )
    parser.add_argument("--until", default=None, help="parked at or before (same forms as --since)")


def _register_dlq(subparsers: Subparsers) -> None:
    dlq = subparsers.add_parser(
        "dlq",
        help="list, show and replay the dead-letter topic <topology>.dlq",
        description="Dead letters carry why they were parked (rk-parked, rk-reason, rk-attempts headers). "
        "`replay` sends them back once: what was replayed is recorded in <topology>.dlq-replayed in the same "
        "Kafka transaction as the copy (docs/operations.md).",
    )
    actions = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one line per dead letter, filtered")
    topology_arguments(listing)
    _dlq_filters(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(handler=_dlq_list)
    show = actions.add_parser("show", help="one dead letter with its attempts and failure records")
    topology_arguments(show)
    show.add_argument("offset", type=int, help="offset in the DLQ")
    show.add_argument("--partition", type=int, default=0, help="DLQ partition (default: 0)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_dlq_show)
    again = actions.add_parser("replay", help="send dead letters back to their source (or --to), once each")
    topology_arguments(again)
    _dlq_filters(again)
    again.add_argument(
        "--offset",
        type=int,
        action="append",
        default=[],
        metavar="OFFSET",
        help="replay this DLQ offset (repeatable; partition from --partition)",
    )
    again.add_argument("--partition", type=int, default=0, help="DLQ partition of --offset (default: 0)")
    again.add_argument(
        "--all",
        action="store_true",
        help="replay every dead letter that matches (needed when neither --offset nor a filter is given)",
    )
    again.add_argument("--to", default=None, help="send to this topic instead of each record's source topic")
    again.add_argument("--rate", type=float, default=100.0, help="records per second at most (default: 100)")
    again.add_argument(
        "--force",
        action="store_true",
        help="send letters that were replayed before once more (on purpose: each is sent again)",
    )
    again.add_argument("--dry-run", action="store_true", help="say what would be sent; send nothing")
    again.add_argument("--json", action="store_true", help="print the report as JSON")
    again.set_defaults(handler=_dlq_replay)


def _dlq_selected(args: argparse.Namespace) -> list[DeadLetter]:
    from reliable_kafka.ops import dlq

    letters = dlq.read_dead_letters(args.bootstrap_servers, args.topology, kafka_config=client_settings(args))
    offsets = [(args.partition, o) for o in getattr(args, "offset", None) or []] or None
    return dlq.select(
        letters,
        reason=args.reason,
        source_topic=args.source_topic,
        source_partition=args.source_partition,
        component=args.component,
        since_ms=dlq.parse_time(args.since) if args.since else None,
        until_ms=dlq.parse_time(args.until) if args.until else None,
        offsets=offsets,
    )


def _dlq_list(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import dlq

    letters = _dlq_selected(args)
    print(json.dumps([d.as_json() for d in letters], indent=2) if args.json else dlq.render_list(letters))
    return 0


def _dlq_show(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import dlq, trace

    letters = dlq.read_dead_letters(args.bootstrap_servers, args.topology, kafka_config=client_settings(args))
    found = [d for d in letters if (d.partition, d.offset) == (args.partition, args.offset)]
    if not found:
        raise ReliableKafkaError(
            f"no dead letter at {args.topology}.dlq[{args.partition}]@{args.offset}; "
            f"see `reliable-kafka dlq list --topology {args.topology}`"
        )
    marks = dlq.replayed(args.bootstrap_servers, args.topology, kafka_config=client_settings(args))
    # where each timed-out attempt stopped: its tree's last ACK, read back from the ack log
    timed_out = {a.root: a.at_ms for a in found[0].attempts if a.root is not None and a.outcome != "FAILED"}
    stopped = trace.last_acks(args.bootstrap_servers, args.topology, timed_out, kafka_config=client_settings(args))
    if args.json:
        document = found[0].as_json()
        document["replayed"] = marks.get((args.partition, args.offset))
        for attempt in document["attempts"]:
            if attempt["root"] in stopped:
                attempt["last_ack"] = stopped[attempt["root"]]
        print(json.dumps(document, indent=2))
    else:
        print(dlq.render_one(found[0], marks, stopped))
    return 0


def _dlq_replay(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import dlq

    filtered = args.offset or any(
        getattr(args, n) is not None
        for n in ("reason", "source_topic", "source_partition", "component", "since", "until")
    )
    if not filtered and not args.all:
        raise ReliableKafkaError("dlq replay: choose what to replay (--offset or a filter), or say --all")
    if args.to is not None:  # before reading the whole DLQ
        dlq.check_target(args.bootstrap_servers, args.to, kafka_config=client_settings(args))
    report = dlq.replay(
        args.bootstrap_servers,
        args.topology,
        _dlq_selected(args),
        to=args.to,
        rate=args.rate,
        dry_run=args.dry_run,
        kafka_config=client_settings(args),
        force=args.force,
    )
    if args.json:
        print(json.dumps(report.__dict__, indent=2))
    else:
        verb = "would send" if report.dry_run else "sent"
        for item in report.sent:
            partition = f"[{item['partition']}]" if item["partition"] is not None else ""
            print(f"{verb} {item['dlq']} -> {item['to']}{partition}")
        for item in report.skipped:
            print(f"skipped {item['dlq']}: {item['why']}")
        references = f" ({report.references} references without the record)" if report.references else ""
        print(f"{len(report.sent)} {verb}, {len(report.skipped)} skipped{references}")
    return 0


def _register_trace(subparsers: Subparsers) -> None:
    trace = subparsers.add_parser(
        "trace",
        help="one source record's trees: who sent INIT, ACK, FAIL, RESET_TIMEOUT and when, the outcomes",
        description="Finds the record's roots in <topology>.roots (written by the spout with its INITs), then "
        "reads the ack, outcome, failures and dead-letter topics from a little before then (docs/operations.md).",
    )
    trace.add_argument("record", metavar="TOPIC:PARTITION@OFFSET", help="the source record")
    topology_arguments(trace)
    trace.add_argument(
        "--since",
        default=None,
        help="read the logs from this time (ms, ISO 8601 or an age such as 2h; default: a minute "
        "before the record was written)",
    )
    trace.add_argument("--timeout", type=float, default=120.0, help="give up reading after this long (s)")
    trace.add_argument(
        "--transactional-group",
        default=None,
        metavar="GROUP",
        help="the record was read by a transactional spout of this consumer group: its roots "
        "are derived, not looked up in the root index",
    )
    trace.add_argument("--json", action="store_true", help="print JSON")
    trace.set_defaults(handler=_trace)


def _trace(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import trace
    from reliable_kafka.ops.dlq import parse_time

    topic, partition, offset = trace.parse_coordinates(args.record)
    document = trace.trace(
        args.bootstrap_servers,
        args.topology,
        topic,
        partition,
        offset,
        kafka_config=client_settings(args),
        timeout=args.timeout,
        transactional_group=args.transactional_group,
        since_ms=parse_time(args.since) if args.since else None,
    )
    print(json.dumps(document, indent=2) if args.json else trace.render(document))
    return 0


def _register_failures(subparsers: Subparsers) -> None:
    failures = subparsers.add_parser(
        "failures",
        help="recent failures by source record, and how each record ended (retried and completed, "
        "dead-lettered, in flight)",
        description="Reads <topology>.failures since --since, finds each failed tree's source record and "
        "its later attempts in <topology>.roots, and their outcomes and dead letters (docs/operations.md).",
    )
    topology_arguments(failures)
    failures.add_argument(
        "--since", default="15m", help="from this time: ms, ISO 8601 (UTC) or an age such as 15m, 2h (default: 15m)"
    )
    failures.add_argument("--component", default=None, help="failed by a component whose name contains this")
    failures.add_argument("--limit", type=int, default=50, help="lines of text at most (default: 50)")
    failures.add_argument("--timeout", type=float, default=120.0, help="give up reading after this long (s)")
    failures.add_argument("--json", action="store_true", help="print JSON (every record)")
    failures.set_defaults(handler=_failures)


def _failures(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import trace
    from reliable_kafka.ops.dlq import parse_time

    document = trace.recent_failures(
        args.bootstrap_servers,
        args.topology,
        since_ms=parse_time(args.since),
        kafka_config=client_settings(args),
        component=args.component,
        timeout=args.timeout,
    )
    print(json.dumps(document, indent=2) if args.json else trace.render_failures(document, limit=args.limit))
    return 0
