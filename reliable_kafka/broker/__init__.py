"""A real Kafka broker for tests and local runs: embedded KRaft node(s) in child JVMs."""

from reliable_kafka.broker.embedded import KAFKA_VERSION, EmbeddedCluster, EmbeddedKafka
from reliable_kafka.broker.node import broker_classpath, find_java, probe_broker_ids

__all__ = [
    "KAFKA_VERSION",
    "EmbeddedCluster",
    "EmbeddedKafka",
    "broker_classpath",
    "find_java",
    "probe_broker_ids",
]
