"""Recognising refused permissions (reliable_kafka.kafka.authorization) without a broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka.errors import AuthorizationError, ReliableKafkaError
from reliable_kafka.kafka.authorization import check_consumed, check_delivery, guard_delivery, principal_of, refusal


class FakeMessage:
    def __init__(self, topic, error=None):
        self._topic, self._error = topic, error

    def topic(self):
        return self._topic

    def error(self):
        return self._error


class Client:
    component, principal, group_id, transactional_id, subscribed = "bolt-1", "User:bolt", "g", "g.b1", True


WHO = {"component": "bolt-1", "principal": "User:bolt"}


@pytest.mark.parametrize(
    "code, resource_type, operation, resource",
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "TOPIC", "WRITE", "wc.acks"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "GROUP", "READ", "g"),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "TRANSACTIONAL_ID", "WRITE", "g.b1"),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "CLUSTER", "IDEMPOTENT_WRITE", "kafka-cluster"),
    ],
)
def test_each_refusal_names_operation_resource_and_principal(code, resource_type, operation, resource):
    for failure in (KafkaError(code), KafkaException(KafkaError(code))):
        error = refusal(failure, **WHO, operation="WRITE", topic="wc.acks", group="g", transactional_id="g.b1")
        assert isinstance(error, AuthorizationError) and isinstance(error, ReliableKafkaError)
        assert (error.operation, error.resource_type, error.resource, error.principal, error.component) == (
            operation,
            resource_type,
            resource,
            "User:bolt",
            "bolt-1",
        )
        assert error.error == KafkaError(code).name()
        text = str(error)
        assert all(part in text for part in ("bolt-1", "User:bolt", operation, resource, "kafka-acls.sh"))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._MSG_TIMED_OUT,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TRANSPORT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    ],
)
def test_other_errors_are_not_refusals(code):
    assert refusal(KafkaError(code), **WHO, topic="t") is None
    check_delivery(KafkaError(code), FakeMessage("t"), Client())  # no raise


def test_a_refused_delivery_raises_for_the_message_topic():
    with pytest.raises(AuthorizationError) as raised:
        check_delivery(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), FakeMessage("wc.acks"), Client())
    assert (raised.value.operation, raised.value.resource) == ("WRITE", "wc.acks")


def test_guarded_delivery_calls_the_callback_unless_refused():
    seen = []
    callback = guard_delivery(lambda error, message: seen.append(error), [Client()])
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    callback(timed_out, FakeMessage("t"))
    callback(None, FakeMessage("t"))
    assert seen == [timed_out, None]
    with pytest.raises(AuthorizationError):
        callback(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), FakeMessage("t"))
    assert len(seen) == 2


def test_consumed_refusals_name_read_on_the_topic_or_group():
    with pytest.raises(AuthorizationError) as raised:
        check_consumed(FakeMessage("in", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), Client())
    assert (raised.value.operation, raised.value.resource_type, raised.value.resource) == ("READ", "TOPIC", "in")
    with pytest.raises(AuthorizationError) as raised:
        check_consumed(FakeMessage(None, KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)), Client())
    assert (raised.value.operation, raised.value.resource) == ("READ", "g")
    assigning = Client()
    assigning.subscribed = False  # it only looks up the group's coordinator: DESCRIBE
    with pytest.raises(AuthorizationError) as raised:
        check_consumed(
            FakeMessage(None, KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)), assigning, component="outcome reader"
        )
    assert (raised.value.operation, raised.value.component) == ("DESCRIBE", "outcome reader")
    check_consumed(FakeMessage("in", KafkaError(KafkaError._PARTITION_EOF)), Client())  # no raise


def test_principal_of():
    assert principal_of({"sasl.username": "bolt"}) == "User:bolt"
    assert "cert.pem" in principal_of({"security.protocol": "SSL", "ssl.certificate.location": "cert.pem"})
    assert "PLAINTEXT" in principal_of(None)


def test_clients_made_by_the_library_know_their_principal():
    from reliable_kafka.kafka.admin import admin_client
    from reliable_kafka.kafka.clients import new_consumer, new_producer

    config = {
        "sasl.username": "bolt",
        "sasl.password": "x",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
    }
    producer = new_producer("127.0.0.1:1", config, ack_sender="bolt-1", **{"transactional.id": "g.b1"})
    assert (producer.component, producer.principal, producer.transactional_id) == ("bolt-1", "User:bolt", "g.b1")
    consumer = new_consumer("127.0.0.1:1", "g", config)
    try:
        assert (consumer.principal, consumer.group_id, consumer.subscribed) == ("User:bolt", "g", False)
    finally:
        consumer.close()
    assert admin_client("127.0.0.1:1", config, component="c").principal == "User:bolt"


def test_acker_without_describe_configs_warns_which_permission_it_lacks(caplog):
    from reliable_kafka.kafka.admin import warn_if_create_time
    from reliable_kafka.topology import TopologyTopics

    class RefusingAdmin:
        component, principal = "acker-1", "User:acker"

        def describe_configs(self, resources, request_timeout):
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    assert warn_if_create_time(RefusingAdmin(), TopologyTopics("wc")) is False
    assert "User:acker may not DESCRIBE_CONFIGS on wc.acks" in caplog.text
