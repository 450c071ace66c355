"""The acker's periodic commit never blocks its loop: a due commit waits for a round on which its
outcomes are delivered (then it needs no flush) and goes asynchronously; an asynchronous commit
that failed is sent again. Close still commits at once. In-memory Kafka, one thread, manual clock."""

from __future__ import annotations

from reliable_kafka import Connection, Loop, codec
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka

TOPOLOGY = "t"
GROUP = f"{TOPOLOGY}.ackers"
ACKS = f"{TOPOLOGY}.acks"


class _Holding:
    """The acker's producer, reporting ``held`` records in flight on top of its own queue; counts flushes."""

    def __init__(self, producer) -> None:
        self._producer = producer
        self.held = 0
        self.flushes = 0

    def __len__(self) -> int:
        return len(self._producer) + self.held

    def flush(self, timeout=None) -> int:
        self.flushes += 1
        self.held = 0  # a flush waits until everything is delivered
        return self._producer.flush(timeout)

    def __getattr__(self, name):
        return getattr(self._producer, name)


def _acker() -> tuple[ManualClock, MemoryKafka, AckerWorker, _Holding]:
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = AckerWorker(
        topology=TOPOLOGY,
        connection=Connection("memory", clients=kafka),
        loop=Loop(commit_interval_ms=1000, clock=clock),
    )
    acker.start()
    holding = _Holding(acker._producer)
    acker._producer = holding
    return clock, kafka, acker, holding


def _complete_trees(kafka: MemoryKafka, roots: range) -> None:
    """An INIT and the matching ACK for each root: every tree completes, the low point passes them."""
    init, ack = int(EventKind.INIT), int(EventKind.ACK)
    for root in roots:
        value = codec.encode_ack_batch(7, [init, ack], [root, root], [root * 3, root * 3])
        ListSource(kafka, ACKS).send([{"value": value, "partition": 0}])


def _committed(kafka: MemoryKafka) -> int | None:
    found = kafka.committed(GROUP, ACKS, 0)
    return None if found is None else found[0]


def _acker_with_trees(trees: int) -> tuple[ManualClock, MemoryKafka, AckerWorker, _Holding]:
    """An assigned acker that folded ``trees`` complete trees (roots 1..trees), not yet committed."""
    clock, kafka, acker, producer = _acker()
    for _ in range(10):
        acker.poll_once(0)
        if acker._partitions:
            break
    else:
        raise AssertionError("the acker was not assigned its partition")
    _complete_trees(kafka, range(1, trees + 1))
    acker.poll_once(0)
    return clock, kafka, acker, producer


def test_a_due_commit_waits_for_delivered_outcomes_instead_of_flushing():
    clock, kafka, acker, producer = _acker_with_trees(5)
    clock.advance(1500)
    producer.held = 1  # outcomes on the way
    flushes = producer.flushes
    acker.poll_once(0)
    acker.poll_once(0)
    assert producer.flushes == flushes, "the loop blocked in a flush to commit"
    assert _committed(kafka) is None, "committed while outcomes below the low point were in flight"
    producer.held = 0  # delivered
    acker.poll_once(0)
    assert _committed(kafka) == 5
    acker.close()


def test_a_producer_that_never_drains_is_flushed_after_one_more_interval():
    clock, kafka, acker, producer = _acker_with_trees(3)
    clock.advance(1500)
    producer.held = 1
    acker.poll_once(0)
    assert _committed(kafka) is None
    clock.advance(1100)
    producer.held = 1
    acker.poll_once(0)  # waited one interval: flushes (delivering the outcomes) and commits
    assert producer.flushes >= 1
    acker.poll_once(0)  # serves the asynchronous commit's result
    assert _committed(kafka) == 3
    acker.close()


def test_an_asynchronous_commit_that_failed_is_sent_again():
    clock, kafka, acker, _ = _acker_with_trees(3)
    clock.advance(1500)
    kafka.fail_next("commit")
    acker.poll_once(0)  # the commit fails, reported on the next poll
    acker.poll_once(0)
    assert _committed(kafka) is None
    clock.advance(1500)
    acker.poll_once(0)  # nothing new folded: the same low point is committed again
    assert _committed(kafka) == 3


def test_close_commits_at_once():
    clock, kafka, acker, _ = _acker_with_trees(2)
    acker.close()
    assert _committed(kafka) == 2
