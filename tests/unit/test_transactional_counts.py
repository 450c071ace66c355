"""A transactional spout counts the records a round read and replayed once the round's transaction
commits: an aborted round's records are read again by a later round (in-memory Kafka)."""

from __future__ import annotations

from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.spout.transactional import TransactionalSpout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink, step_until

ON = {"topology": "tx", "bootstrap_servers": "memory", "commit_interval_ms": 0}
LINES = [b"a", b"b", b"c", b"d"]


def _run(*, abort_when) -> tuple[MemoryKafka, TransactionalSpout, list[int]]:
    """Run until every line is committed; the round for which ``abort_when(spout)`` is true first
    (checked as it begins its transaction) aborts. ``b`` fails its first attempt downstream."""
    kafka = MemoryKafka(clock=ManualClock())
    kafka.create_topic("sentences", 1)
    ListSource(kafka, "lines", LINES)
    seen: list[bytes] = []

    def fail_b_once(tuple_, collector) -> None:
        seen.append(tuple_.value)
        if tuple_.value == b"b" and seen.count(b"b") == 1:
            raise ValueError("b fails its first attempt")

    acker = AckerWorker(**ON, clients=kafka)
    sink = BasicBolt(**ON, clients=kafka, source_topics="sentences", group_id="tx.sink", handler=fail_b_once)
    spout = TransactionalSpout(
        **ON,
        clients=kafka,
        source_topics="lines",
        group_id="tx.spout",
        emit_to="sentences",
        name="spout-1",
        backoff=Backoff(initial_ms=0),
    )
    for component in (acker, sink, spout):
        component.start()
    transactions, aborted = spout._transactions, []
    begin = transactions.begin

    def begin_then_maybe_abort() -> None:
        begin()
        if not aborted and abort_when(spout):
            kafka.fail_next("commit_transaction")  # this round's commit fails: the spout aborts it
            aborted.append(transactions.aborted)

    transactions.begin = begin_then_maybe_abort  # type: ignore[method-assign]
    step_until(lambda: (kafka.committed("tx.spout", "lines", 0) or (None,))[0] == len(LINES), spout, sink, acker)
    assert aborted and transactions.aborted == aborted[0] + 1, "no round was aborted"
    return kafka, spout, aborted


def test_an_aborted_rounds_records_are_counted_read_once_when_read_again():
    kafka, spout, _ = _run(abort_when=lambda spout: True)  # the first round, which reads every line
    assert spout.stats.read == len(LINES)
    assert spout.stats.replayed == 1  # b's redelivery
    assert sorted(TopicSink(kafka, "sentences").values()) == sorted([*LINES, b"b"])  # read_committed


def test_an_aborted_rounds_redeliveries_are_counted_replayed_once():
    # the round that redelivers b: handed out by due_redeliveries just before the round began
    kafka, spout, _ = _run(abort_when=lambda spout: spout.tracker.stats.redelivered > 0)
    assert spout.stats.replayed == 1
    assert spout.stats.read == len(LINES)
    assert sorted(TopicSink(kafka, "sentences").values()) == sorted([*LINES, b"b"])
