"""consume_batch: take what is queued at once, block only while nothing is (issue 11's latency), and
then take the other assigned partitions' records sent with the first (issue 11's requests)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.polling import SIBLING_WAIT_BELOW, SIBLING_WAIT_S, SKIP_AFTER_MISS, consume_batch


class _FakeConsumer:
    """consume(n, timeout) as confluent-kafka's: up to n of what is queued; records each call."""

    def __init__(self, queued: list, arriving: list | None = None) -> None:
        self.queued = list(queued)
        self.arriving = list(arriving or [])  # what shows up while a call blocks
        self.calls: list[tuple[int, float]] = []

    def assignment(self) -> list:
        return [("t", 0)]  # one partition: nothing to wait for after the first arrival

    def consume(self, num_messages: int, timeout: float) -> list:
        self.calls.append((num_messages, timeout))
        if not self.queued and timeout > 0:
            self.queued, self.arriving = self.arriving, []
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken


def test_queued_messages_are_returned_without_blocking():
    consumer = _FakeConsumer(queued=list(range(7)))
    assert consume_batch(consumer, 500, 0.1) == list(range(7))
    assert consumer.calls == [(500, 0)]


def test_a_full_batch_is_capped_at_max_records():
    consumer = _FakeConsumer(queued=list(range(12)))
    assert consume_batch(consumer, 5, 0.1) == [0, 1, 2, 3, 4]


def test_when_nothing_is_queued_it_returns_with_the_first_arrival_and_what_came_with_it():
    consumer = _FakeConsumer(queued=[], arriving=["a", "b", "c"])
    assert consume_batch(consumer, 500, 0.1) == ["a", "b", "c"]
    # one blocking call for a single message (returns as soon as it arrives), then the rest at once
    assert consumer.calls == [(500, 0), (1, 0.1), (499, 0)]


def test_idle_returns_empty_after_one_blocking_wait():
    consumer = _FakeConsumer(queued=[])
    assert consume_batch(consumer, 500, 0.1) == []
    assert consumer.calls == [(500, 0), (1, 0.1)]


def test_zero_timeout_never_blocks():
    consumer = _FakeConsumer(queued=[], arriving=["a"])
    assert consume_batch(consumer, 500, 0) == []
    assert consumer.calls == [(500, 0)]


class _Message:
    def __init__(self, partition: int, n: int) -> None:
        self._partition, self.n = partition, n

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def __repr__(self) -> str:
        return f"p{self._partition}#{self.n}"


class _PartitionedConsumer:
    """Assigned ``assigned`` partitions; ``arrivals`` are what each blocking call finds (one group per
    call, in order: a group comes in whole, as records fetched together)."""

    def __init__(self, assigned: int, arrivals: list[list[_Message]]) -> None:
        self.assigned = assigned
        self.arrivals = [list(group) for group in arrivals]
        self.queued: list[_Message] = []
        self.calls: list[tuple[int, float]] = []

    def assignment(self) -> list:
        return [("t", p) for p in range(self.assigned)]

    def consume(self, num_messages: int, timeout: float) -> list:
        self.calls.append((num_messages, timeout))
        if not self.queued and timeout > 0 and self.arrivals:
            self.queued = self.arrivals.pop(0)
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return taken


def test_the_other_partition_sent_with_the_first_is_taken_in_the_same_batch():
    first, second = [_Message(0, 0), _Message(0, 1)], [_Message(1, 2)]
    consumer = _PartitionedConsumer(2, [first, second, [_Message(0, 3)]])
    assert consume_batch(consumer, 500, 0.1) == first + second
    assert consumer.calls == [(500, 0), (1, 0.1), (499, 0), (1, SIBLING_WAIT_S), (497, 0)]


def test_it_stops_waiting_once_every_assigned_partition_is_in_hand():
    consumer = _PartitionedConsumer(3, [[_Message(0, 0)], [_Message(1, 1), _Message(2, 2)], [_Message(0, 3)]])
    assert [m.n for m in consume_batch(consumer, 500, 0.1)] == [0, 1, 2]
    assert consumer.calls.count((1, SIBLING_WAIT_S)) == 1


