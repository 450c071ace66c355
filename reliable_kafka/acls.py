"""The Kafka ACLs each role of a topology needs, and no more (docs/design.md section 10).

:data:`TABLE` is the one statement of what a spout, a bolt, a Spark job and an acker do on the
broker: one row per permission, with the reason. :func:`role_acls` resolves it for a topology,
a principal and the role's own names (source and output topics, consumer group, transactional
id); ``reliable-kafka acls`` prints or applies the result and docs/security.md shows
:func:`markdown_table` (a unit test keeps the two the same).

Kafka's implications are relied on, not repeated: READ and WRITE on a topic imply DESCRIBE (CREATE
does not), READ on a group implies DESCRIBE, and WRITE on any topic implies IDEMPOTENT_WRITE on the
cluster (Kafka 3.0+, KIP-679), which every producer of the library needs (they are idempotent).
Names are those of confluent-kafka's ``ResourceType``, ``AclOperation`` and ``ResourcePatternType``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from reliable_kafka.errors import ConfigError
from reliable_kafka.topology import TopologyTopics

__all__ = ["Acl", "Row", "TABLE", "ROLES", "role_acls", "markdown_table", "needed_on"]

ROLES = ("spout", "bolt", "spark", "acker")

# Symbolic names in the table: the role's own, or a topology topic (a TopologyTopics property).
SOURCE, OUTPUT, GROUP, TRANSACTIONAL_ID = "SOURCE", "OUTPUT", "GROUP", "TRANSACTIONAL_ID"
_TOPOLOGY_TOPICS = ("acks", "outcomes", "dlq", "quarantine", "failures", "roots", "status")
# Internal consumer groups: their consumers assign partitions and never commit, but librdkafka
# still looks up the coordinator of any group.id it is given (FindCoordinator: DESCRIBE).
_GROUPS = {
    "outcome-reader": "{topology}.outcome-reader",
    "failure-reader": "{topology}.failure-reader",
    "refetch": "{group}.refetch",
    "rk-fetch": "{group}.rk-fetch",
}


@dataclass(frozen=True)
class Row:
    """One permission of a role: ``operation`` on ``resource_type`` ``name`` (symbolic), and why.

    ``when`` names the option the row depends on: "transactional" (a transactional id was given),
    "root_index" (on unless turned off), "create_topics" (off unless asked for).
    """

    resource_type: str
    name: str
    operation: str
    why: str
    when: str | None = None


def _rows(*rows: tuple[str, ...]) -> tuple[Row, ...]:
    return tuple(Row(*row) for row in rows)


_STATUS = ("TOPIC", "status", "WRITE", "publish status snapshots (`reliable-kafka status`)")
_TRANSACTIONS = (
    "TRANSACTIONAL_ID",
    TRANSACTIONAL_ID,
    "WRITE",
    "commit outputs, ack entries and offsets in one transaction",
    "transactional",
)

TABLE: dict[str, tuple[Row, ...]] = {
    "spout": _rows(
        ("TOPIC", SOURCE, "READ", "read the source records"),
        ("GROUP", GROUP, "READ", "join the consumer group, commit the commit point"),
        ("TOPIC", OUTPUT, "WRITE", "emit the trees' first tuples"),
        ("TOPIC", "acks", "WRITE", "send INIT entries for the roots it owns"),
        ("TOPIC", "outcomes", "READ", "read the outcomes of its roots"),
        ("GROUP", "outcome-reader", "DESCRIBE", "the outcome reader's group (assigns, never commits)"),
        ("TOPIC", "dlq", "WRITE", "park records that ran out of retries"),
        ("TOPIC", "quarantine", "WRITE", "copy outcome records that do not decode"),
        ("TOPIC", "failures", "READ", "read why its trees failed (on failures only)"),
        ("GROUP", "failure-reader", "DESCRIBE", "the failure reader's group (assigns, never commits)"),
        ("TOPIC", "roots", "WRITE", "index (offset, root) pairs for `reliable-kafka trace`", "root_index"),
        ("GROUP", "refetch", "DESCRIBE", "re-read in-flight records after a takeover", "transactional"),
        _TRANSACTIONS,
        _STATUS,
    ),
    "bolt": _rows(
        ("TOPIC", SOURCE, "READ", "read its input tuples"),
        ("GROUP", GROUP, "READ", "join the consumer group, commit its input offsets"),
        ("TOPIC", OUTPUT, "WRITE", "emit tuples"),
        ("TOPIC", "acks", "WRITE", "send ACK, FAIL and RESET_TIMEOUT entries"),
        ("TOPIC", "quarantine", "WRITE", "copy input tuples whose anchors do not decode"),
        ("TOPIC", "failures", "WRITE", "record why a tuple failed"),
        _TRANSACTIONS,
        _STATUS,
    ),
    "spark": _rows(
        ("TOPIC", SOURCE, "READ", "Spark's Kafka source reads the source records"),
        ("GROUP", GROUP, "READ", "commit the commit point (lag tools see the job's progress)"),
        ("GROUP", "rk-fetch", "DESCRIBE", "the redelivery and end-offset readers' group (assign only)"),
        ("TOPIC", OUTPUT, "WRITE", "Spark's Kafka sink writes the outputs"),
        ("TOPIC", "acks", "WRITE", "send INIT, ACK and FAIL entries (from the driver)"),
        ("TOPIC", "outcomes", "READ", "read the outcomes of its roots"),
        ("GROUP", "outcome-reader", "DESCRIBE", "the outcome reader's group (assigns, never commits)"),
        ("TOPIC", "dlq", "WRITE", "park records that ran out of retries"),
        ("TOPIC", "quarantine", "WRITE", "copy outcome records that do not decode"),
        ("TOPIC", "failures", "WRITE", "record why rows failed (rk_fail)"),
        ("TOPIC", "failures", "READ", "read why its trees failed (on failures only)"),
        ("GROUP", "failure-reader", "DESCRIBE", "the failure reader's group (assigns, never commits)"),
        ("TOPIC", "roots", "WRITE", "index (offset, root) pairs for `reliable-kafka trace`", "root_index"),
        _STATUS,
    ),
    "acker": _rows(
        ("TOPIC", "acks", "READ", "fold ack entries"),
        ("TOPIC", "acks", "DESCRIBE_CONFIGS", "warn when the ack topic keeps CreateTime stamps"),
        ("GROUP", GROUP, "READ", "share the ack partitions, commit the low points"),
        ("TOPIC", "outcomes", "WRITE", "publish outcomes to the owning spouts"),
        ("TOPIC", "quarantine", "WRITE", "copy ack records that do not decode"),
        _STATUS,
        *(
            ("TOPIC", topic, "CREATE", "create the topology's topics", "create_topics")
            for topic in ("acks", "outcomes", "dlq", "quarantine", "failures", "roots", "status")
        ),
        *(
            ("TOPIC", topic, "DESCRIBE", "see whether the topology's topics exist", "create_topics")
            for topic in ("dlq", "failures", "roots")
        ),
    ),
}
"""Role -> permissions. Symbolic names: SOURCE, OUTPUT (each of the role's topics), GROUP (its
consumer group), TRANSACTIONAL_ID, a topology topic (``acks`` is ``<topology>.acks``), or an
internal group (``outcome-reader`` is ``<topology>.outcome-reader``, ``rk-fetch`` is
``<group>.rk-fetch``)."""


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW binding: ``principal`` may ``operation`` on ``resource_type`` ``name``."""

    resource_type: str
    name: str
    operation: str
    principal: str
    pattern_type: str = "LITERAL"
    host: str = "*"
    why: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"ALLOW {self.principal:<16} {self.operation:<16} {self.resource_type:<16} {self.name}  # {self.why}"


