"""The shared recording fake takes confluent-kafka's produce arguments by position or by keyword alike."""

from __future__ import annotations

import pytest

from reliable_kafka.errors import ArgumentError
from reliable_kafka.testing.recording_producer import Produced, RecordingProducer


def test_positional_and_keyword_calls_record_the_same_call_and_flush_empties_the_queue():
    producer = RecordingProducer()
    producer.produce("t", b"v", b"k", 2, None, None, 0, [("h", b"1")])
    producer.produce("t", value=b"v", key=b"k", partition=2, headers=[("h", b"1")])
    assert producer.sent == [Produced("t", b"v", b"k", 2, [("h", b"1")])] * 2 and len(producer) == 2
    assert producer.flush(0) == 0 and len(producer) == 0


def test_fail_on_raises_for_those_values_only_and_needs_an_exception():
    producer = RecordingProducer(fail_on={b"bad"}, fail_with=BufferError("full"))
    with pytest.raises(BufferError):
        producer.produce("t", b"bad")
    producer.produce("t", b"good")
    assert [sent.value for sent in producer.sent] == [b"good"]
    with pytest.raises(ArgumentError):
        RecordingProducer(fail_on={b"bad"})
