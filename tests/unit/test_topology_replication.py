"""How many copies new topology topics get (docs/design.md section 7.5): min(3, brokers), min.insync.replicas
min(2, copies), unless given; wrong values are a ConfigError naming them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from reliable_kafka.errors import ConfigError, TopologyError
from reliable_kafka.kafka.admin import replication_for
from reliable_kafka.topology import Replication, TopologyTopics, check_ack_partitions


class _Admin:
    def __init__(self, brokers: int) -> None:
        self._brokers = brokers

    def list_topics(self, timeout: float = -1):
        return SimpleNamespace(brokers={i: object() for i in range(self._brokers)}, topics={})


@pytest.mark.parametrize(("brokers", "expected"), [(0, (1, 1)), (1, (1, 1)), (2, (2, 2)), (3, (3, 2)), (7, (3, 2))])
def test_the_default_follows_the_cluster_size(brokers, expected):
    assert replication_for(_Admin(brokers)) == Replication(*expected)


def test_given_values_are_kept_and_min_insync_defaults_from_the_factor():
    assert replication_for(_Admin(5), 5, 3) == Replication(5, 3)
    assert replication_for(_Admin(1), 2) == Replication(2, 2)  # the broker refuses it, naming the topic
    assert replication_for(_Admin(3), None, 1) == Replication(3, 1)
    assert Replication(3, 2).topic_config() == {"min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("factor", "min_insync", "named"),
    [
        (0, None, "replication_factor"),
        ("3", None, "replication_factor"),
        (True, None, "replication_factor"),
        (None, 0, "min_insync_replicas"),
        (2, 3, "min_insync_replicas=3"),
    ],
)
def test_wrong_values_are_refused_by_name(factor, min_insync, named):
    with pytest.raises(ConfigError, match=named):
        replication_for(_Admin(3), factor, min_insync)


def test_an_ack_partition_count_other_than_ackers_is_refused_saying_what_to_do():
    topics = TopologyTopics("wc", ackers=4)
    check_ack_partitions("acker-a", topics, 4, 4)
    check_ack_partitions("acker-a", topics, 4, None)  # not given: any N
    with pytest.raises(
        TopologyError, match=r"acker-a: ack topic wc\.acks has 4 partitions, ackers=2; run with ackers=4"
    ):
        check_ack_partitions("acker-a", topics, 4, 2)
