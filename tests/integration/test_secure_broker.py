"""A secured embedded broker (SASL/SCRAM-SHA-256, StandardAuthorizer) and the trust model of
docs/design.md section 10: a principal without WRITE on the ack topic cannot forge an ack; a member can."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from spark_helpers import wait_for

from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics


def produce_one(bootstrap: str, config: dict, topic: str) -> KafkaError | None:
    producer = Producer({**config, "bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30_000})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"\x00forged", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(60)
    assert outcome, "no delivery report within 60 s"
    return outcome[0]


def test_clients_need_credentials_and_acls(secure_kafka):
    admin = AdminClient({**secure_kafka.config("admin"), "bootstrap.servers": secure_kafka.bootstrap})
    topology = unique_name("rk-secure")
    acks = TopologyTopics(topology).acks
    admin.create_topics([NewTopic(acks, 1)])[acks].result(60)
    member = AclBinding(
        ResourceType.TOPIC,
        acks,
        ResourcePatternType.LITERAL,
        "User:bolt",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([member]).values():
        future.result(60)
    # The broker's authorizer applies ACL records from the metadata log after create_acls returns.
    on_topic = AclBindingFilter(
        ResourceType.TOPIC, acks, ResourcePatternType.LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    wait_for(
        lambda: admin.describe_acls(on_topic).result(30) == [member],
        timeout=60,
        what="the broker to apply the member's ACL",
    )

    forged = produce_one(secure_kafka.bootstrap, secure_kafka.config("outsider"), acks)
    assert forged is not None and forged.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, forged
    assert produce_one(secure_kafka.bootstrap, secure_kafka.config("bolt"), acks) is None

    wrong_password = {**secure_kafka.config("bolt"), "sasl.password": "not-it"}
    refused = produce_one(secure_kafka.bootstrap, {**wrong_password, "message.timeout.ms": 5000}, acks)
    assert refused is not None and refused.code() in (KafkaError._AUTHENTICATION, KafkaError._MSG_TIMED_OUT), refused

    log = secure_kafka.log_path.read_text(errors="replace")
    assert "User:outsider" in log and "Denied" in log, "the broker log names the refused principal"
    denied = [line for line in log.splitlines() if "Denied" in line]
    assert not any("User:bolt" in line for line in denied), denied


def test_kafka_up_secure_writes_client_properties_and_answers_status(tmp_path, monkeypatch, capsys):
    import stat

    from reliable_kafka.broker import daemon
    from reliable_kafka.cli import main
    from reliable_kafka.security import read_command_config

    monkeypatch.setenv("RK_RUN_DIR", str(tmp_path / "run"))
    assert main(["kafka", "up", "--secure"]) == 0
    try:
        current = daemon.status()
        assert current.running, current.describe()  # status authenticates as admin
        assert "secured" in capsys.readouterr().out
        paths = current.state["client_properties"]
        assert set(paths) == {"admin", "spout", "bolt", "acker", "spark", "outsider"}
        assert stat.S_IMODE(Path(paths["bolt"]).stat().st_mode) == 0o600
        admin = AdminClient({**read_command_config(paths["admin"]), "bootstrap.servers": current.bootstrap})
        topic = unique_name("rk-up-secure")
        admin.create_topics([NewTopic(topic, 1)])[topic].result(60)
        refused = produce_one(current.bootstrap, read_command_config(paths["outsider"]), topic)
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
        plain = AdminClient({"bootstrap.servers": current.bootstrap, "socket.timeout.ms": 5000})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=5)  # no SASL: no answer
    finally:
        assert main(["kafka", "down"]) == 0
