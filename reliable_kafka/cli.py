"""The ``reliable-kafka`` command.

Each subcommand is a ``_register_<name>(subparsers)`` function that adds its parser and sets
``handler`` (a function of the parsed arguments returning the exit code); :data:`_COMMANDS`
lists them. Adding a subcommand means writing one such function and listing it there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from reliable_kafka.errors import ReliableKafkaError

__all__ = ["main", "build_parser"]

# argparse has no public name for what add_subparsers() returns.
_Subparsers = argparse._SubParsersAction


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ReliableKafkaError as exc:
        print(f"reliable-kafka: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliable-kafka",
        description="Storm's guaranteed message processing for Kafka and PySpark.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _COMMANDS:
        register(subparsers)
    return parser


# -- kafka: a local broker ---------------------------------------------------------------------


def _register_kafka(subparsers: _Subparsers) -> None:
    kafka = subparsers.add_parser(
        "kafka",
        help="run a local Kafka broker (embedded KRaft, started from Maven jars)",
        description="A local Kafka broker that keeps running after this command returns.",
    )
    actions = kafka.add_subparsers(dest="kafka_command", required=True, metavar="ACTION")

    start = actions.add_parser("up", help="start a broker in the background")
    start.add_argument(
        "--port", type=int, default=0,
        help="client port of the (first) broker (default: a free port)",
    )
    start.add_argument(
        "--data-dir", type=Path, default=None,
        help="directory for config, logs and data (default: a new temp dir)",
    )
    start.add_argument(
        "--keep-data", action="store_true",
        help="keep the data directory when the broker is stopped with `kafka down`",
    )
    start.add_argument(
        "--brokers", type=int, default=1,
        help="number of brokers; more than 1 starts a cluster (replication factor up to 3)",
    )
    start.add_argument(
        "--secure", action="store_true",
        help="SASL/SCRAM-SHA-256 and ACLs (StandardAuthorizer); users admin, spout, bolt, acker, spark, "
        "outsider with client properties in the data directory",
    )
    start.set_defaults(handler=_kafka_up)

    show = actions.add_parser("status", help="say whether the broker runs, and where")
    show.set_defaults(handler=_kafka_status)

    stop = actions.add_parser("down", help="stop the broker and remove its data")
    stop.add_argument(
        "--timeout", type=float, default=30.0,
        help="seconds to wait for a clean shutdown before killing (default: 30)",
    )
    stop.set_defaults(handler=_kafka_down)


def _kafka_up(args: argparse.Namespace) -> int:
    from reliable_kafka.broker import daemon

    current, started = daemon.up(
        port=args.port, data_dir=args.data_dir, keep_data=args.keep_data, brokers=args.brokers,
        secure=args.secure,
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


# -- acker: one acker worker process ------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _logging(level: str) -> None:
    import logging

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)


def _add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", type=Path, default=None, metavar="FILE",
                        help="Kafka client properties (Java names, as Kafka's tools take them), e.g. "
                        "security.protocol, sasl.mechanism, sasl.jaas.config; translated for librdkafka")


def _command_config(args: argparse.Namespace) -> dict[str, str]:
    from reliable_kafka.security import read_command_config

    return read_command_config(args.command_config) if args.command_config else {}


def _register_acker(subparsers: _Subparsers) -> None:
    acker = subparsers.add_parser(
        "acker",
        help="run an acker worker (a consumer-group member over <topology>.acks)",
        description="Folds ack events per root and publishes outcomes; stops cleanly on SIGTERM. "
        "Run several with the same --topology to share the ack partitions.",
    )
    acker.add_argument("--topology", required=True, help="topology name (topic prefix)")
    acker.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, host:port[,...]")
    acker.add_argument("--ackers", type=int, default=1,
                       help="ack topic partitions when this worker creates the topics (default: 1)")
    acker.add_argument("--timeout-ms", type=int, default=30_000, help="message timeout (default: 30000)")
    acker.add_argument("--timeout-buckets", type=int, default=4,
                       help="rotating timeout buckets; expiry comes within timeout*(1+1/buckets) (default: 4)")
    acker.add_argument("--commit-interval-ms", type=int, default=1000,
                       help="how often the low point is committed (default: 1000)")
    acker.add_argument("--group", default=None, help="consumer group (default: <topology>.ackers)")
    acker.add_argument("--name", default=None,
                       help="stable worker name: logs, and static group membership across restarts "
                       "(default: random, dynamic membership)")
    acker.add_argument("--replication-factor", type=int, default=1,
                       help="replication factor of topics this worker creates (default: 1)")
    acker.add_argument("--kafka-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="librdkafka setting passed through (repeatable)")
    _add_command_config(acker)
    acker.add_argument("--log-level", default="info", help="logging level (default: info)")
    acker.add_argument("--metrics-port", type=int, default=None,
                       help="serve Prometheus /metrics on this port (docs/operations.md; default: off)")
    acker.set_defaults(handler=_acker)


def _acker(args: argparse.Namespace) -> int:
    from reliable_kafka.acker import AckerWorker

    _logging(args.log_level)
    worker = AckerWorker(
        topology=args.topology, bootstrap_servers=args.bootstrap, ackers=args.ackers,
        timeout_ms=args.timeout_ms, timeout_buckets=args.timeout_buckets,
        commit_interval_ms=args.commit_interval_ms, group_id=args.group, name=args.name,
        replication_factor=args.replication_factor,
        kafka_config={**_command_config(args), **dict(args.kafka_config)},
        metrics_port=args.metrics_port,
    )
    worker.run(handle_signals=True)
    return 0


# -- demo: the main job ---------------------------------------------------------------------------


def _register_demo(subparsers: _Subparsers) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run the demo pipeline on an embedded Kafka broker and verify its summary",
        description="Embedded broker, acker workers, a word-count job reading `sentences`, a downstream "
        "bolt that fails a few percent of tuples; live progress, then a summary whose figures are "
        "checked (lost = 0, committed offsets = end of topic). Exits 1 if a check fails.",
    )
    demo.add_argument("--sentences", type=int, default=20_000, help="sentences to generate (default: 20000)")
    demo.add_argument("--fail-rate", type=float, default=0.03,
                      help="share of word tuples the downstream bolt fails (default: 0.03)")
    demo.add_argument("--engine", choices=["spark", "python"], default="spark",
                      help="word-count job: PySpark Structured Streaming or a Python bolt (default: spark)")
    demo.add_argument("--bootstrap", default=None, help="use this Kafka instead of an embedded broker")
    demo.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    demo.add_argument("--log-level", default="error", help="logging level (default: error)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from reliable_kafka import demo

    _logging(args.log_level)
    summary = demo.run(sentences=args.sentences, fail_rate=args.fail_rate, engine=args.engine,
                       bootstrap=args.bootstrap, timeout_s=args.timeout)
    return 0 if summary.ok else 1


# -- chaos: the fault-injection harness -----------------------------------------------------------


def _register_chaos(subparsers: _Subparsers) -> None:
    chaos = subparsers.add_parser(
        "chaos",
        help="fault-injection harness: kill processes and brokers at random, then check the invariants",
        description="Runs spouts, bolts and acker workers as separate processes on an embedded broker "
        "(or a 3-broker cluster), SIGKILLs and restarts them at random moments and restarts brokers; "
        "then checks from the topics: no record lost, commits never passed an incomplete record. "
        "Exits 1 if a check fails.",
    )
    chaos.add_argument("--records", type=int, default=50_000, help="source records (default: 50000)")
    chaos.add_argument("--seconds", type=float, default=150.0,
                       help="the records are written (and processes killed) over this long (default: 150)")
    chaos.add_argument("--brokers", type=int, default=1, choices=[1, 3],
                       help="1: restart the broker; 3: a cluster, kill one broker at a time (default: 1)")
    chaos.add_argument("--broker-restarts", type=int, default=2, help="broker faults (default: 2)")
    chaos.add_argument("--transactional", action="store_true",
                       help="bolts in Kafka transactions; checks that the sink holds every effect once")
    chaos.add_argument("--spare-spouts", action="store_true", help="do not kill spout processes")
    chaos.add_argument("--spark", action="store_true",
                       help="run the split stage as a PySpark Structured Streaming job (killed like the rest)")
    chaos.add_argument("--timeout-ms", type=int, default=None,
                       help="message timeout (default: 10000; 30000 with --spark; 120000 with --transactional, "
                            "above the longest stall of a transactional worker, since a timeout replays)")
    chaos.add_argument("--seed", type=int, default=1, help="random seed for the fault schedule (default: 1)")
    chaos.add_argument("--settle", type=float, default=None,
                       help="seconds the topology may take to finish after the faults (default: 240; 480 "
                            "with --spark, whose restarted driver catches up slowly on 2 cores)")
    chaos.set_defaults(handler=_chaos)


def _chaos(args: argparse.Namespace) -> int:
    from reliable_kafka.chaos.harness import ChaosConfig, run

    report = run(ChaosConfig(
        records=args.records, produce_seconds=args.seconds, brokers=args.brokers,
        broker_restarts=args.broker_restarts, transactional=args.transactional,
        kill_spouts=not args.spare_spouts, spark=args.spark, seed=args.seed,
        timeout_ms=args.timeout_ms or (120_000 if args.transactional else 30_000 if args.spark else 10_000),
        settle_timeout=args.settle or (480.0 if args.spark else 240.0),
    ))
    return 0 if report.ok else 1


# -- status and ui: what a running topology is doing ------------------------------------------------


def _topology_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", required=True, help="topology name (topic prefix)")
    parser.add_argument("--bootstrap-servers", "--bootstrap", dest="bootstrap_servers", required=True,
                        help="Kafka bootstrap servers, host:port[,...]")
    parser.add_argument("--kafka-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="librdkafka setting passed through (repeatable; e.g. security settings)")


def _register_status(subparsers: _Subparsers) -> None:
    status = subparsers.add_parser(
        "status",
        help="what a running topology is doing: components, source partitions, verdicts",
        description="Reads <topology>.status (each component's latest snapshot), the source partitions' "
        "committed and end offsets, dead-letter and quarantine counts, and judges each component and "
        "partition OK / WARN / STALL / DOWN over its last minute (docs/operations.md). "
        "Exit code: 0 when all is OK, 1 for an error, 2 when something is not OK.",
    )
    _topology_arguments(status)
    status.add_argument("--json", action="store_true",
                        help="print the report as JSON (stable schema, docs/operations.md)")
    status.add_argument("--watch", type=float, nargs="?", const=5.0, default=None, metavar="SECONDS",
                        help="print again every SECONDS (default 5) until interrupted")
    status.add_argument("--all", action="store_true",
                        help="also list components stopped or silent for more than an hour")
    status.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    import json
    import time

    from reliable_kafka.ops.status import build_report, render

    while True:
        report = build_report(args.bootstrap_servers, args.topology, kafka_config=dict(args.kafka_config),
                              include_all=args.all)
        if args.json:
            print(json.dumps(report, indent=None if args.watch else 2), flush=True)
        else:
            if args.watch and sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")
            print(render(report), flush=True)
        if not args.watch:
            return 0 if report["verdict"] == "OK" else 2
        time.sleep(args.watch)


def _register_ui(subparsers: _Subparsers) -> None:
    ui = subparsers.add_parser(
        "ui",
        help="serve a live, read-only page of a running topology (components, partitions, charts)",
        description="A small HTTP server: / is the page (no external assets), /api/status the JSON "
        "report of `status --json`. Stops on Ctrl-C.",
    )
    _topology_arguments(ui)
    ui.add_argument("--port", type=int, default=8080, help="HTTP port (default: 8080; 0: any free port)")
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    ui.set_defaults(handler=_ui)


def _ui(args: argparse.Namespace) -> int:
    from reliable_kafka.ops.ui import StatusPage

    page = StatusPage(bootstrap_servers=args.bootstrap_servers, topology=args.topology,
                      kafka_config=dict(args.kafka_config), host=args.host, port=args.port)
    print(f"reliable-kafka ui: topology {args.topology} at {page.url} (Ctrl-C stops)", flush=True)
    page.serve_forever()
    return 0


# -- spark-submit: spark-submit with the Kafka connector ------------------------------------------


def _register_spark_submit(subparsers: _Subparsers) -> None:
    # prefix_chars "+": every argument, --master included, is spark-submit's, passed on as given.
    submit = subparsers.add_parser(
        "spark-submit", prefix_chars="+", add_help=False,
        help="spark-submit with Spark's Kafka connector added to --jars (from the jar cache)",
        description="Runs pyspark's spark-submit (or $SPARK_HOME's) with the connector jars added to "
        "--jars; every argument is spark-submit's. `reliable-kafka spark-submit ++print-jars` prints "
        "the jars (comma-separated) instead.",
    )
    submit.add_argument("++print-jars", dest="print_jars", action="store_true",
                        help="print the connector jars, comma-separated, and exit")
    submit.add_argument("submit_args", nargs=argparse.REMAINDER, metavar="ARGS")
    submit.set_defaults(handler=_spark_submit)


def _spark_submit(args: argparse.Namespace) -> int:
    import os

    from reliable_kafka.spark.session import connector_jars, spark_submit_command

    jars = connector_jars()
    if args.print_jars:
        print(",".join(str(jar) for jar in jars))
        return 0
    command = spark_submit_command(list(args.submit_args), jars=jars)
    # Python workers default to this interpreter, which has reliable_kafka installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.execv(command[0], command)
    return 1  # not reached


# -- lag: a spout group's true lag ----------------------------------------------------------------


def _register_lag(subparsers: _Subparsers) -> None:
    lag = subparsers.add_parser(
        "lag",
        help="a spout's consumer-group lag, minus the records done above its commit point",
        description="Kafka's group tool counts every record above a spout's commit point as lag, "
        "although the spout recorded the ones already done in its commit metadata; this shows both "
        "figures per partition. Reads only (joins no group).",
    )
    lag.add_argument("--group", required=True, help="the spout's consumer group (a Spark job: its group_id)")
    lag.add_argument("--topic", required=True, help="a source topic of the spout")
    lag.add_argument("--bootstrap-servers", "--bootstrap", dest="bootstrap", required=True,
                     help="Kafka bootstrap servers, host:port[,...]")
    _add_command_config(lag)
    lag.set_defaults(handler=_lag)


def _lag(args: argparse.Namespace) -> int:
    from reliable_kafka.offsets import true_lag

    rows = true_lag(args.bootstrap, args.group, args.topic, kafka_config=_command_config(args))
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
    print(f"{'total':>9} {'':>12} {'':>12} {sum(r.done_above or 0 for r in rows):>10} "
          f"{sum(r.kafka_lag for r in rows):>10} {sum(r.lag for r in rows):>10}")
    return 0


# -- dlq and trace: acting on failures ----------------------------------------------------------------


def _dlq_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", default=None, help="reason contains this text (any case)")
    parser.add_argument("--source-topic", default=None, help="parked from this source topic")
    parser.add_argument("--source-partition", type=int, default=None, help="parked from this source partition")
    parser.add_argument("--component", default=None, help="failed or parked by a component whose name contains this")
    parser.add_argument("--since", default=None,
                        help="parked at or after: ms since the epoch, ISO 8601 (UTC) or an age (15m, 2h, 1d)")
    parser.add_argument("--until", default=None, help="parked at or before (same forms as --since)")


def _register_dlq(subparsers: _Subparsers) -> None:
    dlq = subparsers.add_parser(
        "dlq",
        help="list, show and replay the dead-letter topic <topology>.dlq",
        description="Dead letters carry why they were parked (rk-parked, rk-reason, rk-attempts headers). "
        "`replay` sends them back once: what was replayed is recorded in <topology>.dlq-replayed in the same "
        "Kafka transaction as the copy (docs/operations.md).",
    )
    actions = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one line per dead letter, filtered")
    _topology_arguments(listing)
    _dlq_filters(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(handler=_dlq_list)
    show = actions.add_parser("show", help="one dead letter with its attempts and failure records")
    _topology_arguments(show)
    show.add_argument("offset", type=int, help="offset in the DLQ")
    show.add_argument("--partition", type=int, default=0, help="DLQ partition (default: 0)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_dlq_show)
    again = actions.add_parser("replay", help="send dead letters back to their source (or --to), once each")
    _topology_arguments(again)
    _dlq_filters(again)
    again.add_argument("--offset", type=int, action="append", default=[], metavar="OFFSET",
                       help="replay this DLQ offset (repeatable; partition from --partition)")
    again.add_argument("--partition", type=int, default=0, help="DLQ partition of --offset (default: 0)")
    again.add_argument("--all", action="store_true", help="replay every dead letter that matches (needed "
                       "when neither --offset nor a filter is given)")
    again.add_argument("--to", default=None, help="send to this topic instead of each record's source topic")
    again.add_argument("--rate", type=float, default=100.0, help="records per second at most (default: 100)")
    again.add_argument("--dry-run", action="store_true", help="say what would be sent; send nothing")
    again.add_argument("--json", action="store_true", help="print the report as JSON")
    again.set_defaults(handler=_dlq_replay)


def _dlq_selected(args: argparse.Namespace):
    from reliable_kafka.ops import dlq

    letters = dlq.read_dead_letters(args.bootstrap_servers, args.topology, kafka_config=dict(args.kafka_config))
    offsets = [(args.partition, o) for o in getattr(args, "offset", None) or []] or None
    return dlq.select(
        letters, reason=args.reason, source_topic=args.source_topic, source_partition=args.source_partition,
        component=args.component, since_ms=dlq.parse_time(args.since) if args.since else None,
        until_ms=dlq.parse_time(args.until) if args.until else None, offsets=offsets)


def _dlq_list(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import dlq

    letters = _dlq_selected(args)
    print(json.dumps([d.as_json() for d in letters], indent=2) if args.json else dlq.render_list(letters))
    return 0


def _dlq_show(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import dlq, trace

    letters = dlq.read_dead_letters(args.bootstrap_servers, args.topology, kafka_config=dict(args.kafka_config))
    found = [d for d in letters if (d.partition, d.offset) == (args.partition, args.offset)]
    if not found:
        raise ReliableKafkaError(f"no dead letter at {args.topology}.dlq[{args.partition}]@{args.offset}; "
                                 f"see `reliable-kafka dlq list --topology {args.topology}`")
    marks = dlq.replayed(args.bootstrap_servers, args.topology, kafka_config=dict(args.kafka_config))
    # where each timed-out attempt stopped: its tree's last ACK, read back from the ack log
    timed_out = {a.root: a.at_ms for a in found[0].attempts if a.root is not None and a.outcome != "FAILED"}
    stopped = trace.last_acks(args.bootstrap_servers, args.topology, timed_out, kafka_config=dict(args.kafka_config))
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

    filtered = args.offset or any(getattr(args, n) is not None for n in
                                  ("reason", "source_topic", "source_partition", "component", "since", "until"))
    if not filtered and not args.all:
        raise ReliableKafkaError("dlq replay: choose what to replay (--offset or a filter), or say --all")
    report = dlq.replay(args.bootstrap_servers, args.topology, _dlq_selected(args), to=args.to, rate=args.rate,
                        dry_run=args.dry_run, kafka_config=dict(args.kafka_config))
    if args.json:
        print(json.dumps(report.__dict__, indent=2))
    else:
        verb = "would send" if report.dry_run else "sent"
        for item in report.sent:
            partition = f"[{item['partition']}]" if item["partition"] is not None else ""
            print(f"{verb} {item['dlq']} -> {item['to']}{partition}")
        for item in report.skipped:
            print(f"skipped {item['dlq']}: {item['why']}")
        print(f"{len(report.sent)} {verb}, {len(report.skipped)} skipped")
    return 0


def _register_trace(subparsers: _Subparsers) -> None:
    trace = subparsers.add_parser(
        "trace",
        help="one source record's trees: who sent INIT, ACK, FAIL, RESET_TIMEOUT and when, the outcomes",
        description="Finds the record's roots in <topology>.roots (written by the spout with its INITs), then "
        "reads the ack, outcome, failures and dead-letter topics from a little before then (docs/operations.md).",
    )
    trace.add_argument("record", metavar="TOPIC:PARTITION@OFFSET", help="the source record")
    _topology_arguments(trace)
    trace.add_argument("--since", default=None,
                       help="read the logs from this time (ms, ISO 8601 or an age such as 2h; default: a minute "
                       "before the record was written)")
    trace.add_argument("--timeout", type=float, default=120.0, help="give up reading after this long (s)")
    trace.add_argument("--transactional-group", default=None, metavar="GROUP",
                       help="the record was read by a transactional spout of this consumer group: its roots "
                       "are derived, not looked up in the root index")
    trace.add_argument("--json", action="store_true", help="print JSON")
    trace.set_defaults(handler=_trace)


def _trace(args: argparse.Namespace) -> int:
    import json

    from reliable_kafka.ops import trace
    from reliable_kafka.ops.dlq import parse_time

    topic, partition, offset = trace.parse_coordinates(args.record)
    document = trace.trace(args.bootstrap_servers, args.topology, topic, partition, offset,
                           kafka_config=dict(args.kafka_config), timeout=args.timeout,
                           transactional_group=args.transactional_group,
                           since_ms=parse_time(args.since) if args.since else None)
    print(json.dumps(document, indent=2) if args.json else trace.render(document))
    return 0


_COMMANDS: list[Callable[[_Subparsers], None]] = [
    _register_kafka,
    _register_acker,
    _register_demo,
    _register_chaos,
    _register_status,
    _register_ui,
    _register_spark_submit,
    _register_lag,
    _register_dlq,
    _register_trace,
]


if __name__ == "__main__":
    sys.exit(main())
