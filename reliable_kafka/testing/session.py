"""Which real Kafka a test session (or benchmark) uses, and starting it.

Where the broker comes from (:func:`choose_kafka_source`), in this order:

1. ``RK_BOOTSTRAP`` names an existing cluster ("external").
2. ``RK_KAFKA=embedded`` or ``RK_KAFKA=docker`` forces one of the two below.
3. A Docker daemon answers: testcontainers' Kafka container ("docker"; image from
   ``RK_KAFKA_IMAGE``, else testcontainers' default).
4. Otherwise the embedded broker (:class:`reliable_kafka.broker.EmbeddedKafka`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from reliable_kafka.errors import ConfigError

__all__ = [
    "KafkaSource",
    "choose_kafka_source",
    "docker_available",
    "session_kafka",
]

KafkaSource = Literal["external", "docker", "embedded"]


def choose_kafka_source(env: Mapping[str, str], docker_ping: Callable[[], bool]) -> KafkaSource:
    """Which Kafka a test session uses; ``docker_ping`` is only called when it matters."""
    if env.get("RK_BOOTSTRAP", "").strip():
        return "external"
    forced = env.get("RK_KAFKA", "").strip().lower()
    if forced in ("embedded", "docker"):
        return forced  # type: ignore[return-value]
    if forced:
        raise ConfigError(f"RK_KAFKA={forced!r}: expected 'embedded' or 'docker' (or unset)")
    return "docker" if docker_ping() else "embedded"


def docker_available(timeout: float = 3.0) -> bool:
    """Whether a Docker daemon answers a ping within ``timeout`` seconds."""
    try:
        import docker

        client = docker.from_env(timeout=int(max(1, timeout)))
    except Exception:  # noqa: BLE001 - no client library, no socket, bad DOCKER_HOST: all "no"
        return False
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001
        return False
    finally:
        client.close()


@contextmanager
def session_kafka(env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Provide a bootstrap address for the chosen source; stop what was started on exit."""
    env = os.environ if env is None else env
    source = choose_kafka_source(env, docker_available)
    if source == "external":
        yield env["RK_BOOTSTRAP"].strip()
    elif source == "docker":
        container = _kafka_container(env.get("RK_KAFKA_IMAGE"))
        container.start()
        try:
            yield container.get_bootstrap_server()
        finally:
            container.stop()
    else:
        from reliable_kafka.broker import EmbeddedKafka

        with EmbeddedKafka() as kafka:
            yield kafka.bootstrap_servers


def _kafka_container(image: str | None) -> Any:  # a KafkaContainer; testcontainers is optional
    # testcontainers 4.15 moved the module (the old path still works, with a warning).
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:
        from testcontainers.kafka import KafkaContainer
    container = KafkaContainer(image) if image else KafkaContainer()
    if hasattr(container, "with_kraft"):
        container = container.with_kraft()
    return container
