"""Pytest fixtures for tests against a real Kafka (load with ``pytest_plugins``).

- ``kafka_bootstrap`` (session): a bootstrap address; the broker starts on first use only, one
  per session, from the source :func:`reliable_kafka.testing.session.choose_kafka_source` picks.
- ``topic_name`` (function): a unique topic name derived from the test's name (not created).
- ``unique_topic`` (function): a factory ``unique_topic(prefix="rk-test") -> str``.
- ``create_topic`` (function): a factory that creates a unique (or named) topic on the session
  broker and waits until it is ready:
  ``create_topic(name=None, *, partitions=1, replication_factor=1, config=None) -> str``.
- ``kafka_cluster`` (module): a started 3-broker :class:`reliable_kafka.broker.EmbeddedCluster`.
  It, ``secure_kafka`` and the embedded session broker run the Kafka version ``RK_KAFKA_VERSION``
  names (default :data:`reliable_kafka.jars.KAFKA_VERSION`).
- ``docker_engine`` (session): the Docker client of an engine that answers; outside CI a test using
  it is skipped when none answers, in CI (``CI`` set, as .ci/run starts an engine) it fails.
- ``secure_kafka`` (module): a started SASL/SCRAM broker with the StandardAuthorizer; a
  :class:`SecureKafka` with per-role credentials (``admin``, ``spout``, ``bolt``, ``acker``,
  ``spark``, ``outsider``; ``config(role)`` is that role's ``kafka_config``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import pytest
except ImportError as _exc:  # an optional dependency: extra [testing]
    from reliable_kafka.errors import MissingExtraError

    raise MissingExtraError(
        "reliable_kafka.testing.fixtures are pytest fixtures and need pytest, an optional dependency: "
        "pip install 'reliable-kafka[testing]'"
    ) from _exc

from reliable_kafka.broker import EmbeddedCluster
from reliable_kafka.broker.secure import SECURE_ROLES, BrokerSecurity
from reliable_kafka.jars import kafka_version
from reliable_kafka.testing.session import docker_available, session_kafka
from reliable_kafka.testing.topics import create_topics, unique_name

__all__ = [
    "kafka_bootstrap",
    "topic_name",
    "unique_topic",
    "create_topic",
    "kafka_cluster",
    "docker_engine",
    "require_docker",
    "secure_kafka",
    "SecureKafka",
    "SECURE_ROLES",
]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The test session's Kafka bootstrap address (RK_BOOTSTRAP, Docker, or embedded)."""
    with session_kafka() as bootstrap:
        yield bootstrap


@pytest.fixture
def unique_topic() -> Callable[..., str]:
    """A factory of unique topic names: ``unique_topic(prefix="rk-test")``."""

    def unique_topic(prefix: str = "rk-test") -> str:
        return unique_name(prefix)

    return unique_topic


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A unique topic name that says which test made it (the topic is not created)."""
    test = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-.")[:60] or "rk-test"
    return unique_name(test)


@pytest.fixture
def create_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """A factory creating topics on the session broker; returns the topic's name."""

    def create(
        name: str | None = None,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
    ) -> str:
        topic = name or unique_name("rk-test")
        create_topics(
            kafka_bootstrap,
            {topic: partitions},
            replication_factor=replication_factor,
            config=dict(config or {}),
        )
        return topic

    return create


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[EmbeddedCluster]:
    """A 3-broker embedded cluster for this test module (always embedded: tests kill brokers)."""
    cluster = EmbeddedCluster(brokers=3, version=kafka_version()).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def require_docker() -> None:
    """Return when a Docker engine answers; else fail in CI (which starts one), skip elsewhere."""
    if docker_available():
        return
    where = os.environ.get("DOCKER_HOST") or "the default socket"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI expects a Docker engine (.ci/run starts one), but none answers at {where}", pytrace=False)
    pytest.skip(
        f"no Docker engine answers at {where}; skipped outside CI only "
        f'(start one: eval "$(docker/engine start)" && docker/build-images)'
    )


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A docker-py client of the engine the container tests use (see :func:`require_docker`)."""
    require_docker()
    import docker

    client = docker.from_env(timeout=30)
    try:
        yield client
    finally:
        client.close()


@dataclass(frozen=True)
class SecureKafka:
    bootstrap: str
    security: BrokerSecurity
    log_path: Path

    def config(self, role: str) -> dict[str, str]:
        """``kafka_config`` (librdkafka settings) of ``role``."""
        return self.security.client_config(role)


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[SecureKafka]:
    """A secured embedded broker for the module (SASL/SCRAM-SHA-256, StandardAuthorizer)."""
    from reliable_kafka.broker import EmbeddedKafka
    from reliable_kafka.broker.secure import BrokerSecurity

    security = BrokerSecurity.generate(SECURE_ROLES)
    with EmbeddedKafka(security=security, startup_timeout=180.0, version=kafka_version()) as broker:
        yield SecureKafka(bootstrap=broker.bootstrap_servers, security=security, log_path=broker.log_path)
