"""The testcontainers Kafka source (reliable_kafka.testing.session) with the locally built image.

These start their own container, whatever source the session broker uses; CI also runs the
integration suite with RK_KAFKA=docker, so that the session broker itself is this container.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import ConfigResource

from reliable_kafka.kafka.admin import admin_client
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.session import DEFAULT_KAFKA_IMAGE, kafka_container, session_kafka
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = pytest.mark.docker


def test_session_kafka_runs_a_container_and_removes_it(docker_engine):
    """RK_KAFKA=docker: a broker in a container, reachable on 127.0.0.1 only, gone afterwards."""
    with session_kafka({"RK_KAFKA": "docker"}) as bootstrap:
        host, _, port = bootstrap.rpartition(":")
        assert host == "127.0.0.1"
        ours = [
            c
            for c in docker_engine.containers.list()
            if c.image.tags
            and DEFAULT_KAFKA_IMAGE in c.image.tags
            and any(b["HostPort"] == port for b in (c.ports.get("9092/tcp") or []))
        ]
        assert len(ours) == 1, f"no running {DEFAULT_KAFKA_IMAGE} container publishes port {port}"
        container = ours[0]
        assert [b["HostIp"] for b in container.ports["9092/tcp"]] == ["127.0.0.1"], container.ports
        topic = unique_name("rk-container")
        create_topics(bootstrap, {topic: 2})
        produce_values(bootstrap, topic, [b"a", b"b", b"c"])
        assert sorted(m.value() for m in read_topic(bootstrap, topic)) == [b"a", b"b", b"c"]
    assert container.id not in {c.id for c in docker_engine.containers.list(all=True)}, (
        "the container outlived the session"
    )


def test_kafka_variables_become_broker_properties(docker_engine):
    """The image's entrypoint maps KAFKA_X_Y to x.y as apache/kafka does ("__" to "_")."""
    container = kafka_container(DEFAULT_KAFKA_IMAGE).with_envs(
        KAFKA_NUM_PARTITIONS="3", KAFKA_LOG_RETENTION_MS="123456789", KAFKA_CONFLUENT_X__Y="ignored"
    )  # unknown to Kafka: written, then ignored
    from reliable_kafka.testing.session import _start

    bootstrap = _start(container)
    try:
        admin = admin_client(bootstrap)
        (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values()
        config = {name: entry.value for name, entry in future.result(timeout=30).items()}
        assert config["num.partitions"] == "3"
        assert config["log.retention.ms"] == "123456789"
        assert config["advertised.listeners"] == f"PLAINTEXT://{bootstrap},BROKER://localhost:19092"
        written = container.exec(["cat", "/opt/kafka/config/server.properties"]).output.decode()
        assert "confluent.x_y=ignored" in written.splitlines(), written
    finally:
        container.stop()
