"""A transactional spout writes a dead letter in the transaction whose commit passes its record, so a
crash right after that transaction neither loses the record nor parks it twice (in-memory Kafka)."""

from __future__ import annotations

from reliable_kafka import Connection, Loop, Tracking
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.spout_state import decode_spout_state
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.spout import Spout, TransactionalSpout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink, step_until
from reliable_kafka.topology import TopologyTopics

ON = {"topology": "tx", "loop": Loop(commit_interval_ms=0)}
LINES = [b"a", b"poison", b"b", b"c"]


def _spout(kafka: MemoryKafka) -> TransactionalSpout:
    spout = Spout(
        **ON,
        connection=Connection("memory", clients=kafka),
        transactional=True,
        tracking=Tracking(max_retries=1, backoff=Backoff(initial_ms=0)),
        source_topics="lines",
        group_id="tx.spout",
        emit_to="sentences",
        name="spout-1",
    )
    spout.start()
    return spout


def _committed_offset(kafka: MemoryKafka) -> int | None:
    committed = kafka.committed("tx.spout", "lines", 0)
    return None if committed is None else committed[0]


def _fails_poison(tuple_, collector) -> None:
    if tuple_.value == b"poison":
        raise ValueError("downstream refuses this line")


def _topology() -> tuple[MemoryKafka, AckerWorker, BasicBolt]:
    """``LINES`` in the source, an acker, and a sink bolt that fails every attempt of ``poison``."""
    kafka = MemoryKafka(clock=ManualClock())
    kafka.create_topic("sentences", 1)
    ListSource(kafka, "lines", LINES)
    acker = AckerWorker(**ON, connection=Connection("memory", clients=kafka))
    sink = BasicBolt(
        **ON,
        connection=Connection("memory", clients=kafka),
        source_topics="sentences",
        group_id="tx.sink",
        handler=_fails_poison,
    )
    acker.start()
    sink.start()
    return kafka, acker, sink


def test_a_crash_right_after_the_round_that_parked_a_dead_letter_does_not_park_it_again():
    kafka, acker, sink = _topology()
    dlq = TopicSink(kafka, TopologyTopics("tx").dlq)
    first = _spout(kafka)
    # the condition is checked before each round, and the spout polls first in a round: this stops
    # right after the spout's round (transaction) that wrote the dead letter
    step_until(lambda: len(dlq) == 1, first, sink, acker)
    committed, metadata = kafka.committed("tx.spout", "lines", 0)
    assert committed == len(LINES) or 1 in decode_spout_state(committed, metadata)[0], (
        f"the transaction that parked offset 1 committed {committed} ({metadata!r}) without passing it"
    )
    kafka.crash(first._consumer)  # dies before its next round
    kafka.crash(first._producer)

    second = _spout(kafka)
    step_until(lambda: _committed_offset(kafka) == len(LINES), second, sink, acker)
    assert dlq.values() == [b"poison"], "the dead letter was parked again after the restart"
    # poison's two attempts, nothing emitted again by the restarted spout
    assert sorted(TopicSink(kafka, "sentences").values()) == sorted([*LINES, b"poison"])
    assert second.stats.dead_lettered == 0 and second.stats.replayed == 0


def test_an_aborted_round_drops_its_dead_letter_and_the_round_that_commits_parks_it_once():
    kafka, acker, sink = _topology()
    spout = _spout(kafka)
    write_dead_letters, aborted = spout._roots.write_dead_letters, []

    def write_then_fail_the_commit() -> int:
        written = write_dead_letters()
        if written and not aborted:  # the transaction that holds the first dead letter aborts
            kafka.fail_next("commit_transaction")
            aborted.append(written)
        return written

    spout._roots.write_dead_letters = write_then_fail_the_commit  # type: ignore[method-assign]
    step_until(lambda: _committed_offset(kafka) == len(LINES), spout, sink, acker)
    assert aborted == [1]
    assert TopicSink(kafka, TopologyTopics("tx").dlq).values() == [b"poison"]  # read_committed: one copy
    assert spout.stats.dead_lettered == 1  # counted when its transaction committed, not for the aborted one
    # the tracker's counters are put back with its state: the aborted round's work counts once
    assert spout.tracker.stats.dead_lettered == 1
    assert spout.tracker.stats.completed == len(LINES) - 1
