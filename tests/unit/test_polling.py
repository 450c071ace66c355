"""consume_batch: take what is queued at once, block only while nothing is (issue 11's latency)."""

from __future__ import annotations

from reliable_kafka.polling import consume_batch


class _FakeConsumer:
    """consume(n, timeout) as confluent-kafka's: up to n of what is queued; records each call."""

    def __init__(self, queued: list, arriving: list | None = None) -> None:
        self.queued = list(queued)
        self.arriving = list(arriving or [])  # what shows up while a call blocks
        self.calls: list[tuple[int, float]] = []

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
