"""A spout that tracks nothing (``guarantee="none"`` or ``"at_most_once"``) forwards each record with no
header and keeps no per-record state: its consumer commits by itself (auto commit) or before emitting,
so the tracker's commit point is never read. At-least-once with ``ackers=0`` still marks each record
done, because its commits come from that commit point."""

from __future__ import annotations

import pytest

from reliable_kafka import Tracking
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.spout import SourceRecord, Spout
from reliable_kafka.testing.recording_producer import RecordingProducer


def _spout(handler=None, **tracking) -> tuple[Spout, RecordingProducer]:
    where = {"handler": handler} if handler is not None else {"emit_to": "out"}
    spout = Spout(
        topology="t",
        connection="127.0.0.1:1",
        source_topics="src",
        group_id="g",
        tracking=Tracking(**tracking),
        **where,
    )
    producer = RecordingProducer()
    spout._producer = producer
    spout._acks = AckSender(producer, acks_topic="t.acks", ack_partitions=0, sender=spout.task_id)
    return spout, producer


def _records(headers=()) -> list[SourceRecord]:
    return [
        SourceRecord("src", 0, offset, b"k%d" % offset, b"v%d" % offset, list(headers), 1000) for offset in range(5)
    ]


@pytest.mark.parametrize("guarantee", ["none", "at_most_once"])
@pytest.mark.parametrize("headers", [(), [("trace", b"t1")]])
def test_an_untracked_spout_forwards_every_record_and_keeps_no_per_record_state(guarantee, headers):
    spout, producer = _spout(guarantee=guarantee)
    for record in _records(headers):
        spout._process(record)
    assert producer.sent == [("out", b"v%d" % o, b"k%d" % o, -1, list(headers) or None) for o in range(5)]
    assert spout.stats.emitted == 0  # counts tracked tuples only
    assert spout.tracker._partitions == {}  # nothing per record: not read by this guarantee's commits
    assert spout.tracker.pending_roots() == 0


@pytest.mark.parametrize("guarantee", ["none", "at_most_once"])
def test_an_untracked_spout_whose_handler_raises_keeps_no_state_either(guarantee):
    def handler(record, collector):
        raise ValueError("bad record")

    spout, producer = _spout(handler, guarantee=guarantee)
    for record in _records():
        spout._process(record)
    assert producer.sent == []
    assert spout.stats.handler_errors == 5
    assert spout.tracker._partitions == {}


def test_at_least_once_with_no_ackers_still_marks_each_record_done_for_its_commits():
    spout, producer = _spout(guarantee="at_least_once", ackers=0)
    spout.tracker.assign(("src", 0), committed=0, done_above=[])
    for record in _records():
        spout._process(record)
    assert len(producer.sent) == 5
    assert spout.tracker._partitions[("src", 0)].commit_point() == 5  # the commit goes past all five