def role_acls(
    role: str,
    topology: str,
    *,
    principal: str,
    source_topics: list[str] | tuple[str, ...] = (),
    output_topics: list[str] | tuple[str, ...] = (),
    group: str | None = None,
    transactional_id: str | None = None,
    root_index: bool = True,
    create_topics: bool = False,
) -> list[Acl]:
    """The ACLs ``principal`` needs to run ``role`` in ``topology``, sorted, without duplicates.

    Raises :class:`ConfigError` when the role needs a name that is missing (a spout without
    source topics or group) or is given one it never uses (an acker with output topics).
    """
    if role not in TABLE:
        raise ConfigError(f"acls: unknown role {role!r}; roles: {', '.join(ROLES)}")
    if not principal or ":" not in principal:
        raise ConfigError(f"acls: principal {principal!r} must be TYPE:NAME, e.g. User:wordcount-bolt")
    topics = TopologyTopics(topology)
    rows = TABLE[role]
    # a transactional spout derives its roots: `trace` needs no index of them
    options = {
        "transactional": transactional_id is not None,
        "root_index": root_index and transactional_id is None,
        "create_topics": create_topics,
    }
    names = {SOURCE: list(source_topics), OUTPUT: list(output_topics)}
    used = {row.name for row in rows}
    if role == "acker":
        group = group or f"{topology}.ackers"  # AckerWorker's default
    for given, what, flag in (
        (source_topics, SOURCE, "--source"),
        (output_topics, OUTPUT, "--output"),
        (transactional_id, TRANSACTIONAL_ID, "--transactional-id"),
    ):
        if given and what not in used:
            raise ConfigError(f"acls: {flag} is not an option of the {role} role")
    if role != "acker" and not source_topics:
        raise ConfigError(f"acls: a {role} needs its source topics (--source)")
    if group is None:
        raise ConfigError(f"acls: a {role} needs its consumer group (--group)")
    if create_topics and role != "acker":
        raise ConfigError("acls: only an acker creates the topology's topics (--create-topics)")
    acls: set[Acl] = set()
    for row in rows:
        if row.when is not None and not options[row.when]:
            continue
        if row.name in names:
            resolved = names[row.name]
        elif row.name == GROUP:
            resolved = [group]
        elif row.name == TRANSACTIONAL_ID:
            resolved = [cast(str, transactional_id)]  # its rows apply only when one is given
        elif row.name in _GROUPS:
            resolved = [_GROUPS[row.name].format(topology=topology, group=group)]
        else:
            resolved = [getattr(topics, row.name)]
        acls.update(Acl(row.resource_type, name, row.operation, principal, why=row.why) for name in resolved)
    return sorted(acls)


