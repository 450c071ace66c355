"""Arguments several commands share, defined once so that every command spells them the same way.

``--bootstrap-servers`` (``--bootstrap`` is the same), ``--topology``, ``--kafka-config KEY=VALUE``
and ``--command-config FILE`` for the Kafka clients, ``--message-timeout-ms``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

__all__ = [
    "Subparsers",
    "bootstrap_argument",
    "client_arguments",
    "topology_arguments",
    "replication_arguments",
    "message_timeout_argument",
    "metrics_host_argument",
    "client_settings",
    "consumer_config_argument",
    "command_config",
    "setup_logging",
]

# argparse has no public name for what add_subparsers() returns. The class is generic only in
# typeshed (subscripting it at run time raises TypeError), so mypy reads the subscripted alias.
if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    Subparsers = argparse._SubParsersAction


def bootstrap_argument(
    parser: argparse.ArgumentParser, *, required: bool = True, help: str = "Kafka bootstrap servers, host:port[,...]"
) -> None:
    """``--bootstrap-servers`` (Kafka's name; ``--bootstrap`` is the same) into ``args.bootstrap_servers``."""
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap_servers",
        required=required,
        metavar="HOST:PORT[,...]",
        help=help,
    )


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def client_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kafka-config KEY=VALUE`` (repeatable) and ``--command-config FILE``; read with :func:`client_settings`."""
    parser.add_argument(
        "--kafka-config",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka setting passed through (repeatable; e.g. security settings)",
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="Kafka client properties (Java names, as Kafka's tools take them), e.g. "
        "security.protocol, sasl.mechanism, sasl.jaas.config; translated for librdkafka",
    )


def consumer_config_argument(parser: argparse.ArgumentParser) -> None:
    """``--consumer-config KEY=VALUE`` (repeatable) into ``args.consumer_config``: for consumers only."""
    parser.add_argument(
        "--consumer-config",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka setting for this worker's consumers only (repeatable; e.g. "
        "session.timeout.ms, which producers would warn about)",
    )


def topology_arguments(parser: argparse.ArgumentParser) -> None:
    """``--topology``, ``--bootstrap-servers`` and the client settings: what reaches a topology's topics."""
    parser.add_argument("--topology", required=True, help="topology name (topic prefix)")
    bootstrap_argument(parser)
    client_arguments(parser)


def replication_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--replication-factor`` and ``--min-insync-replicas`` of topology topics (docs/operations.md)."""
    parser.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help=f"replication factor of {what} (default: min(3, brokers))",
    )
    parser.add_argument(
        "--min-insync-replicas",
        type=int,
        default=None,
        help=f"min.insync.replicas of {what} (default: min(2, replication factor))",
    )


def message_timeout_argument(parser: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """``--message-timeout-ms`` into ``args.message_timeout_ms``."""
    parser.add_argument(
        "--message-timeout-ms",
        dest="message_timeout_ms",
        type=int,
        default=default,
        metavar="MS",
        help=help,
    )


def metrics_host_argument(parser: argparse.ArgumentParser) -> None:
    """``--metrics-host`` into ``args.metrics_host``: the address ``/metrics`` binds (with ``--metrics-port``)."""
    parser.add_argument(
        "--metrics-host",
        default=None,
        metavar="ADDRESS",
        help="address /metrics listens on (default: $RK_METRICS_HOST, else 127.0.0.1; "
        "0.0.0.0 in a container, as the image sets)",
    )


def command_config(args: argparse.Namespace) -> dict[str, str]:
    """The ``--command-config`` file's settings, translated for librdkafka (``{}`` without one)."""
    from reliable_kafka.security import read_command_config

    return read_command_config(args.command_config) if args.command_config else {}


def client_settings(args: argparse.Namespace) -> dict[str, str]:
    """``kafka_config`` for the library: the ``--command-config`` file, then ``--kafka-config`` pairs over it."""
    return {**command_config(args), **dict(args.kafka_config)}


def setup_logging(level: str) -> None:
    import logging

    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
