"""The settings the components share, grouped as Storm's ``KafkaSpoutConfig`` groups them: how to
reach Kafka (:class:`Connection`), what a spout promises and how it tracks its trees
(:class:`Tracking`), how a component's loop runs (:class:`Loop`) and how an acker creates the
topology's topics (:class:`TopicCreation`). docs/configuration.md describes every field.

Each object is frozen and checks its fields when made, so a wrong value fails where it was
written with a :class:`~reliable_kafka.errors.ConfigError` naming the object, the field, the value
and what is allowed. A component takes keywords, as before; these objects group the ones that
belong together, and the simple case stays short: ``connection="localhost:9092"`` is
``Connection("localhost:9092")``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from reliable_kafka.core.clock import Clock
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import ConfigError
from reliable_kafka.kafka.config import ClientConfig, client_config
from reliable_kafka.validation import (
    require_bool,
    require_choice,
    require_having,
    require_instance,
    require_int,
    require_mapping,
    require_number,
    require_str,
)

if TYPE_CHECKING:
    from reliable_kafka.kafka.factory import KafkaClients

__all__ = [
    "Connection",
    "Tracking",
    "Loop",
    "TopicCreation",
    "Guarantee",
    "DEAD_LETTER_RATIO",
    "DEAD_LETTER_WINDOW",
]

Guarantee = Literal["at_least_once", "at_most_once", "none"]

# The dead-letter guard's defaults: stop the spout when more than half of the last 200 settled
# records (completed or dead-lettered) were bound for the DLQ. So nothing trips before 101 records
# were dead-lettered (the minimum sample), and a deploy that fails everything stops after about
# 100 dead letters instead of draining the stream (Arroyo's DlqLimit has the same purpose; it
# counts per partition and refuses a dead letter before any record succeeded). None turns it off.
DEAD_LETTER_RATIO = 0.5
DEAD_LETTER_WINDOW = 200


@dataclass(frozen=True)
class Connection:
    """How every client of a component reaches Kafka; one object may serve all components.

    - ``bootstrap_servers``: Kafka's ``bootstrap.servers`` (``"host:port,host:port"``).
    - ``kafka_config`` [None]: librdkafka settings for every client (admin, consumers, producers),
      handed over unchanged (copied first): security (``security.protocol``, ``sasl.*``,
      ``ssl.*``), ``client.id``, timeouts.
    - ``consumer_config``, ``producer_config`` [None]: settings merged over ``kafka_config`` for
      that role only (librdkafka warns about a consumer property given to a producer).
    - ``clients`` [None]: the factory that makes the Kafka clients (``KafkaClients``; None:
      confluent-kafka's). Tests and the simulation give ``MemoryKafka``'s.
    """

    bootstrap_servers: str
    kafka_config: Mapping[str, Any] | None = None
    consumer_config: Mapping[str, Any] | None = None
    producer_config: Mapping[str, Any] | None = None
    clients: KafkaClients | None = None

    def __post_init__(self) -> None:
        require_str("Connection", "bootstrap_servers", self.bootstrap_servers)
        require_mapping("Connection", "kafka_config", self.kafka_config)
        require_mapping("Connection", "consumer_config", self.consumer_config)
        require_mapping("Connection", "producer_config", self.producer_config)
        require_having("Connection", "clients", self.clients, ("producer", "consumer", "admin"))

    @classmethod
    def of(cls, component: str, value: object) -> Connection:
        """A component's ``connection=``: a :class:`Connection`, or a bootstrap servers string."""
        if isinstance(value, Connection):
            return value
        if isinstance(value, str):
            return cls(value)
        raise ConfigError(
            f"{component}: connection must be a bootstrap servers string or a Connection, "
            f"got {value!r} ({type(value).__name__})"
        )

    def client_config(self) -> ClientConfig:
        """A fresh copy of the settings: the shared ones, with the per-role ones carried along."""
        return client_config(
            self.kafka_config, consumer_config=self.consumer_config, producer_config=self.producer_config
        )


@dataclass(frozen=True)
class Tracking:
    """What a spout promises and how it tracks its tuple trees (Storm's acking settings).

    - ``guarantee`` ["at_least_once"]: ``"at_least_once"`` (tracked, replayed until done),
      ``"at_most_once"`` (committed before emitting, never replayed) or ``"none"``.
    - ``ackers`` [None]: the ack topic's partitions; None takes what the topic has; 0 tracks nothing.
    - ``max_pending`` [10000]: trees in flight before the spout pauses its partitions (Storm's
      ``topology.max.spout.pending``); None: no bound.
    - ``max_retries`` [5]: replays of a failed tree before it is dead-lettered; None: no limit.
    - ``backoff`` [None]: a :class:`~reliable_kafka.core.tracker.Backoff` before each replay.
    - ``message_timeout_ms`` [30000]: a tree not done by then fails (Storm's
      ``topology.message.timeout.secs``); the acker times trees out with the same figure.
    - ``backstop_grace_ms`` [10000]: how long after the timeout the spout gives up waiting for the
      acker's verdict and fails the tree itself.
    - ``max_dead_letter_ratio`` [0.5], ``dead_letter_window`` [200]: the dead-letter guard stops
      the spout when more than this share of the last ``dead_letter_window`` settled records were
      dead-lettered; ``max_dead_letter_ratio=None`` turns it off.
    - ``root_index`` [True]: write (offset, root) pairs that ``reliable-kafka trace`` reads.

    An acker reads ``ackers`` and ``message_timeout_ms`` only: give the spouts and the ackers of a
    topology the same object and they agree.
    """

    guarantee: Guarantee = "at_least_once"
    ackers: int | None = None
    max_pending: int | None = 10_000
    max_retries: int | None = 5
    backoff: Backoff | None = None
    message_timeout_ms: int | None = 30_000
    backstop_grace_ms: int = 10_000
    max_dead_letter_ratio: float | None = DEAD_LETTER_RATIO
    dead_letter_window: int = DEAD_LETTER_WINDOW
    root_index: bool = True

    def __post_init__(self) -> None:
        require_choice("Tracking", "guarantee", self.guarantee, ("at_least_once", "at_most_once", "none"))
        require_int("Tracking", "ackers", self.ackers, minimum=0, optional=True)
        require_int("Tracking", "max_pending", self.max_pending, minimum=1, optional=True)
        require_int("Tracking", "max_retries", self.max_retries, minimum=0, optional=True)
        require_instance("Tracking", "backoff", self.backoff, Backoff)
        require_int("Tracking", "message_timeout_ms", self.message_timeout_ms, minimum=1, optional=True)
        require_int("Tracking", "backstop_grace_ms", self.backstop_grace_ms, minimum=0)
        require_number(
            "Tracking", "max_dead_letter_ratio", self.max_dead_letter_ratio, minimum=0, below=1, optional=True
        )
        require_int("Tracking", "dead_letter_window", self.dead_letter_window, minimum=1)
        require_bool("Tracking", "root_index", self.root_index)


@dataclass(frozen=True)
class Loop:
    """How a component's run loop goes.

    - ``batch_size`` [500]: records taken per poll.
    - ``commit_interval_ms`` [1000]: at most this often the consumer's offsets are committed.
    - ``metrics_port`` [None]: serve Prometheus ``/metrics`` on this port (0: any free port).
    - ``clock`` [``time``]: ``monotonic()``, ``time()`` and ``sleep()``; the simulation gives its own.
    """

    batch_size: int = 500
    commit_interval_ms: int = 1000
    metrics_port: int | None = None
    clock: Clock = time

    def __post_init__(self) -> None:
        require_int("Loop", "batch_size", self.batch_size, minimum=1)
        require_int("Loop", "commit_interval_ms", self.commit_interval_ms, minimum=0)
        require_int("Loop", "metrics_port", self.metrics_port, minimum=0, maximum=65535, optional=True)
        require_having("Loop", "clock", self.clock, ("monotonic", "time", "sleep"), optional=False)


@dataclass(frozen=True)
class TopicCreation:
    """How an acker creates the topology's topics that do not exist yet (its ``create_topics=``).

    - ``replication_factor`` [None]: the new topics' replication (None: the broker's default).
    - ``min_insync_replicas`` [None]: their ``min.insync.replicas`` (None: the broker's default).
    """

    replication_factor: int | None = None
    min_insync_replicas: int | None = None

    def __post_init__(self) -> None:
        require_int("TopicCreation", "replication_factor", self.replication_factor, minimum=1, optional=True)
        require_int("TopicCreation", "min_insync_replicas", self.min_insync_replicas, minimum=1, optional=True)
