"""Failure records, attempt headers, the root index, DLQ filters and the tracker's give_up (no broker)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER, ParkedRecord
from reliable_kafka.codec.root_index import MAX_PAIRS_PER_RECORD, decode_root_index
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import ActionKind, Backoff, InFlightTracker
from reliable_kafka.errors import DecodeError, ReliableKafkaError
from reliable_kafka.kafka.parking import park, park_reference
from reliable_kafka.ops.dlq import DeadLetter, parse_time, select
from reliable_kafka.ops.failures import (
    Attempt,
    FailureRecord,
    attempt_headers,
    decode_attempts,
    decode_failure,
    encode_failure,
    reason_of,
)
from reliable_kafka.ops.trace import parse_coordinates
from reliable_kafka.spout.root_index import RootIndex

TP = ("orders", 0)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_the_reason_is_the_given_one_else_the_errors_type_and_message():
    assert reason_of("bad date", ValueError("x")) == "bad date"
    assert reason_of(None, ValueError("bad value")) == "ValueError: bad value"
    assert reason_of(None, KeyError()) == "KeyError"
    assert reason_of(None, None) == "failed"
    assert len(reason_of("x" * 5000, None)) == 1000


def test_a_failure_record_round_trips_and_garbage_is_no_record():
    record = FailureRecord.of(
        roots=[-5, 7],
        component="checker",
        task_id=-9,
        error=ValueError("v"),
        retry=False,
        topic="mid",
        partition=1,
        offset=42,
    )
    back = decode_failure(encode_failure(record))
    assert back == record
    assert back.tuple == {"topic": "mid", "partition": 1, "offset": 42} and back.error_type == "ValueError"
    assert "(no retry)" in back.summary()
    assert decode_failure(b"\x00garbage") is None and decode_failure(b'{"roots": 1}') is None


def test_attempt_headers_name_the_last_reason_and_keep_the_newest_attempts_within_16_kb():
    failure = FailureRecord.of(roots=[1], component="b", reason="r" * 900).__dict__
    attempts = [Attempt(i, i, "FAILED", 1000 + i, [failure]) for i in range(1, 40)]
    headers = dict(attempt_headers(attempts))
    assert headers[REASON_HEADER] == ("r" * 900).encode()
    kept = decode_attempts(headers[ATTEMPTS_HEADER])
    assert len(headers[ATTEMPTS_HEADER]) <= 16_000 and kept[-1].attempt == 39 and len(kept) < 39
    timed_out = dict(attempt_headers([Attempt(1, 5, "TIMED_OUT", 1, [])]))
    assert timed_out[REASON_HEADER] == b"TIMED_OUT"
    assert attempt_headers([]) == [] and decode_attempts(b"not json") == []


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=2**62), int64), max_size=50), int64)
def test_root_index_records_round_trip(pairs, spout):
    sent = []

    class Producer:
        def produce(self, topic, value, key):
            sent.append((topic, key, value))

    index = RootIndex(Producer(), topic="t.roots", spout_id=spout)
    for offset, root in pairs:
        index.add(TP, offset, root)
    index.send()
    index.send()  # nothing pending: nothing sent
    if not pairs:
        assert sent == []
        return
    [(topic, key, value)] = sent
    assert (topic, key) == ("t.roots", b"orders:0") and len(value) == 9 + 16 * len(pairs)
    assert decode_root_index(value) == (spout, pairs)


@given(st.lists(st.lists(st.tuples(st.integers(min_value=0, max_value=2**62), int64), max_size=20), max_size=5))
def test_root_index_add_many_is_add_of_each_pair(batches):
    # a consumed batch's pairs go in with one call (the spout's hot path): the same record, and an
    # empty batch adds nothing (no empty index record)
    sent: dict[str, list] = {"each": [], "many": []}

    def producer(name):
        class Producer:
            def produce(self, topic, value, key):
                sent[name].append((topic, key, value))

        return Producer()

    each = RootIndex(producer("each"), topic="t.roots", spout_id=7)
    many = RootIndex(producer("many"), topic="t.roots", spout_id=7)
    for pairs in batches:
        for offset, root in pairs:
            each.add(TP, offset, root)
        many.add_many(TP, [offset for offset, _ in pairs], [root for _, root in pairs])
    each.send()
    many.send()
    assert sent["many"] == sent["each"]


def test_a_poll_loops_root_index_goes_once_an_interval_or_when_a_record_is_full():
    # one produce request a round was a tenth of a tracked pipeline's requests at 1,000 sentences/s
    sent: list[bytes] = []

    class Producer:
        def produce(self, topic, value, key):
            sent.append(value)

    index = RootIndex(Producer(), topic="t.roots", spout_id=7, interval_s=1.0)
    index.send_due(5.0)  # nothing added: nothing sent
    index.add(TP, 1, 11)
    index.send_due(10.0)  # the first round's goes at once
    index.add(TP, 2, 12)
    index.send_due(10.5)
    index.add(TP, 3, 13)
    index.send_due(10.9)
    assert [decode_root_index(v)[1] for v in sent] == [[(1, 11)]]
    index.send_due(11.0)  # held pairs go together, an interval after the last send
    assert decode_root_index(sent[-1])[1] == [(2, 12), (3, 13)]
    index.add_many(TP, list(range(MAX_PAIRS_PER_RECORD)), list(range(MAX_PAIRS_PER_RECORD)))
    index.send_due(11.1)  # full: at once, within an interval
    assert len(sent) == 3 and len(decode_root_index(sent[-1])[1]) == MAX_PAIRS_PER_RECORD
    index.add_many(TP, list(range(MAX_PAIRS_PER_RECORD + 1)), list(range(MAX_PAIRS_PER_RECORD + 1)))
    index.send()  # send() never holds, and splits what a record cannot hold
    assert [len(decode_root_index(v)[1]) for v in sent[3:]] == [MAX_PAIRS_PER_RECORD, 1]


def test_a_bad_root_index_record_is_a_decode_error():
    with pytest.raises(DecodeError):
        decode_root_index(b"\x01" + b"\x00" * 8 + b"\x00" * 15)


def test_coordinates_are_read_in_both_forms():
    assert parse_coordinates("a.b:3@12") == ("a.b", 3, 12)
    assert parse_coordinates("a:b[3]@12") == ("a:b", 3, 12)
    with pytest.raises(ReliableKafkaError, match="TOPIC:PARTITION@OFFSET"):
        parse_coordinates("orders@12")


def test_times_are_read_as_ms_iso_or_an_age():
    assert parse_time("1700000000000") == 1700000000000
    assert parse_time("2023-11-14T22:13:20") == 1700000000000
    assert parse_time("2023-11-14T23:13:20+01:00") == 1700000000000
    assert parse_time("15m", now_ms=1_000_000_000) == 1_000_000_000 - 900_000
    with pytest.raises(ReliableKafkaError, match="ISO 8601"):
        parse_time("yesterday")


def _letter(offset, *, reason, component, topic="orders", partition=0, parked_at=1000):
    failure = FailureRecord.of(roots=[1], component=component, reason=reason).__dict__
    parked = ParkedRecord(
        reason="FAILED after 1 attempts",
        attempts=1,
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        component="spout",
        parked_at_ms=parked_at,
    )
    return DeadLetter(
        0,
        offset,
        parked_at,
        None,
        b"v",
        [(REASON_HEADER, reason.encode())],
        parked,
        [Attempt(1, 1, "FAILED", parked_at, [failure])],
    )


def test_select_filters_by_reason_component_source_time_and_offsets():
    letters = [
        _letter(0, reason="Bad date", component="parser"),
        _letter(1, reason="timeout calling db", component="enricher", partition=2, parked_at=5000),
        _letter(2, reason="bad date", component="parser", topic="refunds", parked_at=9000),
    ]
    pick = lambda **f: [d.offset for d in select(letters, **f)]  # noqa: E731
    assert pick(reason="BAD DATE") == [0, 2]
    assert pick(component="enrich") == [1]
    assert pick(component="spout") == [0, 1, 2]  # the parking spout counts too
    assert pick(source_topic="orders", source_partition=2) == [1]
    assert pick(since_ms=4000, until_ms=8000) == [1]
    assert pick(offsets=[(0, 2), (1, 0)]) == [2]
    assert json.loads(json.dumps(letters[0].as_json()))["components"] == ["parser", "spout"]


def test_give_up_dead_letters_a_record_waiting_for_its_redelivery():
    now = [0]
    tracker = InFlightTracker(max_retries=5, backoff=Backoff(initial_ms=100), clock=lambda: now[0])
    root = tracker.emitted(TP, 10)
    action = tracker.on_outcome(root, OutcomeKind.FAILED)
    assert action.kind is ActionKind.REDELIVER and action.root == root
    given_up = tracker.give_up(TP, 10, "POISON_PILL")
    assert given_up.kind is ActionKind.DEAD_LETTER and (given_up.offset, given_up.attempt) == (10, 1)
    now[0] = 10_000
    assert tracker.due_redeliveries() == [], "the queued retry is stale"
    assert tracker.give_up(TP, 10, "again") is None, "only a record waiting for its retry"
    assert tracker.commit_point(TP) == 10
    tracker.dead_lettered(TP, 10)
    assert tracker.commit_point(TP) == 11 and tracker.dead_letters_by_reason == {"POISON_PILL": 1}


def test_give_up_ignores_records_in_flight_or_unknown():
    tracker = InFlightTracker(max_retries=5)
    tracker.emitted(TP, 3)
    assert tracker.give_up(TP, 3, "x") is None and tracker.give_up(TP, 4, "x") is None
    assert tracker.give_up(("other", 0), 3, "x") is None


class _Producer:
    """Takes what is produced; refuses the first ``too_large`` produce calls as over message.max.bytes."""

    def __init__(self, too_large: int = 0) -> None:
        self.too_large, self.sent = too_large, []

    def produce(self, topic, value=None, key=None, headers=None, on_delivery=None):
        if self.too_large:
            self.too_large -= 1
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))
        self.sent.append((key, value, headers))


def test_a_reference_carries_the_attempt_history_and_none_of_the_records_headers():
    """Nor rk-reason: ``dlq list`` shows it as the reason, in place of why there is no copy."""
    history = attempt_headers([Attempt(1, 11, "FAILED", 1000, []), Attempt(2, 12, "TIMED_OUT", 2000, [])])
    own = [("trace-id", b"abc")]
    gone = _Producer()
    park_reference(gone, "t.dlq", parked=ParkedRecord("deleted", 2, "src", 0, 7), headers=own + history)
    too_large = _Producer(too_large=1)  # the copy is refused: a reference goes instead
    park(
        too_large,
        "t.dlq",
        key=b"k",
        value=b"v" * 10,
        headers=own + history,
        parked=ParkedRecord("FAILED", 2, "src", 0, 8),
    )
    for producer in (gone, too_large):
        [(key, value, headers)] = producer.sent
        names = [name for name, _ in headers]
        assert key is None and value is None and names == [ATTEMPTS_HEADER, "rk-parked"]  # not rk-reason
        assert [a.attempt for a in decode_attempts(dict(headers)[ATTEMPTS_HEADER])] == [1, 2]
