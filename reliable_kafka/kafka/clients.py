"""Producers and consumers with the library's settings, and the check that ack senders are idempotent.

Producers are idempotent with ``acks=all`` so a retried send never duplicates an ack entry (a
duplicated ACK would break a tree's XOR).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import Consumer, Message, Producer

from reliable_kafka.errors import ConfigError
from reliable_kafka.kafka.authorization import guard_delivery, principal_of
from reliable_kafka.kafka.config import consumer_settings, producer_settings, warn_overridden
from reliable_kafka.kafka.factory import KafkaClients, clients_or_default

__all__ = [
    "new_producer",
    "new_consumer",
    "check_ack_sender_config",
    "message_coordinates",
    "coordinates",
    "ERRORS_ONLY",
    "SENT_PER_POLL",
]

_PRODUCER_DEFAULTS = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "queue.buffering.max.messages": 500_000,
}


def _merged(kafka_config: dict[str, Any] | None, required: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    config = {**defaults, **(kafka_config or {})}  # the user's dict is copied, never changed
    config.update(required)
    return config


_DUPLICATES_WHY = (
    "a producer that sends ack events must be idempotent, or a retried send can write an ack "
    "record twice: a duplicated INIT record cancels itself (XOR) and completes its trees before "
    "any ack, a duplicated ACK record unbalances them and they time out and replay"
)


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as librdkafka sees it: confluent-kafka merges ``default.topic.config`` over it."""
    topic_config = config.get("default.topic.config")
    return {**config, **topic_config} if isinstance(topic_config, dict) else config


def check_ack_sender_config(config: dict[str, Any] | None, *, component: str) -> None:
    """Raise :class:`ConfigError` if ``config`` would let an ack sender write a record twice.

    Refuses ``enable.idempotence`` set to anything librdkafka does not read as true (it reads
    ``true``, ``t`` and ``1`` in any case as true), and the settings librdkafka itself refuses
    with idempotence: ``acks`` other than ``all``/``-1``, ``retries`` < 1, ``max.in.flight`` > 5,
    ``queuing.strategy`` other than ``fifo`` (each under any of its librdkafka names).
    """
    config = _flat(producer_settings(config))
    if "enable.idempotence" in config and str(config["enable.idempotence"]).lower() not in ("true", "t", "1"):
        raise ConfigError(
            f"{component}: kafka_config sets enable.idempotence={config['enable.idempotence']!r}; "
            f"{_DUPLICATES_WHY}. Remove enable.idempotence (the library sets it to true)"
        )
    rules: tuple[tuple[tuple[str, ...], Callable[[object], bool], str], ...] = (
        (("acks", "request.required.acks"), lambda v: str(v).lower() in ("all", "-1"), "all"),
        (("retries", "message.send.max.retries"), lambda v: (n := _int(v)) is None or n >= 1, ">= 1"),
        (
            ("max.in.flight", "max.in.flight.requests.per.connection"),
            lambda v: (n := _int(v)) is None or n <= 5,
            "<= 5",
        ),
        (("queuing.strategy",), lambda v: str(v).lower() == "fifo", "fifo"),
    )
    for names, allowed, needed in rules:
        for name in names:
            if name in config and not allowed(config[name]):
                raise ConfigError(
                    f"{component}: kafka_config sets {name}={config[name]!r}, which defeats idempotence "
                    f"(it needs {names[0]} {needed}); {_DUPLICATES_WHY}. Remove {name} from kafka_config"
                )


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None  # not a number: librdkafka refuses it with its own message


