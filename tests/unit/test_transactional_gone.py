"""A record Kafka deleted while a transactional spout held it in flight: a dead-letter reference,
in the transaction whose commit passes its offset (in-memory Kafka)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from reliable_kafka import Connection, Loop, Tracking, codec
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER
from reliable_kafka.core.spout_state import encode_spout_state
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.ops.dlq import DeadLetter, render_list, render_one
from reliable_kafka.ops.failures import decode_attempts
from reliable_kafka.spout import Spout, TransactionalSpout
from reliable_kafka.spout.transactional import GONE_REASON
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, step_until
from reliable_kafka.topology import TopologyTopics

ON = {"topology": "tx", "loop": Loop(commit_interval_ms=0)}


def _predecessor_left(kafka: MemoryKafka, *, failed: list[int], done: list[int], upto: int, attempts: int = 2) -> None:
    """The commit a predecessor left: ``failed`` offsets whose attempt ``attempts`` failed (the
    second by default: waiting for their third), ``done`` ones completed above the commit point 0,
    emission stopped at ``upto``."""
    metadata, truncated = encode_spout_state(
        0, done, emitted_upto=upto, outcome_position=0, attempts=dict.fromkeys(failed, attempts), failed=failed
    )
    assert not truncated
    committer = kafka.consumer({"group.id": "tx.spout", "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition("lines", 0, 0, metadata)], asynchronous=False)
    committer.close()


def _run(kafka: MemoryKafka, *, abort_first: bool = False) -> tuple[TransactionalSpout, list]:
    acker = AckerWorker(**ON, connection=Connection("memory", clients=kafka))
    acker.start()
    spout = Spout(
        **ON,
        connection=Connection("memory", clients=kafka),
        transactional=True,
        tracking=Tracking(backoff=Backoff(initial_ms=0)),
        source_topics="lines",
        group_id="tx.spout",
        emit_to="sentences",
        name="spout-1",
    )
    sink = BasicBolt(
        **ON,
        connection=Connection("memory", clients=kafka),
        source_topics="sentences",
        group_id="tx.sink",
        handler=lambda t, c: None,
    )
    for component in (spout, sink):
        component.start()
    if abort_first:  # the first transaction (the one that parks the references) aborts
        kafka.fail_next("commit_transaction")
    step_until(lambda: kafka.committed("tx.spout", "lines", 0)[0] == 10, spout, sink, acker)
    return spout, kafka.messages(TopologyTopics("tx").dlq)


def _kafka_with_deleted_records(*, attempts: int = 2) -> MemoryKafka:
    kafka = MemoryKafka(clock=ManualClock())
    kafka.create_topic("sentences", 2)
    ListSource(kafka, "lines", [f"r{i}".encode() for i in range(10)])
    # 0-3 and 5 failed under the predecessor; 4 and 6-9 completed
    _predecessor_left(kafka, failed=[0, 1, 2, 3, 5], done=[4, 6, 7, 8, 9], upto=10, attempts=attempts)
    kafka.delete_records("lines", 0, before=3)  # retention: 0-2 gone before the successor reads them
    return kafka


def _parked(messages) -> list[tuple]:
    out = []
    for m in messages:
        parked = codec.decode_parked(dict(m.headers())[codec.PARKED_HEADER])
        out.append((m.key(), m.value(), parked.source_topic, parked.source_partition, parked.source_offset, parked))
    return out


def test_a_record_deleted_while_in_flight_leaves_a_dead_letter_reference_and_the_commit_passes_it():
    kafka = _kafka_with_deleted_records()
    spout, dlq = _run(kafka)
    parked = _parked(dlq)
    assert [(k, v, t, p, o) for k, v, t, p, o, _ in parked] == [(None, None, "lines", 0, o) for o in (0, 1, 2)]
    for *_, header in parked:
        assert header.reason == GONE_REASON and header.attempts == 2 and header.component == "spout-1"
        assert header.value_omitted and header.original_bytes == -1
    for message in dlq:  # the attempt history, as a copy carries it: the failed second attempt
        headers = dict(message.headers())
        assert [(a.attempt, a.outcome) for a in decode_attempts(headers[ATTEMPTS_HEADER])] == [(2, "FAILED")]
        assert REASON_HEADER not in headers  # dlq list shows the parked reason: why there is no copy
    assert spout.stats.expired_in_flight == 3
    # the two records Kafka still held were redelivered (their third attempt), nothing else lost
    assert sorted(m.value() for m in kafka.messages("sentences")) == [b"r3", b"r5"]
    assert kafka.committed("tx.spout", "lines", 0)[0] == 10


def test_an_aborted_round_parks_the_references_again_once():
    kafka = _kafka_with_deleted_records()
    spout, dlq = _run(kafka, abort_first=True)
    assert [o for *_, o, _ in _parked(dlq)] == [0, 1, 2]  # read_committed: the aborted copies are not there
    assert kafka.committed("tx.spout", "lines", 0)[0] == 10
    assert spout.stats.expired_in_flight == 3  # counted when committed: not again for the aborted round


def test_a_deleted_record_bound_for_the_dlq_is_parked_and_counted_once():
    """Their last attempt failed under the predecessor: bound for the DLQ, found deleted when read
    again, and read again to be written (before, a second reference in the same transaction)."""
    kafka = _kafka_with_deleted_records(attempts=6)  # max_retries 5: 0-3 and 5 are dead letters
    spout, dlq = _run(kafka)
    gone = [(o, header.reason) for k, v, t, p, o, header in _parked(dlq) if v is None]
    assert gone == [(0, GONE_REASON), (1, GONE_REASON), (2, GONE_REASON)]
    assert sorted(o for k, v, t, p, o, _ in _parked(dlq) if v is not None) == [3, 5]  # copies of the rest
    assert spout.stats.expired_in_flight == 3


def test_dlq_shows_a_reference_as_one_and_names_where_the_record_was():
    parked = codec.ParkedRecord(GONE_REASON, 2, "lines", 0, 7, component="spout-1", value_omitted=True)
    letter = DeadLetter(0, 3, 1000, None, None, [(codec.PARKED_HEADER, codec.encode_parked(parked))], parked)
    assert letter.reference == "a reference without the record: Kafka deleted lines[0]@7 before it could be parked"
    assert letter.as_json()["reference"] == letter.reference
    assert "[reference, no value] deleted from Kafka (retention) while in flight" in render_list([letter])
    shown = render_one(letter)
    assert "value     none: a reference without the record: Kafka deleted lines[0]@7" in shown
    assert "key " not in shown  # no empty key/value shown as if they were the record's
    copy = DeadLetter(0, 4, 1000, b"k", b"v", [], codec.ParkedRecord("FAILED", 6, "lines", 0, 8))
    assert copy.reference is None and "[reference" not in render_list([copy])
