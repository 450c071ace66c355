"""A record Kafka deleted while a Spark spout held it in flight leaves a dead-letter reference (its
coordinates, attempts, no value), and its offset is done only once that reference is delivered; an
offset that holds no record (a transaction marker) is done without one and not counted as lost.

In-memory Kafka (delete_records, transaction markers, delivery faults); the Spark spout's own
root owner, re-reader and batch registration, without Spark (reliable_kafka.spark.spout,
spark.batch_roots, spout.roots)."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka import Tracking, codec
from reliable_kafka.codec import ATTEMPTS_HEADER
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.ops.dlq import DeadLetter
from reliable_kafka.ops.failures import decode_attempts
from reliable_kafka.spark import batch_roots
from reliable_kafka.spark.spout import SparkSpout
from reliable_kafka.spout.roots import GONE_REASON
from reliable_kafka.testing import MemoryKafka
from reliable_kafka.topology import TopologyTopics

TP = ("src", 0)
DLQ = TopologyTopics("sg").dlq


def _kafka(*, records: int = 6, marker: bool = True, after: bool = True) -> MemoryKafka:
    """``records`` plain records of ``src``, then (``marker``) one transactional record, its commit
    marker and (``after``) one more plain record."""
    kafka = MemoryKafka()
    kafka.create_topic("src", 1)
    kafka.create_topic(DLQ, 1)
    producer = kafka.producer({})
    for i in range(records):
        producer.produce("src", f"r{i}".encode(), partition=0)
    producer.flush()
    if marker:
        txn = kafka.producer({"transactional.id": "upstream"})
        txn.init_transactions()
        txn.begin_transaction()
        txn.produce("src", b"in-txn", partition=0)
        txn.commit_transaction()  # offset records + 1 is its commit marker: no record
        if after:
            producer.produce("src", b"after", partition=0)
            producer.flush()
    return kafka


def _spout(kafka: MemoryKafka, *, max_retries: int = 0) -> SparkSpout:
    """A Spark spout as constructed, its clients swapped for in-memory ones (nothing of Spark runs)."""
    spout = SparkSpout(
        None,
        topology="sg",
        connection="memory",
        source_topics="src",
        group_id="sg.job",
        checkpoint_dir="/nonexistent",
        transform=lambda df: df,
        output_topic="out",
        tracking=Tracking(max_retries=max_retries, backoff=Backoff(initial_ms=0)),
    )
    spout._rereader.clients = spout._roots.clients = kafka
    spout._rereader.timeout_s = 5.0
    spout._roots.use_producer(kafka.producer({}))
    spout._roots.restore(TP, 0, None)
    return spout


def _fail(spout: SparkSpout, offsets) -> None:
    """Emit ``offsets`` (first attempts, no record held: Spark has them) and fail their trees."""
    for offset in offsets:
        spout._roots.track(TP, offset, root=1000 + offset, attempt=1)
        spout._roots.on_outcome(1000 + offset, OutcomeKind.FAILED)


def _letters(kafka: MemoryKafka) -> list[DeadLetter]:
    """The DLQ as ``reliable-kafka dlq`` reads it."""
    letters = []
    for m in kafka.messages(DLQ):
        headers = list(m.headers() or [])
        parked = codec.decode_parked(dict(headers)[codec.PARKED_HEADER])
        letters.append(DeadLetter(m.partition(), m.offset(), 0, m.key(), m.value(), headers, parked))
    return letters


def test_dead_letters_of_deleted_records_are_references_and_markers_are_done_without_one():
    kafka = _kafka(records=6)  # 0-5 records, 6 in a transaction, 7 its commit marker
    spout = _spout(kafka)
    _fail(spout, range(8))  # max_retries 0: all bound for the DLQ
    kafka.delete_records("src", 0, before=2)  # retention took 0 and 1 while they were in flight
    spout._write_dead_letters()
    letters = _letters(kafka)
    copies = [d for d in letters if d.reference is None]
    references = [d for d in letters if d.reference is not None]
    assert [d.source[2] for d in copies] == [2, 3, 4, 5, 6] and copies[0].value == b"r2"
    assert [(d.key, d.value, d.source, d.parked.reason, d.parked.attempts) for d in references] == [
        (None, None, ("src", 0, offset), GONE_REASON, 1) for offset in (0, 1)
    ]
    assert all(d.parked.original_bytes == -1 and d.parked.component == spout.name for d in references)
    for reference in references:  # the attempt history, as the copies carry it
        attempts = decode_attempts(dict(reference.headers)[ATTEMPTS_HEADER])
        assert [(a.attempt, a.outcome, a.root) for a in attempts] == [(1, "FAILED", 1000 + reference.source[2])]
    assert spout.lost_to_retention == 2, "the marker at 7 is no lost record"
    assert spout.dead_lettered == 5
    assert [tp.offset for tp in spout._roots.offsets_to_commit()] == [8]


def test_a_marker_at_the_end_of_the_log_is_done_without_a_dead_letter():
    """No record follows the commit marker: before, the re-read waited for one, failed (RereadFailed)
    and left every dead letter of the batch bound, to fail again at the next try."""
    kafka = _kafka(records=3, after=False)  # 0-2 records, 3 in a transaction, 4 its commit marker, the end
    spout = _spout(kafka)
    _fail(spout, range(5))
    spout._write_dead_letters()
    assert [(d.source[2], d.value) for d in _letters(kafka)] == [(0, b"r0"), (1, b"r1"), (2, b"r2"), (3, b"in-txn")]
    assert spout.lost_to_retention == 0 and spout.dead_lettered == 4, "the marker is neither lost nor dead"
    assert not spout._roots.dead_letters_waiting
    assert [tp.offset for tp in spout._roots.offsets_to_commit()] == [5]


def test_a_reference_is_done_only_once_delivered_and_written_again_if_its_write_failed():
    kafka = _kafka(records=3, marker=False)
    spout = _spout(kafka)
    _fail(spout, range(3))
    kafka.delete_records("src", 0, before=1)
    reread = spout._rereader.__call__
    asked: list = []
    spout._roots.reread = lambda keys: (asked.extend(keys), reread(keys))
    kafka.fail_next("delivery")  # the reference (offset 0 is written first) does not arrive
    spout._write_dead_letters()
    assert not [d for d in _letters(kafka) if d.reference is not None]
    assert spout._roots.dead_letters_waiting and spout.lost_to_retention == 0
    assert spout.tracker.commit_points() == {TP: 0}, "never committed past an undelivered reference"
    asked.clear()
    spout._write_dead_letters()
    assert asked == [], "a deleted record is not read again"
    [reference] = [d for d in _letters(kafka) if d.reference is not None]
    assert reference.source == ("src", 0, 0) and spout.lost_to_retention == 1
    assert not spout._roots.dead_letters_waiting
    assert [tp.offset for tp in spout._roots.offsets_to_commit()] == [3]


@pytest.mark.parametrize("attempts", [1, 3])
def test_redeliveries_kafka_deleted_become_references_and_marker_offsets_are_done(monkeypatch, attempts):
    """Redeliveries are read by Spark (a collected batch): what it did not hand out is below the low
    watermark (deleted: a reference with the attempts made) or a marker (done, nothing parked)."""
    kafka = _kafka(records=3)  # 0-2 records, 3 in a transaction, 4 its commit marker
    spout = _spout(kafka, max_retries=5)
    _fail(spout, range(5))
    for _ in range(attempts - 1):  # earlier redeliveries failed too
        for redelivery in spout.tracker.due_redeliveries():
            root = spout.tracker.emitted(redelivery.tp, redelivery.offset, attempt=redelivery.attempt)
            spout._roots.on_outcome(root, OutcomeKind.TIMED_OUT)
    kafka.delete_records("src", 0, before=2)
    watermarks = kafka.consumer({"group.id": "w"})
    spout._batches.low_watermark = lambda tp: watermarks.get_watermark_offsets(TopicPartition(*tp))[0]
    redeliveries = spout.tracker.due_redeliveries()
    assert sorted(r.offset for r in redeliveries) == [0, 1, 2, 3, 4]
    found = {"topic": ["src", "src"], "partition": [0, 0], "offset": [2, 3], "attempt": [attempts + 1] * 2}
    found |= {"root": [7, 8], "edge": [70, 80]}
    monkeypatch.setattr(batch_roots, "record_columns", lambda batch: found)  # what Spark read
    entries, skipped = spout._batches.register(None, None, 1, redeliveries)
    assert entries == [(7, 70), (8, 80)] and skipped == []
    assert spout._roots.dead_letters_waiting, "0 and 1 are bound for the DLQ as references"
    spout._write_dead_letters()
    letters = _letters(kafka)
    assert [(d.value, d.source, d.parked.reason, d.parked.attempts) for d in letters] == [
        (None, ("src", 0, offset), GONE_REASON, attempts) for offset in (0, 1)
    ]
    assert spout.lost_to_retention == 2 and spout.dead_lettered == 0
    for root in (7, 8):
        spout._roots.on_outcome(root, OutcomeKind.COMPLETED)
    assert [tp.offset for tp in spout._roots.offsets_to_commit()] == [5], "the marker at 4 is done"


def test_a_reference_bound_from_a_missing_redelivery_passes_no_guard_and_is_parked_once(monkeypatch):
    kafka = _kafka(records=2, marker=False)
    spout = _spout(kafka, max_retries=5)
    spout._roots.max_dead_letter_ratio = 0.0  # any dead letter would trip it
    _fail(spout, range(2))
    kafka.delete_records("src", 0, before=2)
    spout._batches.low_watermark = lambda tp: 2  # as Kafka says now
    monkeypatch.setattr(batch_roots, "record_columns", lambda batch: {n: [] for n in batch_roots.RECORD_COLUMNS})
    spout._batches.register(None, None, 1, spout.tracker.due_redeliveries())
    spout._write_dead_letters()
    spout._write_dead_letters()
    assert spout._roots.guard_tripped is None
    assert [d.source[2] for d in _letters(kafka)] == [0, 1]
    assert codec.PARKED_HEADER in dict(kafka.messages(DLQ)[0].headers())
    assert [tp.offset for tp in spout._roots.offsets_to_commit()] == [2]


def test_give_up_also_takes_a_record_handed_out_for_its_redelivery():
    spout = _spout(_kafka(records=1, marker=False), max_retries=5)
    _fail(spout, [0])
    [redelivery] = spout.tracker.due_redeliveries()
    action = spout.tracker.give_up(TP, 0, GONE_REASON)
    assert action is not None and action.attempt == 1 and action.reason == GONE_REASON
    assert spout.tracker.give_up(TP, 0, GONE_REASON) is None, "once"


@settings(max_examples=40, deadline=None)
@given(
    records=st.integers(1, 8),
    deleted=st.integers(0, 8),
    failing=st.lists(st.integers(0, 1), max_size=4),
    via_redelivery=st.booleans(),
)
def test_the_commit_never_passes_an_undelivered_reference_and_every_deleted_record_gets_one(
    records, deleted, failing, via_redelivery
):
    """Any mix: records bound for the DLQ or redelivered, ``deleted`` of them gone, deliveries
    failing now and then. The commit point never passes a reference not yet delivered; in the end
    each deleted record has exactly one reference, each other one a copy, and all is committed."""
    deleted = min(deleted, records)
    kafka = _kafka(records=records, marker=False)
    spout = _spout(kafka, max_retries=5 if via_redelivery else 0)
    spout._rereader.timeout_s = 1.0
    _fail(spout, range(records))
    kafka.delete_records("src", 0, before=deleted)
    if via_redelivery:  # Spark read the redeliveries; the deleted ones were not there
        spout._batches.low_watermark = lambda tp: deleted
        kept = [o for o in range(deleted, records)]
        found = {"topic": ["src"] * len(kept), "partition": [0] * len(kept), "offset": kept, "attempt": [2] * len(kept)}
        found |= {"root": [5000 + o for o in kept], "edge": [1] * len(kept)}
        original, batch_roots.record_columns = batch_roots.record_columns, lambda batch: found
        try:
            spout._batches.register(None, None, 1, spout.tracker.due_redeliveries())
        finally:
            batch_roots.record_columns = original
        for o in kept:
            spout._roots.on_outcome(5000 + o, OutcomeKind.COMPLETED)
    for fail in [*failing, 0, 0]:
        if fail:
            kafka.fail_next("delivery")
        spout._write_dead_letters()
        delivered = {d.source[2] for d in _letters(kafka) if d.reference is not None}
        point = spout.tracker.commit_points().get(TP, 0)
        assert all(o in delivered for o in range(min(point, deleted))), "committed past an undelivered reference"
    letters = _letters(kafka)
    assert sorted(d.source[2] for d in letters if d.reference is not None) == list(range(deleted))
    copies = sorted(d.source[2] for d in letters if d.reference is None)
    assert copies == ([] if via_redelivery else list(range(deleted, records)))
    assert spout.tracker.commit_points() == {TP: records} and spout.lost_to_retention == deleted
