"""Consumer and producer settings kept apart: ``consumer_config`` / ``producer_config`` over ``kafka_config``.

librdkafka ignores a consumer property on a producer (and the other way round) with a CONFWARN
line, and some settings want different values per role; each role gets only its own overrides.
"""

import pickle
import types

import pytest

from reliable_kafka import Connection
from reliable_kafka.acker import AckerWorker
from reliable_kafka.bolt import Bolt
from reliable_kafka.errors import ConfigError
from reliable_kafka.kafka import clients
from reliable_kafka.kafka.config import ClientConfig, client_config, consumer_settings, producer_settings
from reliable_kafka.spark.bolt import SparkBolt
from reliable_kafka.spark.spout import SparkSpout
from reliable_kafka.spout import Spout

CLOSED = "127.0.0.1:1"  # nothing listens: these tests never reach a broker
SHARED = {"client.id": "app", "security.protocol": "PLAINTEXT"}
CONSUMER = {"fetch.max.bytes": 1_000_000, "client.id": "app-reader"}
PRODUCER = {"linger.ms": 50, "compression.type": "zstd"}

_COMMON = {"topology": "t", "source_topics": "in", "group_id": "g"}
_SPARK = {
    **_COMMON,
    "checkpoint_dir": "/nonexistent",
    "transform": lambda df: df,
    "output_topic": "out",
}
COMPONENTS = {  # each takes the settings in its Connection
    "spout": lambda **c: Spout(**_COMMON, emit_to="out", connection=Connection(CLOSED, **c)),
    "transactional spout": lambda **c: Spout(
        **_COMMON, emit_to="out", name="s1", transactional=True, connection=Connection(CLOSED, **c)
    ),
    "bolt": lambda **c: Bolt(**_COMMON, handler=lambda t, col: None, connection=Connection(CLOSED, **c)),
    "acker worker": lambda **c: AckerWorker(topology="t", connection=Connection(CLOSED, **c)),
    "spark spout": lambda **c: SparkSpout(None, **_SPARK, connection=Connection(CLOSED, **c)),
    "spark bolt": lambda **c: SparkBolt(None, **_SPARK, connection=Connection(CLOSED, **c)),
}


def test_each_role_gets_the_shared_settings_with_its_own_over_them():
    config = client_config(SHARED, consumer_config=CONSUMER, producer_config=PRODUCER)
    assert dict(config) == SHARED  # what admin clients and Spark's security options read
    assert consumer_settings(config) == {**SHARED, **CONSUMER}
    assert producer_settings(config) == {**SHARED, **PRODUCER}
    assert consumer_settings(SHARED) == producer_settings(SHARED) == SHARED  # a plain dict: shared only
    assert consumer_settings(None) == producer_settings(None) == {}


def test_the_callers_dicts_are_copied_never_changed():
    shared, consumer = dict(SHARED), dict(CONSUMER)
    config = client_config(shared, consumer_config=consumer)
    config["x"] = 1
    config.consumer["y"] = 2
    consumer_settings(config)["z"] = 3
    assert shared == SHARED and consumer == CONSUMER
    assert "z" not in config.consumer


def test_a_client_config_given_as_kafka_config_keeps_its_roles_and_takes_more():
    inner = ClientConfig(SHARED, consumer={"fetch.max.bytes": 1}, producer={"linger.ms": 1})
    config = client_config(inner, consumer_config={"fetch.max.bytes": 2})
    assert config.consumer == {"fetch.max.bytes": 2} and config.producer == {"linger.ms": 1}


def test_it_pickles_with_its_roles_for_spark_tasks():
    config = client_config(SHARED, consumer_config=CONSUMER, producer_config=PRODUCER)
    copy = pickle.loads(pickle.dumps(config))
    assert isinstance(copy, ClientConfig) and copy == config
    assert copy.consumer == CONSUMER and copy.producer == PRODUCER


def test_new_consumer_and_new_producer_give_each_client_only_its_role():
    made = {}

    class Recording:  # a client factory (reliable_kafka.kafka.factory) that keeps each client's config
        def producer(self, config):
            made["producer"] = config
            return types.SimpleNamespace()

        def consumer(self, config):
            made["consumer"] = config
            return types.SimpleNamespace()

    config = client_config(SHARED, consumer_config=CONSUMER, producer_config=PRODUCER)
    clients.new_consumer(CLOSED, "g", config, clients=Recording())
    clients.new_producer(CLOSED, config, clients=Recording())
    consumer, producer = made["consumer"], made["producer"]
    assert consumer["fetch.max.bytes"] == 1_000_000 and consumer["client.id"] == "app-reader"
    assert "linger.ms" not in consumer and "compression.type" not in consumer
    assert producer["linger.ms"] == 50 and producer["compression.type"] == "zstd"
    assert producer["client.id"] == "app" and "fetch.max.bytes" not in producer
    assert producer["enable.idempotence"] is True  # the library's own settings still apply


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_every_component_takes_consumer_and_producer_config(name):
    component = COMPONENTS[name](kafka_config=SHARED, consumer_config=CONSUMER, producer_config=PRODUCER)
    assert consumer_settings(component.kafka_config) == {**SHARED, **CONSUMER}
    assert producer_settings(component.kafka_config) == {**SHARED, **PRODUCER}


@pytest.mark.parametrize("name", sorted(set(COMPONENTS) - {"acker worker"}))
def test_an_ack_sender_refuses_a_producer_config_that_turns_idempotence_off(name):
    with pytest.raises(ConfigError, match="enable.idempotence"):
        COMPONENTS[name](producer_config={"enable.idempotence": "false"})
    COMPONENTS[name](consumer_config={"enable.idempotence": "false"})  # no consumer sends acks


def test_demo_run_takes_bootstrap_servers():
    import inspect

    from reliable_kafka import demo

    assert "bootstrap_servers" in inspect.signature(demo.run).parameters
    assert "bootstrap" not in inspect.signature(demo.run).parameters
