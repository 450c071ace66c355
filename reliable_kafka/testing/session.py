"""Which real Kafka a test session (or benchmark) uses, and starting it.

Where the broker comes from (:func:`choose_kafka_source`), in this order:

1. ``RK_BOOTSTRAP`` names an existing cluster ("external").
2. ``RK_KAFKA=embedded`` or ``RK_KAFKA=docker`` forces one of the two below.
3. A Docker daemon answers: a Kafka container started through testcontainers ("docker").
4. Otherwise the embedded broker (:class:`reliable_kafka.broker.EmbeddedKafka`), running the Kafka
   version ``RK_KAFKA_VERSION`` names, default :data:`reliable_kafka.jars.KAFKA_VERSION`
   (:func:`reliable_kafka.jars.kafka_version`; the fixtures' clusters and secured brokers too).

The container runs ``RK_KAFKA_IMAGE``, default :data:`DEFAULT_KAFKA_IMAGE` (built locally by
``docker/build-images``). It is configured only through ``KAFKA_*`` environment variables, the
interface of the official ``apache/kafka`` image, so ``RK_KAFKA_IMAGE=apache/kafka:4.4.0`` runs
the same way where a registry is reachable. Its port is published on 127.0.0.1 only. testcontainers
is an optional dependency (extra ``[testing]``), imported only when a container is started.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from reliable_kafka.errors import BrokerStartError, ConfigError, MissingExtraError
from reliable_kafka.jars import KAFKA_VERSION, kafka_version

__all__ = [
    "DEFAULT_KAFKA_IMAGE",
    "KafkaSource",
    "choose_kafka_source",
    "docker_available",
    "kafka_container",
    "session_kafka",
]

DEFAULT_KAFKA_IMAGE = f"reliable-kafka/kafka:{KAFKA_VERSION}"
"""The Kafka image ``docker/build-images`` builds from Debian's JRE and the resolved Kafka jars."""

_STARTED = "Kafka Server started"  # kafka.Kafka logs this once the broker serves clients
_STARTUP_TIMEOUT_S = 180.0

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
        container = kafka_container(env.get("RK_KAFKA_IMAGE") or DEFAULT_KAFKA_IMAGE, env=env)
        try:
            yield _start(container)
        finally:
            container.stop()
    else:
        from reliable_kafka.broker import EmbeddedKafka

        with EmbeddedKafka(version=kafka_version(env)) as kafka:
            yield kafka.bootstrap_servers


def kafka_container(
    image: str = DEFAULT_KAFKA_IMAGE, *, host_port: int | None = None, env: Mapping[str, str] | None = None
) -> Any:
    """A not yet started single-node KRaft Kafka container (testcontainers ``DockerContainer``).

    Its listener is published on ``127.0.0.1:host_port`` (a free port when None) and advertised
    under that address, so clients on this machine reach it; nothing else can.
    """
    env = os.environ if env is None else env
    if "TESTCONTAINERS_RYUK_DISABLED" not in env:
        # Ryuk is an image to pull, and this module removes its containers itself (stop()).
        os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        raise MissingExtraError(
            "reliable_kafka.testing: a Kafka container needs testcontainers, an optional "
            "dependency: pip install 'reliable-kafka[testing]' (or set RK_KAFKA=embedded)"
        ) from exc
    port = host_port or _free_port()
    container: Any = DockerContainer(image).with_envs(
        KAFKA_NODE_ID="1",
        KAFKA_PROCESS_ROLES="broker,controller",
        # Clients on this machine use PLAINTEXT (the published port); the broker's requests to
        # itself (e.g. transaction verification) use BROKER, which is reachable inside the container.
        KAFKA_LISTENERS="PLAINTEXT://:9092,BROKER://:19092,CONTROLLER://:9093",
        KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://127.0.0.1:{port},BROKER://localhost:19092",
        KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT",
        KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
        KAFKA_INTER_BROKER_LISTENER_NAME="BROKER",
        KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
        KAFKA_NUM_PARTITIONS="1",
        # One node: internal topics with replication 1. Few partitions, as the embedded broker has
        # (node_properties): the default 50 make a fresh broker load 50 group and 50 transaction
        # coordinators, and the first transactions and commits meet COORDINATOR_LOAD_IN_PROGRESS.
        KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
        KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS="5",
        KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
        KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
        KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS="5",
        KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
        KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
        KAFKA_SHARE_COORDINATOR_STATE_TOPIC_NUM_PARTITIONS="5",
        KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
        KAFKA_LOG_CLEANER_DEDUPE_BUFFER_SIZE=str(16 * 1024 * 1024),  # the default takes 1/4 of the heap
    )
    # with_bind_ports takes a port only (0.0.0.0); docker-py's (ip, port) form keeps it on loopback.
    container.ports["9092/tcp"] = ("127.0.0.1", port)
    container.rk_bootstrap = f"127.0.0.1:{port}"
    return container


def _start(container: Any) -> str:
    """Start ``container``, wait until the broker serves, return its bootstrap address."""
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy  # testcontainers >= 4.14

    container.waiting_for(LogMessageWaitStrategy(_STARTED).with_startup_timeout(int(_STARTUP_TIMEOUT_S)))
    try:
        container.start()
    except Exception as exc:
        log_tail = _log_tail(container)
        container.stop()
        hint = (
            "build it with docker/build-images, or set RK_KAFKA_IMAGE (e.g. apache/kafka:"
            f"{KAFKA_VERSION} where a registry is reachable)"
            if container.image == DEFAULT_KAFKA_IMAGE
            else "check RK_KAFKA_IMAGE"
        )
        raise BrokerStartError(
            f"testing: the Kafka container {container.image} did not start ({type(exc).__name__}: {exc})",
            hint=f"{hint}; or set RK_KAFKA=embedded",
            log_tail=log_tail,
        ) from exc
    bootstrap: str = container.rk_bootstrap  # set by the container's maker, above
    return bootstrap


def _log_tail(container: Any, lines: int = 20) -> str:
    try:
        stdout, stderr = container.get_logs()
    except Exception:  # noqa: BLE001 - never created, or already gone: no log to show
        return ""
    return "\n".join((stdout + stderr).decode(errors="replace").splitlines()[-lines:])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