def test_after_a_wait_in_vain_the_next_batches_take_no_sibling_wait():
    # e.g. a producer's sticky partitioner writes a while to one partition: its siblings never come
    # (an empty group: a blocking call that found nothing)
    arrivals = [[_Message(0, 0)], []] + [[_Message(0, n)] for n in range(1, SKIP_AFTER_MISS + 1)]
    consumer = _PartitionedConsumer(2, arrivals + [[_Message(0, 99)], []])
    waits = []
    for _ in range(SKIP_AFTER_MISS + 2):
        before = consumer.calls.count((1, SIBLING_WAIT_S))
        assert len(consume_batch(consumer, 500, 0.1)) == 1
        waits.append(consumer.calls.count((1, SIBLING_WAIT_S)) - before)
    assert waits == [1] + [0] * SKIP_AFTER_MISS + [1]  # waits again after SKIP_AFTER_MISS batches


def test_a_large_first_arrival_takes_no_sibling_wait():
    first = [_Message(0, n) for n in range(SIBLING_WAIT_BELOW)]
    consumer = _PartitionedConsumer(2, [first, [_Message(1, SIBLING_WAIT_BELOW)]])
    assert consume_batch(consumer, 500, 0.1) == first
    assert (1, SIBLING_WAIT_S) not in consumer.calls


def test_a_consumer_of_one_partition_does_not_wait_after_the_first_arrival():
    consumer = _PartitionedConsumer(1, [[_Message(0, 0)], [_Message(0, 1)]])
    assert [m.n for m in consume_batch(consumer, 500, 0.1)] == [0]
    assert consumer.calls == [(500, 0), (1, 0.1), (499, 0)]


def test_a_sibling_wait_that_brings_nothing_ends_the_batch():
    consumer = _PartitionedConsumer(4, [[_Message(0, 0)]])
    assert [m.n for m in consume_batch(consumer, 500, 0.1)] == [0]
    assert consumer.calls == [(500, 0), (1, 0.1), (499, 0), (1, SIBLING_WAIT_S)]


@given(
    assigned=st.integers(1, 5),
    groups=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=6), max_size=8),
    max_records=st.integers(1, 12),
)
def test_a_batch_is_what_arrived_in_order_capped_and_the_waits_are_bounded(assigned, groups, max_records):
    arrivals, n = [], 0
    for group in groups:
        arrivals.append([_Message(p % assigned, n + i) for i, p in enumerate(group)])
        n += len(group)
    consumer = _PartitionedConsumer(assigned, arrivals)
    batch = consume_batch(consumer, max_records, 0.1)
    # in arrival order, none twice or skipped, never more than asked for
    assert [m.n for m in batch] == list(range(len(batch))) and len(batch) <= max_records
    waits = consumer.calls.count((1, SIBLING_WAIT_S))
    if not arrivals:
        assert batch == [] and waits == 0
        return
    # at most one wait per partition missing after the first arrival
    assert waits <= assigned - len({m.partition() for m in arrivals[0]})
    # a wait happens only while the batch has room and lacks a partition, and only after the
    # previous one brought something
    in_hand = arrivals[0][:max_records]
    for group in arrivals[1 : 1 + waits]:
        assert len(in_hand) < max_records and len({m.partition() for m in in_hand}) < assigned
        in_hand += group[: max_records - len(in_hand)]
    assert batch == in_hand
    done = len(batch) >= max_records or len({m.partition() for m in batch}) >= assigned
    assert done or waits == assigned - len({m.partition() for m in arrivals[0]}) or len(arrivals) <= 1 + waits


def test_the_librarys_consumer_asks_its_assignment_once_in_a_hundred_calls():
    # assignment() is a round trip to librdkafka's main thread (about 25 us); a client that never
    # reaches a broker is enough: assign() is local
    from confluent_kafka import TopicPartition

    from reliable_kafka.kafka.factory import CONFLUENT

    consumer = CONFLUENT.consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "log_level": 0})
    try:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        assert consumer.assigned_count() == 2  # 0 cached before: asked at once
        consumer.assign([TopicPartition("t", p) for p in range(3)])
        assert [consumer.assigned_count() for _ in range(99)] == [2] * 99
        assert consumer.assigned_count() == 3
    finally:
        consumer.close()
