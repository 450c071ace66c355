"""A user's setting that a component must own is overridden with a warning naming it, once; and
a refused DESCRIBE on a topology topic names what the role needs there."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from reliable_kafka import Connection
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.acls import needed_on
from reliable_kafka.kafka.authorization import refusal
from reliable_kafka.kafka.clients import new_consumer, new_producer
from reliable_kafka.spout.spout import Spout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka


@pytest.fixture
def kafka() -> MemoryKafka:
    return MemoryKafka(clock=ManualClock())


def test_a_consumer_setting_the_library_owns_is_overridden_with_one_warning(kafka, caplog):
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            consumer = new_consumer("memory", "g-auto-commit", {"enable.auto.commit": "true"}, clients=kafka)
    warnings = [r.getMessage() for r in caplog.records if "enable.auto.commit" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "consumer of group 'g-auto-commit'" in warnings[0] and "'true'" in warnings[0]
    assert consumer.config["enable.auto.commit"] is False  # overridden all the same


def test_a_setting_equal_to_the_librarys_says_nothing(kafka, caplog):
    with caplog.at_level(logging.WARNING):
        new_consumer("memory", "g-same", {"enable.auto.commit": "false", "group.id": "g-same"}, clients=kafka)
        new_producer("memory", {"bootstrap.servers": "memory", "linger.ms": 1}, clients=kafka, component="p")
    assert caplog.records == []


def test_a_producer_setting_a_component_owns_is_named(kafka, caplog):
    with caplog.at_level(logging.WARNING):
        new_producer(
            "memory",
            {"delivery.report.only.error": False},
            clients=kafka,
            component="bolt-x",
            **{"delivery.report.only.error": True},
        )
    assert "bolt-x's producer: kafka_config sets delivery.report.only.error=False" in caplog.text


def test_a_spout_warns_at_start_about_auto_commit(kafka, caplog):
    ListSource(kafka, "lines", [b"a"])
    kafka.create_topic("mid", 1)
    AckerWorker(topology="wc", connection=Connection("memory", clients=kafka)).start()
    spout = Spout(
        topology="wc",
        connection=Connection("memory", kafka_config={"enable.auto.commit": True}, clients=kafka),
        source_topics="lines",
        group_id="wc.spout-auto",
        emit_to="mid",
    )
    with caplog.at_level(logging.WARNING):
        spout.start()
    assert "consumer of group 'wc.spout-auto': kafka_config sets enable.auto.commit=True" in caplog.text
    assert "overrides with False" in caplog.text


def _describe_refused(topic: str, component: str) -> str:
    error = refusal(
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        component=component,
        principal="User:bolt",
        operation="DESCRIBE",
        topic=topic,
    )
    assert error is not None
    return str(error)


def test_a_bolt_refused_describe_on_the_ack_topic_is_told_it_needs_write():
    message = _describe_refused("wc.acks", "bolt-1a2b")
    assert "User:bolt is not allowed DESCRIBE on topic wc.acks" in message
    assert "a bolt needs WRITE on wc.acks" in message
    assert "reliable-kafka acls --role bolt --topology wc --principal User:bolt" in message
    assert "--operation Describe" not in message, "granting DESCRIBE alone would stop it at its next write"


def test_a_component_whose_name_says_no_role_gets_each_roles_needs():
    message = _describe_refused("wc.failures", "wordcount-split")
    for need in ("a spout needs READ on wc.failures", "a bolt needs WRITE on wc.failures", "--role ROLE"):
        assert need in message


def test_a_topic_of_the_users_keeps_the_plain_grant_hint():
    assert needed_on("sentences", component="bolt-1", principal="User:bolt") is None
    assert "--operation Describe --topic sentences" in _describe_refused("sentences", "bolt-1")
