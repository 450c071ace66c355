"""``acls`` and ``topics``: a secured deployment (docs/security.md).

``acls`` prints, or applies, exactly the ACLs a role of a topology needs; ``topics`` creates a
topology's topics as an administrator, for ackers run with ``--no-create-topics``.
"""

from __future__ import annotations

import argparse

from reliable_kafka.cli.arguments import (
    Subparsers,
    bootstrap_argument,
    client_arguments,
    client_settings,
    replication_arguments,
    topology_arguments,
)

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    acls = subparsers.add_parser(
        "acls",
        help="the Kafka ACLs a role of a topology needs (print, or --apply)",
        description="Prints, one per line, exactly the ACLs a spout, bolt, Spark job or acker of the "
        "topology needs, with why (docs/security.md); --apply creates them through the admin API "
        "and waits until the broker reports them.",
    )
    acls.add_argument("--topology", required=True, help="topology name (topic prefix)")
    acls.add_argument("--role", required=True, choices=["spout", "bolt", "spark", "acker"])
    acls.add_argument("--principal", required=True, help="the role's principal, e.g. User:wordcount-bolt")
    acls.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="TOPIC",
        help="a topic the role reads (spout, bolt, spark; repeatable)",
    )
    acls.add_argument(
        "--output", action="append", default=[], metavar="TOPIC", help="a topic the role emits to (repeatable)"
    )
    acls.add_argument("--group", default=None, help="the role's consumer group (an acker's default: <topology>.ackers)")
    acls.add_argument(
        "--transactional-id",
        default=None,
        metavar="ID",
        help="a transactional spout's or bolt's transactional.id (<group>.<name>)",
    )
    acls.add_argument(
        "--no-root-index",
        dest="root_index",
        action="store_false",
        help="a spout run with root_index=False (it writes no <topology>.roots)",
    )
    acls.add_argument(
        "--create-topics",
        action="store_true",
        help="an acker that creates the topology's topics (default: an administrator "
        "creates them with `reliable-kafka topics`)",
    )
    acls.add_argument("--apply", action="store_true", help="create the ACLs (needs --bootstrap-servers)")
    bootstrap_argument(acls, required=False, help="Kafka bootstrap servers, host:port[,...] (with --apply)")
    client_arguments(acls)
    acls.set_defaults(handler=_acls)

    topics = subparsers.add_parser(
        "topics",
        help="create a topology's topics (as an administrator, for ackers run without --create-topics)",
        description="Creates the missing topics of the topology (acks with --ackers partitions, outcomes, "
        "dlq, quarantine, failures, roots, status) and checks the partition counts of existing ones.",
    )
    topology_arguments(topics)
    topics.add_argument("--ackers", type=int, default=1, help="ack topic partitions (default: 1)")
    replication_arguments(topics, "the topics created")
    topics.set_defaults(handler=_topics)


def _acls(args: argparse.Namespace) -> int:
    from reliable_kafka.acls import role_acls

    wanted = role_acls(
        args.role,
        args.topology,
        principal=args.principal,
        source_topics=args.source,
        output_topics=args.output,
        group=args.group,
        transactional_id=args.transactional_id,
        root_index=args.root_index,
        create_topics=args.create_topics,
    )
    for acl in wanted:
        print(acl)
    if args.apply:
        from reliable_kafka.errors import ConfigError
        from reliable_kafka.kafka.admin import admin_client
        from reliable_kafka.kafka.authorization import apply_acls

        if not args.bootstrap_servers:
            raise ConfigError(
                "acls --apply needs --bootstrap-servers (and --command-config of a principal "
                "allowed to ALTER the cluster)"
            )
        apply_acls(admin_client(args.bootstrap_servers, client_settings(args), component="reliable-kafka acls"), wanted)
        print(f"applied {len(wanted)} ACLs for {args.principal}")
    return 0


def _topics(args: argparse.Namespace) -> int:
    from reliable_kafka.kafka.admin import admin_client, ensure_topics
    from reliable_kafka.topology import TopologyTopics

    topics = TopologyTopics(args.topology, ackers=args.ackers)
    admin = admin_client(args.bootstrap_servers, client_settings(args), component="reliable-kafka topics")
    ensure_topics(
        admin, topics, replication_factor=args.replication_factor, min_insync_replicas=args.min_insync_replicas
    )
    print(f"topology {args.topology}: {', '.join([*topics.shapes(), topics.status])} ready")
    return 0
