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


def test_outcome_records_come_in_columns_per_record_and_poll_flattens_them():
    # poll_batches gives (roots, kinds) per outcome record of a followed owner, in order; records of
    # other owners, empty ones and undecodable ones give nothing; poll is the same, root by root
    from reliable_kafka import codec
    from reliable_kafka.core.kinds import OutcomeKind
    from reliable_kafka.testing.memory_broker import new_message

    records = [
        codec.encode_outcomes(7, [11, -12, 13], [0, 1, 0]),
        codec.encode_outcomes(8, [21], [0]),  # another owner on the same partition
        codec.encode_outcomes(7, [], []),
        b"\x01not an outcome record",
        codec.encode_outcomes(7, list(range(1, 61)), [0] * 60),  # read in place (NumPy), all COMPLETED
    ]

    class Consumer:
        def __init__(self) -> None:
            self.left = [new_message(topic="t.outcomes", partition=0, offset=i, value=v) for i, v in enumerate(records)]

        def consume(self, num_messages, timeout):
            taken, self.left = self.left, []
            return taken

    batches_listener, flat_listener = _listener(Consumer()), _listener(Consumer())
    for listener in (batches_listener, flat_listener):
        listener._owners.add(7)
    batches = batches_listener.poll_batches()
    assert [(roots, kinds.tolist()) for roots, kinds in batches] == [
        ([11, -12, 13], [0, 1, 0]),
        (list(range(1, 61)), [0] * 60),
    ]
    assert all(type(root) is int for roots, _ in batches for root in roots)  # the tracker keeps no NumPy scalars
    assert batches_listener.undecodable == 1 and batches_listener._next == {0: 5}
    outcomes = flat_listener.poll()
    assert outcomes == [(11, OutcomeKind.COMPLETED), (-12, OutcomeKind.FAILED), (13, OutcomeKind.COMPLETED)] + [
        (root, OutcomeKind.COMPLETED) for root in range(1, 61)
    ]
    assert all(type(kind) is OutcomeKind for _, kind in outcomes)
