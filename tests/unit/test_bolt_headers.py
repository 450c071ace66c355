"""How a bolt splits a record's headers into the tuple's anchors and the user's own headers."""

from __future__ import annotations

import pytest

from reliable_kafka import codec
from reliable_kafka.bolt import Bolt

RAW = codec.encode_anchors({11: 22})


class _Message:
    """The parts of confluent_kafka.Message a bolt reads (headers() returns a new list per call)."""

    def __init__(self, headers) -> None:
        self._headers = headers

    def headers(self):
        return list(self._headers) if self._headers is not None else None

    def topic(self):
        return "words"

    def partition(self):
        return 0

    def offset(self):
        return 7

    def key(self):
        return b"k"

    def value(self):
        return b"v"

    def timestamp(self):
        return (1, 1000)


@pytest.mark.parametrize(
    "headers, user_headers, anchors",
    [
        (None, [], {}),
        ([], [], {}),
        ([("rk-anchors", RAW)], [], {11: 22}),
        ([("trace", b"t1")], [("trace", b"t1")], {}),
        ([("trace", b"t1"), ("rk-anchors", RAW), ("span", b"s")], [("trace", b"t1"), ("span", b"s")], {11: 22}),
        ([("rk-anchors", codec.encode_anchors({1: 2})), ("a", b"1"), ("rk-anchors", RAW)], [("a", b"1")], {11: 22}),
    ],
)
def test_the_tuple_gets_the_last_anchors_header_and_every_other_header_in_order(headers, user_headers, anchors):
    seen = []
    bolt = Bolt(
        topology="t",
        connection="127.0.0.1:1",
        source_topics="words",
        group_id="g",
        handler=lambda tuple_, collector: seen.append(tuple_),
    )
    bolt._process(_Message(headers))
    assert len(seen) == 1
    assert list(seen[0].headers) == user_headers
    assert seen[0].anchored.anchors == anchors
    assert bolt.stats.untracked == (0 if anchors else 1)


class _Batch:
    """A consumer handing out one batch, recording the offsets stored and committed."""

    def __init__(self, messages) -> None:
        self.messages = messages
        self.stored: list = []
        self.commits: list[bool] = []  # asynchronous or not, per commit

    def consume(self, num_messages, timeout):
        batch, self.messages = self.messages, []
        return batch

    def store_offsets(self, *, offsets):
        self.stored.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))

    def commit(self, asynchronous=True):
        self.commits.append(asynchronous)


class _At(_Message):
    def __init__(self, partition, offset, headers=None) -> None:
        super().__init__(headers)
        self._partition, self._offset = partition, offset

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def error(self):
        return None


class _Quiet:
    """Producer, ack sender and quarantine stand-ins: accept everything, send nothing."""

    unsent = 0
    parked: list = []

    def __len__(self) -> int:  # nothing in flight
        return 0

    def send(self):
        return 0

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=0):
        return 0

    def decode_error(self, message, error):
        self.parked.append(message.offset())


def test_one_store_per_batch_past_each_partitions_last_record_even_a_quarantined_one():
    handled = []
    bolt = Bolt(
        topology="t",
        connection="127.0.0.1:1",
        source_topics="words",
        group_id="g",
        handler=lambda tuple_, collector: handled.append((tuple_.partition, tuple_.offset)),
    )
    consumer = _Batch([_At(0, 5), _At(1, 40), _At(0, 6), _At(1, 41, [("rk-anchors", b"\x02bad")]), _At(0, 7)])
    bolt._consumer, bolt._producer, bolt._acks, bolt._quarantine = consumer, _Quiet(), _Quiet(), _Quiet()
    bolt.poll_once(0)
    assert handled == [(0, 5), (1, 40), (0, 6), (0, 7)]
    assert consumer.stored == [[("words", 0, 8), ("words", 1, 42)]]
    assert bolt._quarantine.parked == [41]
    bolt.poll_once(0)  # an empty poll stores nothing
    assert len(consumer.stored) == 1


def test_the_loops_commits_do_not_wait_but_close_waits_for_its_commit():
    bolt = Bolt(
        topology="t",
        connection="127.0.0.1:1",
        source_topics="words",
        group_id="g",
        handler=lambda tuple_, collector: None,
    )
    consumer = _Batch([_At(0, 5)])
    bolt._consumer, bolt._producer, bolt._acks, bolt._quarantine = consumer, _Quiet(), _Quiet(), _Quiet()
    bolt.poll_once(0)
    assert consumer.commits == [True]
    consumer.messages = [_At(0, 6)]
    bolt.poll_once(0)  # within the commit interval: stored, not committed
    assert consumer.commits == [True]
    bolt._on_revoke(consumer, [])
    assert consumer.commits == [True, False]
