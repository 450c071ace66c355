"""One component's librdkafka settings: the shared ones, and those of its consumers or producers only.

librdkafka ignores a consumer property given to a producer and the other way round, with a CONFWARN
log line each time (``fetch.max.bytes``, ``linger.ms``, ``isolation.level``...), and some settings
want different values per role (``client.id``, ``statistics.interval.ms``). Components take
``kafka_config`` (every client: admin, consumers, producers) plus ``consumer_config`` and
``producer_config``, each merged over ``kafka_config`` for that role only.

:class:`ClientConfig` is a dict of the shared settings that carries the two per-role dicts along, so
code that reads ``kafka_config`` (admin clients, Spark's security options) works unchanged, and a
component hands one object to its helpers; :func:`~reliable_kafka.kafka.clients.new_consumer` and
:func:`~reliable_kafka.kafka.clients.new_producer` apply the right one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ClientConfig", "client_config", "consumer_settings", "producer_settings"]


class ClientConfig(dict[str, Any]):
    """The settings of every client (the dict itself), plus ``consumer`` and ``producer`` overrides."""

    def __init__(
        self,
        shared: Mapping[str, Any] | None = None,
        *,
        consumer: Mapping[str, Any] | None = None,
        producer: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(shared or {})
        self.consumer: dict[str, Any] = dict(consumer or {})
        self.producer: dict[str, Any] = dict(producer or {})

    def __repr__(self) -> str:
        return f"ClientConfig({dict(self)!r}, consumer={self.consumer!r}, producer={self.producer!r})"


def client_config(
    kafka_config: Mapping[str, Any] | None = None,
    *,
    consumer_config: Mapping[str, Any] | None = None,
    producer_config: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A component's copy of its settings (the caller's dicts are never changed).

    ``kafka_config`` may itself be a :class:`ClientConfig`; the per-role dicts given here are merged
    over its own.
    """
    consumer = dict(getattr(kafka_config, "consumer", None) or {})
    producer = dict(getattr(kafka_config, "producer", None) or {})
    consumer.update(consumer_config or {})
    producer.update(producer_config or {})
    return ClientConfig(kafka_config, consumer=consumer, producer=producer)


def consumer_settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a consumer gets: the shared settings with the consumer's merged over them (a new dict)."""
    return {**(config or {}), **(getattr(config, "consumer", None) or {})}


def producer_settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a producer gets: the shared settings with the producer's merged over them (a new dict)."""
    return {**(config or {}), **(getattr(config, "producer", None) or {})}
