"""The default handler (``emit_to``) forwards a consumed batch at a time (``Spout._process_messages``):
the same tuples, INITs, tracked offsets and error paths as the record-by-record ``_process``."""

from __future__ import annotations

import dataclasses

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka import Tracking, codec
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.produce import ProducerUnusable
from reliable_kafka.spout import Spout
from reliable_kafka.testing.memory_broker import new_message
from reliable_kafka.testing.recording_producer import RecordingProducer


def _spout(producer, *, guarantee="at_least_once", spout_class=Spout) -> Spout:
    spout = spout_class(
        topology="t",
        connection="127.0.0.1:1",
        tracking=Tracking(guarantee=guarantee),
        source_topics="src",
        group_id="g",
        emit_to="out",
    )
    spout._producer = producer
    spout._acks = AckSender(producer, acks_topic="t.acks", ack_partitions=1, sender=spout.task_id)
    return spout


def _messages(headers=None, count=5, partition=0):
    return [
        new_message(topic="src", partition=partition, offset=o, key=b"k%d" % o, value=b"v%d" % o, headers=headers)
        for o in range(count)
    ]


def _init_entries(spout):
    drained = spout._acks._packer.drain()
    if not drained:
        return {}
    [(kinds, roots, vals)] = drained.values()
    assert set(kinds.tolist()) == {EventKind.INIT}
    return dict(zip(roots.tolist(), vals.tolist()))


@pytest.mark.parametrize(
    "headers", [None, [("trace", b"t1")], [(codec.ANCHORS_HEADER, codec.encode_one_anchor(7, 8)), ("trace", b"t1")]]
)
def test_each_record_becomes_one_tracked_tuple_and_its_init_cancels_the_edge(headers):
    producer = RecordingProducer()
    spout = _spout(producer)
    spout._process_messages(_messages(headers) + _messages(headers, count=2, partition=1))
    inits = _init_entries(spout)
    assert len(producer.sent) == 7 and len(inits) == 7
    for topic, value, key, _partition, sent in producer.sent:
        assert topic == "out" and key == b"k" + value[1:]
        anchors = [v for k, v in sent if k == codec.ANCHORS_HEADER]
        assert [(k, v) for k, v in sent if k != codec.ANCHORS_HEADER] == [h for h in headers or [] if h[0] == "trace"]
        [(root, edge)] = codec.decode_anchors(anchors[0]).items()  # the upstream anchors were dropped
        assert inits[root] == edge  # the root's one tuple: INIT val = its edge
    assert spout.tracker.pending_offsets(("src", 0)) == [0, 1, 2, 3, 4]
    assert spout.tracker.pending_offsets(("src", 1)) == [0, 1]
    assert spout.stats.read == spout.stats.emitted == 7
    assert sorted(spout._roots.records) == [(("src", p), o) for p, n in ((0, 5), (1, 2)) for o in range(n)]


def test_records_done_before_are_skipped():
    producer = RecordingProducer()
    spout = _spout(producer)
    spout.tracker.assign(("src", 0), committed=2, done_above=[3])
    spout._process_messages(_messages())
    assert [sent.value for sent in producer.sent] == [b"v2", b"v4"]
    assert spout.stats.skipped_done == 3 and spout.tracker.pending_offsets(("src", 0)) == [2, 4]


