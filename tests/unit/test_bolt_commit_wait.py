"""A bolt's loop never blocks in a flush to commit while its outputs are on the way: a due commit waits
for a round on which nothing is in flight (then it needs no flush), and only after one more commit
interval without such a round does it flush and commit as before. Close and revoke commit at once."""

from __future__ import annotations

from reliable_kafka import Loop
from reliable_kafka.bolt import Bolt
from reliable_kafka.kafka.produce import SEND_WAIT_S
from reliable_kafka.testing import ManualClock
from reliable_kafka.testing.memory_broker import new_message


class _Consumer:
    def __init__(self) -> None:
        self.messages: list = []
        self.commits: list[bool] = []  # asynchronous or not, per commit

    def consume(self, num_messages, timeout):
        batch, self.messages = self.messages, []
        return batch

    def store_offsets(self, *, offsets):
        pass

    def commit(self, asynchronous=True):
        self.commits.append(asynchronous)


class _Producer:
    """Holds ``in_flight`` records until told they are delivered; counts blocking flushes.

    A round's own bounded wait (``send_polled``) is not one: here it ends with the records still
    on the way, as with a slow broker.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.flushes: list[int] = []  # records in flight when each flush began
        self.bounded: list[int] = []  # the same, for the rounds' bounded waits

    def __len__(self) -> int:
        return self.in_flight

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=None):
        if timeout == SEND_WAIT_S:
            self.bounded.append(self.in_flight)
            return self.in_flight
        self.flushes.append(self.in_flight)
        self.in_flight = 0  # a flush waits until everything is delivered
        return 0


class _Acks:
    def __len__(self) -> int:
        return 0

    def send(self):
        return 0


class _Quarantine:
    unsent = 0


def _bolt() -> tuple[Bolt, _Consumer, _Producer, ManualClock]:
    clock = ManualClock()
    bolt = Bolt(
        topology="t",
        connection="127.0.0.1:1",
        loop=Loop(commit_interval_ms=1000, clock=clock),
        source_topics="words",
        group_id="g",
        handler=lambda tuple_, collector: None,
    )
    consumer, producer = _Consumer(), _Producer()
    bolt._consumer, bolt._producer, bolt._acks, bolt._quarantine = consumer, producer, _Acks(), _Quarantine()
    bolt._last_commit = clock.monotonic()  # as after a first commit
    return bolt, consumer, producer, clock


def _round(bolt: Bolt, consumer: _Consumer, offset: int) -> None:
    consumer.messages = [
        new_message(topic="words", partition=0, offset=offset, key=b"k", value=b"v", timestamp=(1, 1000))
    ]
    bolt.poll_once(0)


def test_a_due_commit_waits_for_a_round_with_nothing_in_flight_instead_of_flushing():
    bolt, consumer, producer, clock = _bolt()
    producer.in_flight = 5
    clock.advance(1000)
    _round(bolt, consumer, 1)  # due, but outputs are on the way: no flush, no commit, the loop goes on
    assert producer.flushes == [] and consumer.commits == []
    clock.advance(300)
    producer.in_flight = 0  # delivered meanwhile
    _round(bolt, consumer, 2)  # nothing in flight after this round's poll: commit, nothing to wait for
    assert consumer.commits == [True]
    assert all(in_flight == 0 for in_flight in producer.flushes)  # nothing to wait for


def test_a_producer_that_never_drains_is_flushed_after_one_more_interval():
    bolt, consumer, producer, clock = _bolt()
    producer.in_flight = 5
    clock.advance(1000)
    _round(bolt, consumer, 1)
    clock.advance(999)
    producer.in_flight = 7
    _round(bolt, consumer, 2)  # still busy, not yet one more interval: keep going
    assert producer.flushes == [] and consumer.commits == []
    clock.advance(1)
    producer.in_flight = 3
    _round(bolt, consumer, 3)  # waited a whole interval: flush (blocking, as before) and commit
    assert producer.flushes == [3] and producer.in_flight == 0
    assert consumer.commits == [True]
    clock.advance(1000)
    producer.in_flight = 2
    _round(bolt, consumer, 4)  # the next due commit waits again
    assert producer.flushes == [3] and consumer.commits == [True]


def test_revoke_commits_at_once_even_with_outputs_in_flight():
    bolt, consumer, producer, clock = _bolt()
    producer.in_flight = 5
    _round(bolt, consumer, 1)  # within the interval: stored, not committed
    bolt._on_revoke(consumer, [])
    assert producer.flushes == [5] and consumer.commits == [False]