def _symbol(name: str) -> str:
    if name in _TOPOLOGY_TOPICS:
        return f"`<topology>.{name}`"
    if name in _GROUPS:
        return "`" + _GROUPS[name].format(topology="<topology>", group="<group>") + "`"
    return {
        SOURCE: "`<source>` (each)",
        OUTPUT: "`<output>` (each)",
        GROUP: "`<group>`",
        TRANSACTIONAL_ID: "`<transactional.id>`",
    }[name]


def markdown_table() -> str:
    """The role table as Markdown (docs/security.md holds it verbatim)."""
    lines = ["| role | operation | resource | why |", "|---|---|---|---|"]
    for role in ROLES:
        for row in TABLE[role]:
            when = {
                "transactional": " (transactional only)",
                "root_index": " (unless root_index=False)",
                "create_topics": " (`--create-topics` only)",
            }.get(row.when or "", "")
            lines.append(
                f"| {role} | {row.operation} | {row.resource_type.lower().replace('_', ' ')} "
                f"{_symbol(row.name)} | {row.why}{when} |"
            )
    return "\n".join(lines) + "\n"


def needed_on(topic: str, *, component: str, principal: str) -> str | None:
    """What to grant when ``component`` was refused DESCRIBE on ``topic``, a topology topic
    (``<topology>.failures``...): the operations its role needs there (READ and WRITE imply
    DESCRIBE, so granting DESCRIBE alone leaves the next write refused), and the command that
    prints, or applies, every ACL of the role. The role is read from the component's name
    (``bolt-1a2b``: the default names); a name that says none lists each role's. None when
    ``topic`` is not a topology topic."""
    topology, _, suffix = topic.rpartition(".")
    if not topology or suffix not in _TOPOLOGY_TOPICS:
        return None
    needs = {
        role: sorted({row.operation for row in TABLE[role] if row.resource_type == "TOPIC" and row.name == suffix})
        for role in ROLES
    }
    named = [role for role in ROLES if component.startswith(role)]
    roles = [role for role in (named or ROLES) if needs[role]]
    if not roles:
        return None
    needed = "; ".join(f"a {role} needs {' and '.join(needs[role])} on {topic}" for role in roles)
    role = roles[0] if len(roles) == 1 else "ROLE"
    return (
        f"Granting DESCRIBE alone is not enough: {needed} (READ and WRITE imply DESCRIBE). "
        f"`reliable-kafka acls --role {role} --topology {topology} --principal {principal} --source ... "
        f"--group ...` prints every ACL the role needs, `--apply` grants them (docs/security.md)"
    )