def test_a_record_whose_produce_fails_takes_the_handler_error_path_and_the_rest_go_on():
    producer = RecordingProducer(fail_on={b"v2"}, fail_with=KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    spout = _spout(producer)
    spout._process_messages(_messages())
    assert [sent.value for sent in producer.sent] == [b"v0", b"v1", b"v3", b"v4"]
    assert spout.stats.handler_errors == 1
    # the failed record stays pending (failed locally: redelivered after its backoff), nothing is lost
    assert spout.tracker.pending_offsets(("src", 0)) == [0, 1, 2, 3, 4]
    assert spout.tracker.pending_roots() == 4
    assert len(_init_entries(spout)) == 4


def test_records_produced_before_an_unusable_producer_raised_are_tracked():
    """Otherwise the commit point would pass their offsets once later records are tracked."""
    producer = RecordingProducer(fail_on={b"v3"}, fail_with=ProducerUnusable(KafkaError(KafkaError._FENCED)))
    spout = _spout(producer)
    with pytest.raises(ProducerUnusable):
        spout._process_messages(_messages())
    assert spout.tracker.pending_offsets(("src", 0)) == [0, 1, 2]
    assert len(_init_entries(spout)) == 3
    assert spout.tracker.commit_point(("src", 0)) == 0


@pytest.mark.parametrize("guarantee", ["none", "at_most_once"])
def test_an_untracked_spout_forwards_a_batch_without_anchors_and_keeps_no_state(guarantee):
    producer = RecordingProducer(fail_on={b"v1"}, fail_with=KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    spout = _spout(producer, guarantee=guarantee)
    headers = [(codec.ANCHORS_HEADER, codec.encode_one_anchor(7, 8)), ("trace", b"t1")]
    spout._process_messages(_messages(headers, count=3) + _messages(count=1, partition=1))
    assert producer.sent == [
        ("out", b"v0", b"k0", -1, [("trace", b"t1")]),
        ("out", b"v2", b"k2", -1, [("trace", b"t1")]),
        ("out", b"v0", b"k0", -1, None),
    ]
    assert spout.stats.handler_errors == 1 and spout.stats.emitted == 0
    assert spout.tracker._partitions == {} and len(spout._acks) == 0


@pytest.mark.parametrize("guarantee", ["none", "at_most_once"])
def test_an_untracked_spout_leaves_a_full_queue_and_a_refused_record_to_the_slow_paths(guarantee):
    """Records without headers are produced inline: a full local queue still waits for room, a
    refused record still takes the handler's error path."""

    class _FullOnce(RecordingProducer):
        full = 1

        def produce(self, *args, **kwargs):
            if self.full and args[1] == b"v0":
                self.full -= 1
                raise BufferError("Local: Queue full")
            super().produce(*args, **kwargs)

        def poll(self, timeout=0):
            return 0

    producer = _FullOnce(fail_on={b"v1"}, fail_with=KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    spout = _spout(producer, guarantee=guarantee)
    spout._process_messages(_messages(count=3))
    assert [(sent.topic, sent.value, sent.key, sent.headers) for sent in producer.sent] == [
        ("out", b"v0", b"k0", None),
        ("out", b"v2", b"k2", None),
    ]
    assert spout.stats.handler_errors == 1 and spout.stats.read == 3 and len(spout._acks) == 0


def test_a_subclass_that_hooks_process_gets_it_per_record():
    seen = []

    class Hooked(Spout):
        def _process(self, record) -> None:
            seen.append(record.offset)
            super()._process(record)

    producer = RecordingProducer()
    spout = _spout(producer, spout_class=Hooked)
    spout._process_messages(_messages())
    assert seen == [0, 1, 2, 3, 4] and len(producer.sent) == 5
    assert spout.tracker.pending_offsets(("src", 0)) == [0, 1, 2, 3, 4]


def test_completion_hooks_get_each_completed_record_once():
    # a subclass's _completed is called per record (through the default _completed_many); one that
    # overrides _completed_many gets a list per outcome batch
    class PerRecord(Spout):
        def _completed(self, record):
            seen.append(("one", record.offset))

    class PerBatch(Spout):
        def _completed_many(self, records):
            seen.append(("batch", [record.offset for record in records]))

    for spout_class, expected in [
        (PerRecord, [("one", 0), ("one", 1), ("one", 2), ("one", 3), ("one", 4)]),
        (PerBatch, [("batch", [0, 1, 2, 3, 4])]),
        (Spout, []),
    ]:
        seen: list = []
        spout = _spout(RecordingProducer(), spout_class=spout_class)
        assert (spout._roots._on_completed is None) == (spout_class is Spout)
        spout._process_messages(_messages())
        roots = list(_init_entries(spout))
        spout._roots._done_runs(spout.tracker.complete_runs(roots))
        assert seen == expected and spout.stats.completed == 5 and not spout._roots.records


def test_the_tracker_keeps_the_messages_and_a_redelivery_or_dead_letter_gets_their_source_records():
    """The batch path keeps each consumed message with its offset in the tracker's columns, no
    SourceRecord a root; one is made when asked for: a redelivery (as the next attempt) or a dead
    letter gets the record it would have got from the record-by-record path. Done or revoked,
    nothing is kept."""
    from reliable_kafka.core.kinds import OutcomeKind
    from reliable_kafka.spout.records import SourceRecord, source_record

    producer = RecordingProducer()
    spout = _spout(producer)
    messages = _messages([("trace", b"t1")], count=3)
    spout._process_messages(messages)
    roots = list(_init_entries(spout))
    tp = ("src", 0)
    assert [spout.tracker.record(tp, o) for o in range(3)] == messages  # the messages themselves
    assert spout._roots.records[(tp, 1)] == source_record(messages[1])
    assert type(spout._roots.records[(tp, 1)]) is SourceRecord
    spout._roots.on_outcome(roots[1], OutcomeKind.FAILED)
    spout.tracker._clock = lambda: 10**12  # the backoff elapsed
    spout._redeliver_due()
    assert spout.stats.replayed == 1 and len(producer.sent) == 4
    redelivered = spout._roots.records[(tp, 1)]
    assert redelivered == dataclasses.replace(source_record(messages[1]), attempt=2)
    spout._roots._done_runs(spout.tracker.complete_runs([roots[0]]))
    assert (tp, 0) not in spout._roots.records and sorted(spout._roots.records) == [(tp, 1), (tp, 2)]
    spout._roots.forget(tp)
    assert not spout._roots.records
