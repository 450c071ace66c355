"""FailureIndex catches up to a failures topic that ends with a transaction marker at once.

Transactional bolts write failure records in their transactions; the commit marker takes the last
offset, which no message reports. The index used to wait its whole catch-up timeout (5 s) for an
offset that never comes, on every FAILED outcome whose reason it did not hold.
"""

from __future__ import annotations

from reliable_kafka.ops.failures import FailureIndex, FailureLog, FailureRecord
from reliable_kafka.testing import ManualClock, MemoryKafka


def test_catching_up_past_a_commit_marker_does_not_wait_out_the_timeout():
    clock = ManualClock(start_ms=10_000_000)
    kafka = MemoryKafka(clock=clock, idle_waits_advance_clock=True)  # a wait for nothing moves the clock
    kafka.create_topic("t.failures")
    producer = kafka.producer({"transactional.id": "bolt"})
    producer.init_transactions()
    producer.begin_transaction()
    FailureLog(producer, topic="t.failures", component="bolt", task_id=1).write(
        FailureRecord.of(roots=[42], component="bolt", reason="bad input")
    )
    producer.commit_transaction()
    index = FailureIndex(
        bootstrap_servers="memory", topic="t.failures", group_id="reader", clients=kafka, since_ms=0, clock=clock
    )  # its deadlines on the broker's clock
    before = clock()
    assert [r.reason for r in index.take([42], round_=1)[42]] == ["bad input"]
    assert index.take([7], round_=2) == {}  # not there: a second catch-up, which finds the end at once
    assert clock() - before < 1000, f"the catch-ups waited {clock() - before} ms (5000 ms timeout each)"
