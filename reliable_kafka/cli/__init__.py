"""The ``reliable-kafka`` command: one module per command group, each with a ``register(subparsers)``.

- :mod:`~reliable_kafka.cli.broker`: ``kafka up|status|down``, a local broker;
- :mod:`~reliable_kafka.cli.acker`: ``acker``, one acker worker;
- :mod:`~reliable_kafka.cli.demo`: ``demo``, ``chaos`` and ``sim``, runs that check their own results;
- :mod:`~reliable_kafka.cli.status`: ``status``, ``ui`` and ``lag``, what a topology is doing;
- :mod:`~reliable_kafka.cli.failures`: ``dlq`` and ``trace``, acting on failures;
- :mod:`~reliable_kafka.cli.spark`: ``spark-submit`` with the Kafka connector;
- :mod:`~reliable_kafka.cli.acls`: ``acls`` and ``topics``, a secured deployment;
- :mod:`~reliable_kafka.cli.arguments`: the arguments several commands share (``--bootstrap-servers``,
  ``--topology``, ``--kafka-config``, ``--command-config``, ``--message-timeout-ms``), defined once.

``register`` adds the group's parsers and sets ``handler`` (a function of the parsed arguments
returning the exit code) on each. Adding a command group means writing such a module and listing
its ``register`` in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from reliable_kafka.cli import acker, acls, broker, demo, failures, spark, status
from reliable_kafka.cli.arguments import Subparsers
from reliable_kafka.cli.arguments import command_config as _command_config  # noqa: F401  (older import path)
from reliable_kafka.errors import ReliableKafkaError
from reliable_kafka.version import __version__

__all__ = ["main", "build_parser", "COMMANDS"]

COMMANDS: list[Callable[[Subparsers], None]] = [
    broker.register,
    acker.register,
    demo.register,
    status.register,
    failures.register,
    spark.register,
    acls.register,
]


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
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser
