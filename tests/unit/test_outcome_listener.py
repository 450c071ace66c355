"""OutcomeListener.follow at start: the outcome partition's end is asked again while not settled."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka.kafka.outcomes import OutcomeListener
from reliable_kafka.topology import TopologyTopics


class _Consumer:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.assigned: list = []

    def assignment(self):
        return []

    def get_watermark_offsets(self, tp, timeout, cached):
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, 42

    def incremental_assign(self, partitions):
        self.assigned += partitions


def _listener(consumer) -> OutcomeListener:
    listener = OutcomeListener(bootstrap_servers="127.0.0.1:1", topics=TopologyTopics("t"))
    listener._consumer, listener._partitions = consumer, 1
    return listener


def test_follow_asks_again_while_the_new_topic_has_no_settled_leader():
    # seen on a loaded machine: right after an acker created the topic, the broker answered
    # NOT_LEADER_FOR_PARTITION and the spout died at start
    consumer = _Consumer(failures=2)
    listener = _listener(consumer)
    listener.follow(7, timeout=10)
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [(0, 42)]
    assert listener.position(7) == 42


def test_follow_gives_up_after_its_timeout():
    listener = _listener(_Consumer(failures=10**6))
    with pytest.raises(KafkaException):
        listener.follow(7, timeout=0.5)
