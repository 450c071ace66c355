"""reliable-kafka: Storm's guaranteed message processing for Kafka and PySpark.

The public API in one place; PySpark integration lives in ``reliable_kafka.spark`` (imported
separately, so that plain consumers never load Spark).
"""

from reliable_kafka.acker import AckerStats, AckerWorker
from reliable_kafka.bolt import BasicBolt, Bolt, BoltCollector, BoltStats, Parallel, Tuple
from reliable_kafka.config import Connection, Loop, TopicCreation, Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import (
    ArgumentError,
    BrokerStartError,
    ComponentDiedError,
    ConfigError,
    DecodeError,
    DeliveryError,
    JarResolutionError,
    ReliableKafkaError,
    StateError,
    TopologyError,
    WaitTimeoutError,
)
from reliable_kafka.kafka.admin import ensure_topics
from reliable_kafka.local import LocalCluster
from reliable_kafka.spout import SourceRecord, Spout, SpoutCollector, SpoutStats, TransactionalSpout
from reliable_kafka.topology import TopologyTopics
from reliable_kafka.version import __version__

__all__ = [
    "__version__",
    "Connection",
    "Tracking",
    "Loop",
    "TopicCreation",
    "Parallel",
    "AckerWorker",
    "AckerStats",
    "Spout",
    "TransactionalSpout",
    "SpoutCollector",
    "SourceRecord",
    "SpoutStats",
    "Backoff",
    "Bolt",
    "BasicBolt",
    "BoltCollector",
    "BoltStats",
    "Tuple",
    "LocalCluster",
    "TopologyTopics",
    "ensure_topics",
    "ReliableKafkaError",
    "ConfigError",
    "DecodeError",
    "BrokerStartError",
    "JarResolutionError",
    "TopologyError",
    "DeliveryError",
    "ArgumentError",
    "StateError",
    "WaitTimeoutError",
    "ComponentDiedError",
]
