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


@pytest.mark.parametrize("headers, user_headers, anchors", [
    (None, [], {}),
    ([], [], {}),
    ([("rk-anchors", RAW)], [], {11: 22}),
    ([("trace", b"t1")], [("trace", b"t1")], {}),
    ([("trace", b"t1"), ("rk-anchors", RAW), ("span", b"s")], [("trace", b"t1"), ("span", b"s")], {11: 22}),
    ([("rk-anchors", codec.encode_anchors({1: 2})), ("a", b"1"), ("rk-anchors", RAW)], [("a", b"1")], {11: 22}),
])
def test_the_tuple_gets_the_last_anchors_header_and_every_other_header_in_order(headers, user_headers, anchors):
    seen = []
    bolt = Bolt(topology="t", bootstrap_servers="127.0.0.1:1", source_topics="words", group_id="g",
                handler=lambda tuple_, collector: seen.append(tuple_))
    bolt._process(_Message(headers))
    assert len(seen) == 1
    assert list(seen[0].headers) == user_headers
    assert seen[0].anchored.anchors == anchors
    assert bolt.stats.untracked == (0 if anchors else 1)
