"""Where components get their Kafka clients: confluent-kafka by default, or any :class:`KafkaClients`.

Spouts, bolts, acker workers and their helpers build every producer, consumer and admin client
through one object passed as ``clients=``, as Storm's KafkaSpout takes its consumer from a factory:
the shipped classes then run unchanged on :class:`reliable_kafka.testing.MemoryKafka`, with no
broker. The configuration handed over is the finished librdkafka dict (defaults, the user's
``kafka_config`` and the library's required settings already merged).
"""

from __future__ import annotations

from typing import Any, Protocol

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from reliable_kafka.broker.compat import warn_if_unsupported
from reliable_kafka.client_log import with_log

__all__ = ["KafkaClients", "ConfluentClients", "CONFLUENT", "clients_or_default"]


class KafkaClients(Protocol):
    """Makes Kafka clients from librdkafka configuration dicts (the dicts are not changed)."""

    def producer(self, config: dict[str, Any]) -> Any: ...

    def consumer(self, config: dict[str, Any]) -> Any: ...

    def admin(self, config: dict[str, Any]) -> Any: ...


class _Producer(Producer):
    """A producer that knows who writes with it, to name them when a write is refused."""

    component: str | None = None
    principal: str | None = None
    transactional_id: str | None = None


class _Consumer(Consumer):
    """A consumer that knows its principal and group, to name them when a read is refused."""

    principal: str | None = None
    group_id: str | None = None
    subscribed = False  # a member of its group (READ), not only a user of its coordinator (DESCRIBE)

    def subscribe(self, *args: Any, **kwargs: Any) -> None:
        self.subscribed = True
        return super().subscribe(*args, **kwargs)


class _Admin(AdminClient):
    """An admin client that knows who asks, to name them when the broker refuses."""

    component: str | None = None
    principal: str | None = None


class ConfluentClients:
    """confluent-kafka's clients, with librdkafka's log routed to Python logging.

    The first client for a bootstrap list in a process also has the broker's release checked, in
    the background: outside the tested range, a warning (:mod:`reliable_kafka.broker.compat`).
    They are subclasses that can carry who uses them (component, principal, group), so that a
    refused permission names them (:mod:`reliable_kafka.kafka.authorization`).
    """

    def producer(self, config: dict[str, Any]) -> Producer:
        warn_if_unsupported(config)
        return _Producer(with_log(config))

    def consumer(self, config: dict[str, Any]) -> Consumer:
        warn_if_unsupported(config)
        return _Consumer(with_log(config))

    def admin(self, config: dict[str, Any]) -> AdminClient:
        warn_if_unsupported(config)
        return _Admin(with_log(config))

    def __repr__(self) -> str:
        return "ConfluentClients()"


CONFLUENT = ConfluentClients()


def clients_or_default(clients: KafkaClients | None) -> KafkaClients:
    return CONFLUENT if clients is None else clients