def new_producer(
    bootstrap_servers: str,
    kafka_config: dict[str, Any] | None = None,
    *,
    ack_sender: str | None = None,
    component: str | None = None,
    clients: KafkaClients | None = None,
    defaults: dict[str, Any] | None = None,
    **overrides: Any,
) -> Producer:
    """An idempotent ``acks=all`` producer; ``kafka_config`` passes librdkafka settings through.

    ``defaults`` are the component's own defaults (e.g. :data:`SENT_PER_POLL`): ``kafka_config``
    overrides them, as it does the library's; ``overrides`` override everything.

    ``ack_sender`` names the component when the producer sends ack events: a configuration
    that could duplicate a record is then refused (:func:`check_ack_sender_config`).
    ``component`` names it otherwise. A producer-level ``on_delivery`` raises
    :class:`~reliable_kafka.errors.AuthorizationError` for a refused write before it is called.
    """
    own_defaults = {**_PRODUCER_DEFAULTS, **(defaults or {})}
    given = producer_settings(kafka_config)
    forced = {"bootstrap.servers": bootstrap_servers, **overrides}
    warn_overridden(f"{ack_sender or component or 'producer'}'s producer", given, forced)
    config = _merged(given, forced, own_defaults)
    if ack_sender is not None:
        check_ack_sender_config(config, component=ack_sender)
    made: list[Producer] = []
    if config.get("on_delivery") is not None:
        config["on_delivery"] = guard_delivery(config["on_delivery"], made)
    producer = clients_or_default(clients).producer(config)
    producer.component = ack_sender or component
    producer.principal = principal_of(config)
    producer.transactional_id = config.get("transactional.id")
    made.append(producer)
    return cast(
        Producer, producer
    )  # confluent-kafka's, or a MemoryKafka producer (the factory's clients are duck-typed)


def new_consumer(
    bootstrap_servers: str,
    group_id: str,
    kafka_config: dict[str, Any] | None = None,
    *,
    clients: KafkaClients | None = None,
    **overrides: Any,
) -> Consumer:
    """A consumer with manual commits and offset storage (the layer decides what is committed)."""
    defaults = {"auto.offset.reset": "earliest", "enable.partition.eof": False}
    required = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    given = consumer_settings(kafka_config)
    forced = {**required, **overrides}
    warn_overridden(f"consumer of group {group_id!r}", given, forced)
    config = _merged(given, forced, defaults)
    consumer = clients_or_default(clients).consumer(config)
    consumer.principal = principal_of(config)
    consumer.group_id = group_id
    # a static member (KIP-345) is the one a coordinator move can fence (reliable_kafka.kafka.fatal)
    consumer.instance_id = config.get("group.instance.id")
    return cast(Consumer, consumer)  # confluent-kafka's, or a MemoryKafka consumer (as new_producer's)


def message_coordinates(message: Message) -> str:
    return f"{message.topic()}[{message.partition()}]@{message.offset()}"


def coordinates(message: Message) -> tuple[str, int, int]:
    """A consumed record's topic, partition and offset, typed: confluent-kafka's accessors may
    return None only for messages that were never read (a producer's, before delivery)."""
    return cast(str, message.topic()), cast(int, message.partition()), cast(int, message.offset())


# Producer settings of spouts and bolts: delivery reports only for failed messages, to the
# producer's ``on_delivery`` (a report per delivered tuple was ~16% of a tracked pipeline's CPU).
# A failed tuple is never lost track of: its edge stays in its tree's XOR, so the tree times out
# and replays (librdkafka gives up on a message after message.timeout.ms, 300 s by default, long
# after the tree's 30 s); the report counts and logs it.
ERRORS_ONLY = {"delivery.report.only.error": True}

# Producer defaults of spouts and bolts, which send what a poll produced at its end (send_polled):
# librdkafka puts one partition in each produce request, and the broker pays per request (about
# 0.1 ms of CPU here, 0.3 ms with the consumer fetch it wakes, against about 1 us a record;
# the git history of docs/performance.md). With the 5 ms default a Python loop that takes 10 to 20 ms over a batch had
# it cut into 5 ms pieces, a request per partition each; with 50 ms it goes whole when its poll ends.
SENT_PER_POLL = {"linger.ms": 50}
