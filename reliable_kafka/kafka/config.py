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

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["ClientConfig", "client_config", "consumer_settings", "producer_settings", "warn_overridden"]

log = logging.getLogger(__name__)


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


_warned_overrides: set[tuple[str, str]] = set()


def warn_overridden(who: str, given: Mapping[str, Any], forced: Mapping[str, Any]) -> None:
    """Log a warning, once per process for each ``who`` and key, for each setting of the user's
    (``given``) that the component replaces with its own (``forced``): e.g. a spout's consumer
    sets ``enable.auto.commit`` false whatever kafka_config says, since it commits only the offsets
    whose trees completed. Silently overriding it hid that the user's setting had no effect."""
    for key, value in forced.items():
        if key not in given or _same(given[key], value):
            continue
        if (who, key) in _warned_overrides:
            continue
        _warned_overrides.add((who, key))
        log.warning(
            "%s: kafka_config sets %s=%r, which reliable-kafka overrides with %r (the component must own it); "
            "remove it from kafka_config",
            who,
            key,
            given[key],
            value,
        )


def _same(given: Any, forced: Any) -> bool:
    """Equal as librdkafka reads them: true/"true"/"1", and 5/"5", are the same setting."""
    if given is forced or given == forced:
        return True
    if callable(given) or callable(forced):
        return False
    text = str(given).strip().lower()
    if isinstance(forced, bool):
        return text in (("true", "t", "1") if forced else ("false", "f", "0"))
    return text == str(forced).strip().lower()
