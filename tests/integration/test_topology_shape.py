"""The topology topics' shape on the session broker (one broker): one copy by default, and an ack
topic whose partition count differs from ``ackers`` refused everywhere, after a creation race too."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from reliable_kafka import AckerWorker, Spout, TopologyError, Tracking
from reliable_kafka.kafka.admin import admin_client, ensure_topics, partition_count
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics


def _replicas_and_min_insync(bootstrap: str, topic: str) -> tuple[set[int], str]:
    admin = admin_client(bootstrap)
    assert partition_count(admin, topic, wait=30), f"{topic} has no partitions after 30 s"
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(timeout=30)
    return {len(p.replicas) for p in partitions}, config["min.insync.replicas"].value


def test_a_single_broker_gets_one_copy_and_min_insync_one(kafka_bootstrap):
    topics = TopologyTopics(unique_name("rf1"), ackers=2)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    for topic in (topics.acks, topics.outcomes, topics.dlq, topics.status):
        assert _replicas_and_min_insync(kafka_bootstrap, topic) == ({1}, "1"), topic


def test_more_copies_than_brokers_is_refused_by_the_broker_naming_the_topic(kafka_bootstrap):
    topics = TopologyTopics(unique_name("rf9"))
    with pytest.raises(TopologyError, match=r"cannot create .*INVALID_REPLICATION_FACTOR"):
        ensure_topics(admin_client(kafka_bootstrap), topics, replication_factor=3)


def test_an_acker_that_does_not_create_topics_refuses_another_ackers(kafka_bootstrap):
    topology = unique_name("nocreate")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=1))
    worker = AckerWorker(
        topology=topology, connection=kafka_bootstrap, tracking=Tracking(ackers=2), create_topics=False
    )
    with pytest.raises(TopologyError, match=rf"{topology}\.acks has 1 partitions, ackers=2; run with ackers=1"):
        worker.start()
    worker.close()


def test_an_acker_without_ackers_takes_the_existing_count(kafka_bootstrap):
    topology = unique_name("anyn")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=3))
    for create in (True, False):
        worker = AckerWorker(topology=topology, connection=kafka_bootstrap, create_topics=create)
        try:
            worker.start()
            assert worker.topics.ackers == 3 and worker._ack_partitions == 3
        finally:
            worker.close()


def test_a_spout_refuses_another_ackers_saying_what_to_do(kafka_bootstrap):
    topology = unique_name("spoutn")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=1))
    spout = Spout(
        topology=topology,
        connection=kafka_bootstrap,
        tracking=Tracking(ackers=2),
        source_topics="x",
        group_id="g",
        emit_to="y",
    )
    with pytest.raises(TopologyError, match=r"has 1 partitions, ackers=2; run with ackers=1"):
        spout.start()
    spout.close()


class _LosingTheRace:
    """An admin client whose topics another process creates, with ``ackers=1``, just before it asks."""

    def __init__(self, bootstrap: str, topology: str) -> None:
        self._admin = admin_client(bootstrap)
        self._winner = (admin_client(bootstrap), TopologyTopics(topology, ackers=1))

    def create_topics(self, new_topics, **options):
        ensure_topics(*self._winner)
        return self._admin.create_topics(new_topics, **options)  # TOPIC_ALREADY_EXISTS for each

    def __getattr__(self, name):
        return getattr(self._admin, name)


def test_the_partition_count_is_checked_again_after_a_creation_race(kafka_bootstrap):
    topology = unique_name("race")
    with pytest.raises(TopologyError, match=r"\.acks has 1 partitions, needs 3"):
        ensure_topics(_LosingTheRace(kafka_bootstrap, topology), TopologyTopics(topology, ackers=3))


def test_a_race_with_the_same_shape_is_fine(kafka_bootstrap):
    topology = unique_name("race-same")
    topics = TopologyTopics(topology, ackers=1)
    ensure_topics(_LosingTheRace(kafka_bootstrap, topology), topics)
    listed = admin_client(kafka_bootstrap).list_topics(timeout=10).topics
    assert {topic: len(listed[topic].partitions) for topic in topics.shapes()} == topics.shapes()
