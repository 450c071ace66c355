"""Topology topics on three brokers: three copies and ``min.insync.replicas`` 2 by default
(docs/design.md section 7.5), from ``ensure_topics``, ``AckerWorker`` and ``reliable-kafka topics``; a warning for an
existing topology topic with fewer copies than the cluster allows."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from reliable_kafka import AckerWorker
from reliable_kafka.cli import main
from reliable_kafka.kafka.admin import admin_client, ensure_topics, partition_count
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.cluster


def _replication(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of ``topic``'s partitions and its min.insync.replicas, read back."""
    admin = admin_client(bootstrap)
    assert partition_count(admin, topic, wait=30), f"{topic} has no partitions after 30 s"
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(timeout=30)
    return {len(p.replicas) for p in partitions}, config["min.insync.replicas"].value


def _all_topics(topics: TopologyTopics) -> list[str]:
    return [*topics.shapes(), topics.status]


def test_ensure_topics_makes_three_copies_two_in_sync(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap_servers
    topics = TopologyTopics(unique_name("rf3"), ackers=2)
    ensure_topics(admin_client(bootstrap), topics)
    assert {topic: _replication(bootstrap, topic) for topic in _all_topics(topics)} == {
        topic: ({3}, "2") for topic in _all_topics(topics)
    }


def test_an_explicit_factor_and_min_insync_are_kept(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap_servers
    topics = TopologyTopics(unique_name("rf2"))
    ensure_topics(admin_client(bootstrap), topics, replication_factor=2, min_insync_replicas=1)
    assert _replication(bootstrap, topics.acks) == ({2}, "1")


def test_the_acker_and_the_topics_command_make_three_copies(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap_servers
    worker = AckerWorker(topology=unique_name("rf3-acker"), connection=bootstrap)
    stop = threading.Event()
    stop.set()  # start, then close at once
    worker.run(stop)
    assert _replication(bootstrap, worker.topics.acks) == ({3}, "2")
    assert _replication(bootstrap, worker.topics.outcomes) == ({3}, "2")

    topology = unique_name("rf3-cli")
    assert main(["topics", "--topology", topology, "--bootstrap-servers", bootstrap, "--ackers", "2"]) == 0
    assert _replication(bootstrap, f"{topology}.acks") == ({3}, "2")
    assert _replication(bootstrap, f"{topology}.dlq") == ({3}, "2")


def test_an_existing_topic_with_fewer_copies_is_warned_about(kafka_cluster, caplog):
    bootstrap = kafka_cluster.bootstrap_servers
    topics = TopologyTopics(unique_name("rf1-old"))
    ensure_topics(admin_client(bootstrap), topics, replication_factor=1)  # as earlier versions made them
    with caplog.at_level(logging.WARNING, logger="reliable_kafka.topology"):
        ensure_topics(admin_client(bootstrap), topics)
    warned = [r.getMessage() for r in caplog.records if topics.acks in r.getMessage()]
    assert warned and "replication factor 1, the cluster allows 3" in warned[0], caplog.text
