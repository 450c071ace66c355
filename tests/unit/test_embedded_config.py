"""The embedded broker's configuration and its start-up errors that need no JVM."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from reliable_kafka.broker import EmbeddedCluster, EmbeddedKafka, find_java
from reliable_kafka.broker.node import KraftNode, new_cluster_id, node_properties
from reliable_kafka.errors import BrokerStartError, ConfigError


@pytest.mark.parametrize(
    ("nodes", "replication", "min_isr"),
    [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")],
)
def test_internal_topics_fit_the_node_count(nodes, replication, min_isr):
    node = KraftNode(0, Path("/tmp/x/node-0"), 9092, 9093)
    props = node_properties(node, "0@127.0.0.1:9093", nodes, {})
    assert props["offsets.topic.replication.factor"] == replication
    assert props["transaction.state.log.replication.factor"] == replication
    assert props["transaction.state.log.min.isr"] == min_isr
    assert props["share.coordinator.state.topic.replication.factor"] == replication
    assert props["share.coordinator.state.topic.min.isr"] == min_isr
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["num.partitions"] == "1"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"


def test_extra_config_overrides_defaults():
    node = KraftNode(0, Path("/tmp/x/node-0"), 9092, 9093)
    props = node_properties(node, "0@127.0.0.1:9093", 1, {"auto.create.topics.enable": "false"})
    assert props["auto.create.topics.enable"] == "false"


@pytest.mark.parametrize("key", ["listeners", "node.id", "log.dirs", "controller.quorum.voters"])
def test_extra_config_may_not_set_managed_keys(key):
    with pytest.raises(ConfigError, match=key):
        EmbeddedKafka(extra_config={key: "x"})


def test_cluster_needs_a_broker():
    with pytest.raises(ConfigError, match="brokers must be an int >= 1"):
        EmbeddedCluster(brokers=0)


def test_cluster_ids_look_like_kafkas():
    for _ in range(200):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BrokerStartError, match="Java") as caught:
        find_java()
    assert "Java 17" in caught.value.hint


def test_taken_port_is_refused_before_any_jvm(monkeypatch, tmp_path):
    # Point the classpath at an empty KAFKA_HOME with one jar: nothing is resolved or started.
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "fake.jar").write_bytes(b"")
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        kafka = EmbeddedKafka(port=port, data_dir=tmp_path / "data")
        taken_message = f"port {port} on 127.0.0.1 is already in use"
        with pytest.raises(BrokerStartError, match=taken_message) as caught:
            kafka.start()
    assert "port=0" in caught.value.hint
    assert not (tmp_path / "data").exists()


def test_secured_broker_properties_and_scram_users():
    from reliable_kafka.broker.secure import BrokerSecurity

    security = BrokerSecurity(users={"admin": "a1", "bolt": "b2"})
    props = security.broker_properties(port=9092, controller_port=9093, host="127.0.0.1")
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["super.users"] == "User:admin"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert 'username="admin" password="a1"' in props["listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"]
    assert security.format_arguments() == [
        "--add-scram",
        "SCRAM-SHA-256=[name=admin,password=a1]",
        "--add-scram",
        "SCRAM-SHA-256=[name=bolt,password=b2]",
    ]
    assert security.client_config("bolt") == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "bolt",
        "sasl.password": "b2",
    }


@pytest.mark.parametrize("users", [{"bolt": "x"}, {"admin": "a", "b,c": "x"}, {"admin": 'p"w'}, {"admin": ""}])
def test_secured_broker_refuses_users_it_cannot_quote(users):
    from reliable_kafka.broker.secure import BrokerSecurity

    with pytest.raises(ConfigError):
        BrokerSecurity(users=users)
