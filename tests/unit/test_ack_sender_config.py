"""Ack senders refuse a kafka_config that could write an ack record twice (docs/design.md section 3).

A duplicated INIT record completes its trees before any ack (XOR cancels); a duplicated ACK
record makes them time out. Every component that sends ack events refuses such a configuration
when it is built, before it connects; ``new_producer(ack_sender=...)`` refuses it too (the Spark
writer's tasks build their producers that way).
"""

import pytest
from confluent_kafka import KafkaException, Producer

from reliable_kafka import Connection, Tracking
from reliable_kafka.bolt import Bolt
from reliable_kafka.errors import ConfigError
from reliable_kafka.kafka.clients import check_ack_sender_config, new_producer
from reliable_kafka.spark.bolt import SparkBolt
from reliable_kafka.spark.spout import SparkSpout
from reliable_kafka.spout import Spout

CLOSED = "127.0.0.1:1"  # nothing listens: these tests never reach a broker

# every spelling of "off" that librdkafka reads as false (checked below against librdkafka itself)
IDEMPOTENCE_OFF = [False, "false", "False", "FALSE", "f", "F", 0, "0"]
# values librdkafka refuses outright for a bool: refused here too, with the reason
IDEMPOTENCE_INVALID = [None, "", "no", "off", 2]
DEFEATING = [
    {"acks": 1},
    {"acks": "1"},
    {"acks": 0},
    {"request.required.acks": 1},
    {"default.topic.config": {"acks": 1}},
    {"retries": 0},
    {"message.send.max.retries": "0"},
    {"max.in.flight": 6},
    {"max.in.flight.requests.per.connection": "10"},
    {"queuing.strategy": "lifo"},
]
ACCEPTED = [
    {},
    {"enable.idempotence": True},
    {"enable.idempotence": "true"},
    {"enable.idempotence": "T"},
    {"enable.idempotence": 1},
    {"acks": "all"},
    {"acks": "ALL"},
    {"acks": -1},
    {"acks": "-1"},
    {"retries": 3},
    {"max.in.flight": 5},
    {"queuing.strategy": "fifo"},
    {"linger.ms": 20},
]


def _librdkafka_reads_idempotence_off(value) -> bool:
    # librdkafka refuses acks=1 only when idempotence is on, so acks=1 tells us how it read the value
    try:
        Producer({"bootstrap.servers": CLOSED, "enable.idempotence": value, "acks": 1})
    except KafkaException as exc:
        assert "enable.idempotence" in str(exc), exc
        return False
    return True


@pytest.mark.parametrize("value", IDEMPOTENCE_OFF)
def test_idempotence_off_in_any_spelling_is_refused_with_the_reason(value):
    assert _librdkafka_reads_idempotence_off(value)
    with pytest.raises(ConfigError) as refused:
        check_ack_sender_config({"enable.idempotence": value}, component="spout-1")
    message = str(refused.value)
    assert "spout-1" in message and "enable.idempotence" in message
    assert "duplicated INIT" in message and "complete" in message
    assert "duplicated ACK" in message and "time out" in message


@pytest.mark.parametrize("value", IDEMPOTENCE_INVALID)
def test_values_librdkafka_does_not_read_as_true_are_refused(value):
    with pytest.raises(ConfigError, match="enable.idempotence"):
        check_ack_sender_config({"enable.idempotence": value}, component="bolt-1")


@pytest.mark.parametrize("config", DEFEATING, ids=repr)
def test_settings_that_defeat_idempotence_are_refused(config):
    with pytest.raises(KafkaException):  # librdkafka refuses them with idempotence on, at creation
        Producer({"bootstrap.servers": CLOSED, "enable.idempotence": True, **config})
    with pytest.raises(ConfigError, match="defeats idempotence"):
        check_ack_sender_config(config, component="bolt-1")


@pytest.mark.parametrize("config", ACCEPTED, ids=repr)
def test_idempotent_configurations_are_accepted(config):
    check_ack_sender_config(config, component="bolt-1")
    new_producer(CLOSED, config, ack_sender="bolt-1")  # librdkafka agrees


def test_the_callers_dict_is_not_changed_and_none_means_defaults():
    config = {"default.topic.config": {"acks": "all"}, "enable.idempotence": "true"}
    check_ack_sender_config(config, component="x")
    assert config == {"default.topic.config": {"acks": "all"}, "enable.idempotence": "true"}
    check_ack_sender_config(None, component="x")


def test_new_producer_refuses_for_an_ack_sender_only():
    with pytest.raises(ConfigError, match="spark writer task"):
        new_producer(CLOSED, {"enable.idempotence": "false"}, ack_sender="spark writer task")
    with pytest.raises(ConfigError, match="defeats idempotence"):  # overrides are checked as well
        new_producer(CLOSED, {}, ack_sender="bolt-1", acks=1)
    new_producer(CLOSED, {"enable.idempotence": "false"})  # e.g. an acker's outcome producer


_COMMON = {"topology": "t", "source_topics": "in", "group_id": "g"}
_SPARK = {
    **_COMMON,
    "checkpoint_dir": "/nonexistent",
    "transform": lambda df: df,
    "output_topic": "out",
}
ENTRY_POINTS = {
    "spout": lambda config: Spout(**_COMMON, emit_to="out", connection=Connection(CLOSED, kafka_config=config)),
    "transactional spout": lambda config: Spout(
        **_COMMON, emit_to="out", name="s1", connection=Connection(CLOSED, kafka_config=config), transactional=True
    ),
    "bolt": lambda config: Bolt(
        **_COMMON, handler=lambda t, c: None, connection=Connection(CLOSED, kafka_config=config)
    ),
    "transactional bolt": lambda config: Bolt(
        **_COMMON,
        handler=lambda t, c: None,
        transactional=True,
        name="b1",
        connection=Connection(CLOSED, kafka_config=config),
    ),
    "spark spout": lambda config: SparkSpout(
        None,
        **_SPARK,
        connection=Connection(CLOSED, kafka_config=config),
    ),
    "spark bolt": lambda config: SparkBolt(
        None,
        **_SPARK,
        connection=Connection(CLOSED, kafka_config=config),
    ),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("config", [{"enable.idempotence": "False"}, {"acks": 1}], ids=repr)
def test_every_ack_sending_component_refuses_when_built(entry, config):
    with pytest.raises(ConfigError):
        ENTRY_POINTS[entry](config)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_ack_sending_component_accepts_the_defaults(entry):
    ENTRY_POINTS[entry]({"linger.ms": 1})


@pytest.mark.parametrize("guarantee", ["at_most_once", "none"])
def test_a_spout_that_tracks_nothing_sends_no_ack_events_and_is_not_refused(guarantee):
    Spout(
        **_COMMON,
        emit_to="out",
        connection=Connection(CLOSED, kafka_config={"enable.idempotence": False}),
        tracking=Tracking(guarantee=guarantee),
    )
    Spout(
        **_COMMON,
        emit_to="out",
        connection=Connection(CLOSED, kafka_config={"enable.idempotence": False}),
        tracking=Tracking(ackers=0),
    )
