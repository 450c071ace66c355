"""A topology's topics on a cluster: the admin client, creating the topics, checking their shape.

The names and shapes are :mod:`reliable_kafka.topology`'s; this module does the I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType, TopicMetadata

from reliable_kafka.core.clock import Clock
from reliable_kafka.errors import ConfigError, TopologyError
from reliable_kafka.kafka.authorization import principal_of, raise_if_refused, refusal
from reliable_kafka.kafka.factory import KafkaClients, clients_or_default
from reliable_kafka.topology import ACK_TOPIC_CONFIG, Replication, TopologyTopics

__all__ = [
    "UNREACHABLE",
    "admin_client",
    "wait_for_cluster",
    "ensure_topics",
    "ensure_status_topic",
    "partition_count",
    "replication_for",
    "warn_if_create_time",
]

log = logging.getLogger(__name__)

_warned_create_time: set[str] = set()
_warned_replication: set[str] = set()


def replication_for(
    admin: AdminClient,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    *,
    timeout: float = 30.0,
) -> Replication:
    """The replication of new topology topics (docs/design.md section 7.5): ``replication_factor``, else
    min(3, brokers); ``min_insync_replicas``, else min(2, factor). Three copies with two in sync
    survive one broker down without refusing an ``acks=all`` write, as Kafka's own internal topics
    are set up on a production cluster; a single-broker cluster gets one copy."""
    for name, value in (("replication_factor", replication_factor), ("min_insync_replicas", min_insync_replicas)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"topology topics: {name} must be an integer >= 1 (or None: the default), got {value!r}")
    factor = replication_factor or min(3, _brokers(admin, timeout))
    min_insync = min_insync_replicas or min(2, factor)
    if min_insync > factor:
        raise ConfigError(
            f"topology topics: min_insync_replicas={min_insync} is more than replication_factor={factor}: "
            f"every acks=all write would be refused; allowed: 1 to {factor}"
        )
    return Replication(factor, min_insync)


def _brokers(admin: AdminClient, timeout: float) -> int:
    return max(1, len(admin.list_topics(timeout=timeout).brokers))


def admin_client(
    bootstrap_servers: str,
    kafka_config: dict[str, Any] | None = None,
    *,
    component: str | None = None,
    clients: KafkaClients | None = None,
) -> AdminClient:
    admin = clients_or_default(clients).admin({**(kafka_config or {}), "bootstrap.servers": bootstrap_servers})
    admin.component, admin.principal = component, principal_of(kafka_config)
    # confluent-kafka's, or a MemoryKafka admin: the factory's clients are duck-typed (KafkaClients returns Any)
    return admin  # type: ignore[no-any-return]


UNREACHABLE = frozenset(
    {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE}
)
"""Errors of a metadata request that say the cluster is not reachable (yet): down, starting,
a wrong address, a name that does not resolve. Anything else (a refused login) is not waited out."""
FIRST_RETRY_S, LONGEST_RETRY_S = 1.0, 30.0


def wait_for_cluster(
    admin: AdminClient,
    stop: threading.Event,
    *,
    component: str,
    bootstrap_servers: str,
    timeout: float = 5.0,
    clock: Clock = time,
    on_failure: Callable[[str], None] | None = None,
) -> bool:
    """Block until the cluster answers a metadata request, as a Kafka client waits for its
    bootstrap servers: a worker started before its broker (a restart of both, a deploy that starts
    them together) runs once the broker does instead of exiting with librdkafka's error. Each
    failed try is logged with the address and the error, the waits doubling from 1 s to 30 s.
    The cluster is asked once even if ``stop`` is already set (a worker run to start and close at
    once still starts); False when ``stop`` is set while it does not answer; an error that is not
    :data:`UNREACHABLE` is raised. ``on_failure`` is called with librdkafka's error after each
    failed try (the waiting component's endpoints say it, ``ops.waiting``)."""
    wait, tries, since = FIRST_RETRY_S, 0, clock.monotonic()
    while True:
        try:
            admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in UNREACHABLE:
                raise
            if stop.is_set():  # asked once even when stopped already (start, then close at once)
                return False
            tries += 1
            if on_failure is not None:
                on_failure(error.str())
            log.warning(
                "%s: cannot reach Kafka at %s (%s); trying again in %.0f s (waiting %.0f s so far; check that the "
                "broker runs and the address and listener are right)",
                component,
                bootstrap_servers,
                error.str(),
                wait,
                clock.monotonic() - since,
            )
            if stop.wait(wait):
                return False
            wait = min(2 * wait, LONGEST_RETRY_S)
            continue
        if tries:
            log.warning("%s: Kafka at %s answers after %d failed tries; starting", component, bootstrap_servers, tries)
        return True


def _who(admin: AdminClient) -> dict[str, str]:
    return {
        "component": getattr(admin, "component", None) or "admin client",
        "principal": getattr(admin, "principal", None) or principal_of(None),
    }


def partition_count(
    admin: AdminClient, topic: str, *, timeout: float = 10.0, wait: float = 0.0, clock: Clock = time
) -> int | None:
    """Partitions of ``topic``, or None when it does not exist (after waiting up to ``wait`` s).

    Raises :class:`~reliable_kafka.errors.AuthorizationError` when the principal may not DESCRIBE
    it: a topic listing leaves such topics out, as if they did not exist.
    """
    deadline = clock.monotonic() + wait
    while True:
        described = admin.list_topics(timeout=timeout).topics.get(topic)
        if described is not None and described.error is None and described.partitions:
            return len(described.partitions)
        _raise_if_hidden(admin, topic, timeout)
        if clock.monotonic() >= deadline:
            return None
        clock.sleep(0.2)


def _raise_if_hidden(admin: AdminClient, topic: str, timeout: float) -> None:
    """Raise AuthorizationError when ``topic`` is left out of listings because DESCRIBE is refused."""
    try:  # one topic by name: its own error (a listing of all topics hides it silently)
        admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
    except KafkaException as exc:
        raise_if_refused(exc, **_who(admin), operation="DESCRIBE", topic=topic)


def ensure_topics(
    admin: AdminClient,
    topics: TopologyTopics,
    *,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    timeout: float = 30.0,
    needed: set[str] | None = None,
    clock: Clock = time,
) -> None:
    """Create the topology's missing topics; refuse existing ones with the wrong partition count.

    New topics get :func:`replication_for`'s replication (by default min(3, brokers) copies,
    ``min.insync.replicas`` min(2, copies)); an existing one with fewer copies than that is warned
    about, once per process. Raises :class:`TopologyError` naming the topic, the partitions found
    and needed, and what to do, also when another process created a topic first (the count is
    checked again after the race). A topic the principal may neither see nor create is an
    :class:`~reliable_kafka.errors.AuthorizationError` when it is in ``needed`` (default: all),
    else a warning: an administrator may have created it for the components that use it.
    """
    replication = replication_for(admin, replication_factor, min_insync_replicas, timeout=timeout)
    metadata = admin.list_topics(timeout=timeout)
    existing = metadata.topics
    missing = []
    for topic, partitions in topics.shapes().items():
        if topic in existing and existing[topic].error is None:
            _check_partitions(topics, topic, len(existing[topic].partitions), partitions)
            _warn_if_under_replicated(topic, existing[topic], min(3, max(1, len(metadata.brokers))))
        else:
            config = {**(ACK_TOPIC_CONFIG if topic == topics.acks else {}), **replication.topic_config()}
            missing.append(
                NewTopic(topic, num_partitions=partitions, replication_factor=replication.factor, config=config)
            )
    hidden = []
    raced = []
    if missing:
        for topic, future in admin.create_topics(missing, operation_timeout=timeout).items():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                if exc.args[0].name() == "TOPIC_ALREADY_EXISTS":  # another process won the race
                    raced.append(topic)
                    continue
                if refusal(exc, **_who(admin)) is None:
                    raise TopologyError(f"topology {topics.topology!r}: cannot create {topic}: {exc}") from exc
                if needed is None or topic in needed:
                    raise_if_refused(exc, **_who(admin), operation="CREATE", topic=topic)
                hidden.append(topic)
    if hidden:
        log.warning(
            "%s: %s may neither see nor create %s (no DESCRIBE or CREATE); assuming an administrator "
            "created them (this worker does not use them)",
            _who(admin)["component"],
            _who(admin)["principal"],
            ", ".join(sorted(hidden)),
        )
    for topic in sorted(raced, key=lambda name: name != topics.acks):  # the winner may have asked for another N
        found = partition_count(admin, topic, timeout=timeout, wait=timeout, clock=clock)
        if found is not None:
            _check_partitions(topics, topic, found, topics.shapes()[topic])
    _wait_for_leaders(admin, [topic for topic in topics.shapes() if topic not in hidden], timeout, clock)
    ensure_status_topic(admin, topics, replication_factor=replication.factor, timeout=timeout, replication=replication)


def _warn_if_under_replicated(topic: str, described: TopicMetadata, allowed: int) -> None:
    """Warn (once per process and topic) when ``topic`` keeps fewer copies than the cluster allows."""
    copies = min((len(p.replicas) for p in described.partitions.values()), default=allowed)
    if copies >= allowed or topic in _warned_replication:
        return
    _warned_replication.add(topic)
    log.warning(
        "topology topic %s has replication factor %d, the cluster allows %d: one broker down loses its "
        "records or stops the topology. Raise it with kafka-reassign-partitions.sh (docs/operations.md, "
        "replication), and set min.insync.replicas=%d on it",
        topic,
        copies,
        allowed,
        min(2, allowed),
    )


def ensure_status_topic(
    admin: AdminClient,
    topics: TopologyTopics,
    *,
    replication_factor: int | None = None,
    timeout: float = 30.0,
    replication: Replication | None = None,
) -> None:
    """Create ``<topology>.status`` (1 partition, compacted, 10-minute segments) when it is missing,
    replicated as :func:`replication_for` says (``replication``: already decided)."""
    if topics.status in admin.list_topics(timeout=timeout).topics:
        return
    replication = replication or replication_for(admin, replication_factor, timeout=timeout)
    new = NewTopic(
        topics.status,
        num_partitions=1,
        replication_factor=replication.factor,
        # small segments: snapshots every few seconds would otherwise pile up until the
        # default week-long segment rolls, since only closed segments are compacted
        config={"cleanup.policy": "compact", "segment.ms": "600000", **replication.topic_config()},
    )
    for topic, future in admin.create_topics([new], operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                # a status writer needs WRITE, which lets it see the topic: its creation is not tried then
                raise_if_refused(exc, **_who(admin), operation="WRITE", topic=topic)
                raise TopologyError(f"topology {topics.topology!r}: cannot create {topic}: {exc}") from exc


def warn_if_create_time(admin: AdminClient, topics: TopologyTopics, *, timeout: float = 30.0) -> bool:
    """Warn (once per process and topic) when the ack topic keeps producers' CreateTime stamps.

    Returns True when it does. A topic whose configuration cannot be read is not warned about.
    """
    resource = ConfigResource(ResourceType.TOPIC, topics.acks)
    try:
        described = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout)
    except KafkaException as exc:
        if refusal(exc, **_who(admin)) is not None:  # optional: say which ACL would allow the check
            log.warning(
                "%s: %s may not DESCRIBE_CONFIGS on %s; its timestamp type is not checked",
                _who(admin)["component"],
                _who(admin)["principal"],
                topics.acks,
            )
        log.debug("cannot read the configuration of %s: %s", topics.acks, exc)
        return False
    entry = described.get("message.timestamp.type")
    if entry is None or entry.value != "CreateTime":
        return False
    if topics.acks not in _warned_create_time:
        _warned_create_time.add(topics.acks)
        log.warning(
            "ack topic %s uses message.timestamp.type=CreateTime: ackers time roots out by the records' "
            "timestamps, so a table rebuilt after a restart or rebalance may decide a timeout differently "
            "from the live one (earlier or later by up to a timeout bucket; never an early completion; "
            "see docs/guarantees.md). Fix: kafka-configs.sh --bootstrap-server HOST:PORT --alter "
            "--entity-type topics --entity-name %s --add-config message.timestamp.type=LogAppendTime",
            topics.acks,
            topics.acks,
        )
    return True


def _wait_for_leaders(admin: AdminClient, names: list[str], timeout: float, clock: Clock) -> None:
    deadline = clock.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout).topics
        ready = all(
            name in metadata
            and metadata[name].error is None
            and metadata[name].partitions
            and all(p.leader >= 0 for p in metadata[name].partitions.values())
            for name in names
        )
        if ready:
            return
        if clock.monotonic() > deadline:
            raise TopologyError(f"topics {names} have no leader after {timeout:.0f}s; is the broker healthy?")
        clock.sleep(0.1)


def _check_partitions(topics: TopologyTopics, topic: str, found: int, needed: int) -> None:
    if found != needed:
        setting = f"ackers={found}" if topic == topics.acks else "the ackers setting it was created with"
        raise TopologyError(
            f"topology {topics.topology!r}: topic {topic} has {found} partitions, needs {needed} "
            f"(ackers={topics.ackers}); use {setting}, or delete the topology's topics (losing their "
            f"pending trees) and start again"
        )
