"""A topology's own topics: their names and shapes (creating and checking them on a cluster:
:mod:`reliable_kafka.kafka.admin`).

``<name>.acks`` (N partitions, one per acker shard), ``<name>.outcomes``, ``<name>.dlq`` (dead
letters), ``<name>.quarantine`` (events that do not decode) and ``<name>.failures`` (why tuples
failed). The ack topic's partition count
is the single source of truth for N: spouts and bolts read it from the broker, so nobody can
route an entry to the wrong shard by configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from reliable_kafka.errors import TopologyError
from reliable_kafka.validation import require_int, require_topology

__all__ = ["TopologyTopics", "Replication", "check_ack_partitions", "ACK_TOPIC_CONFIG"]

# Ackers time roots out by the ack records' timestamps: with the broker's append time a replay
# after a restart sees the same clock the live acker saw (docs/guarantees.md, known limitations).
ACK_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


@dataclass(frozen=True)
class Replication:
    """How a topology topic is replicated: ``factor`` copies, ``min_insync`` of them in sync for
    an ``acks=all`` write (``min.insync.replicas``)."""

    factor: int
    min_insync: int

    def topic_config(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}


@dataclass(frozen=True)
class TopologyTopics:
    """Names and shape of a topology's topics.

    ``ackers`` is N, the number of acker shards (ack topic partitions); 0 turns tracking off.
    ``outcome_partitions`` defaults to ``max(ackers, 1)``.
    """

    topology: str
    ackers: int = 1
    outcome_partitions: int | None = None

    def __post_init__(self) -> None:
        require_topology("TopologyTopics", "topology", self.topology)
        require_int("TopologyTopics", "ackers", self.ackers, minimum=0)
        require_int("TopologyTopics", "outcome_partitions", self.outcome_partitions, minimum=1, optional=True)

    @property
    def acks(self) -> str:
        return f"{self.topology}.acks"

    @property
    def outcomes(self) -> str:
        return f"{self.topology}.outcomes"

    @property
    def dlq(self) -> str:
        return f"{self.topology}.dlq"

    @property
    def quarantine(self) -> str:
        return f"{self.topology}.quarantine"

    @property
    def failures(self) -> str:
        """Why tuples failed: one JSON record per fail (reliable_kafka.ops.failures)."""
        return f"{self.topology}.failures"

    @property
    def roots(self) -> str:
        """The spouts' root index: (source offset, root) pairs, for ``reliable-kafka trace``."""
        return f"{self.topology}.roots"

    @property
    def dlq_replayed(self) -> str:
        """Compacted, keyed by DLQ partition and offset: what ``dlq replay`` already sent back."""
        return f"{self.topology}.dlq-replayed"

    @property
    def status(self) -> str:
        """Compacted, keyed by component: each component's latest status snapshot (reliable_kafka.ops)."""
        return f"{self.topology}.status"

    def shapes(self) -> dict[str, int]:
        """topic -> partition count the topology needs."""
        shapes = {
            self.outcomes: self.outcome_partitions or max(self.ackers, 1),
            self.dlq: 1,
            self.quarantine: 1,
            self.failures: 1,
            self.roots: 1,
        }
        if self.ackers:
            shapes[self.acks] = self.ackers
        return shapes


def check_ack_partitions(component: str, topics: TopologyTopics, found: int, ackers: int | None) -> None:
    """Raise :class:`TopologyError` when ``ackers`` is given and the ack topic has ``found`` partitions
    instead: N routes every entry (root mod N), so a component must not run with another N."""
    if ackers is not None and found != ackers:
        raise TopologyError(
            f"{component}: ack topic {topics.acks} has {found} partitions, ackers={ackers}; run with "
            f"ackers={found} (or leave ackers unset to read it from the topic), or delete the topology's "
            f"topics (losing their pending trees) and start again with ackers={ackers}"
        )
