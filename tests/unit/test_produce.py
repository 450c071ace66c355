"""produce_tuple: headers, partition choice, and the slow path when the queue is full or the producer failed;
send_polled and the spouts' and bolts' producer defaults."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka import codec
from reliable_kafka.kafka.clients import SENT_PER_POLL, new_producer
from reliable_kafka.kafka.produce import SEND_WAIT_S, ProducerUnusable, produce_headers, produce_tuple, send_polled


class FakeProducer:
    """Records what was produced; raises the queued errors first (one per produce call)."""

    def __init__(self, errors=()) -> None:
        self.errors = list(errors)
        self.sent: list[dict] = []
        self.polls = 0

    def produce(
        self, topic, value=None, key=None, partition=-1, callback=None, on_delivery=None, timestamp=0, headers=None
    ):
        if self.errors:
            raise self.errors.pop(0)
        self.sent.append(
            {
                "topic": topic,
                "value": value,
                "key": key,
                "partition": partition,
                "on_delivery": callback or on_delivery,
                "headers": headers,
            }
        )

    def poll(self, timeout) -> int:
        self.polls += 1
        return 0


def test_an_anchored_tuple_carries_its_anchors_and_lets_the_partitioner_choose():
    producer = FakeProducer()
    produce_tuple(producer, "words", b"v", key=b"k", headers=None, partition=None, anchors={5: 9})
    [sent] = producer.sent
    assert (sent["topic"], sent["value"], sent["key"], sent["partition"]) == ("words", b"v", b"k", -1)
    assert sent["headers"] == [(codec.ANCHORS_HEADER, codec.encode_anchors({5: 9}))]


def test_user_headers_are_kept_and_a_stale_anchors_header_is_replaced():
    producer = FakeProducer()
    stale = codec.encode_anchors({1: 2})
    user = [("a", b"1"), (codec.ANCHORS_HEADER, stale)]
    produce_tuple(producer, "t", b"v", key=None, headers=user, partition=3, anchors={7: 8})
    [sent] = producer.sent
    assert sent["partition"] == 3
    assert sent["headers"] == [("a", b"1"), (codec.ANCHORS_HEADER, codec.encode_anchors({7: 8}))]
    assert user == [("a", b"1"), (codec.ANCHORS_HEADER, stale)]  # the caller's list is not changed


def test_an_untracked_tuple_has_no_anchors_header():
    producer = FakeProducer()
    produce_tuple(producer, "t", b"v", key=None, headers=[(codec.ANCHORS_HEADER, b"x")], partition=None, anchors={})
    assert producer.sent[0]["headers"] == []
    produce_tuple(producer, "t", b"v", key=None, headers=None, partition=None, anchors={})
    assert producer.sent[1]["headers"] is None


def test_a_full_queue_waits_for_room_and_sends_the_tuple_once():
    producer = FakeProducer(errors=[BufferError(), BufferError()])
    produce_tuple(producer, "t", b"v", key=None, headers=None, partition=None, anchors={5: 9})
    assert producer.polls == 1  # the first BufferError goes to the slow path, which polls for room
    assert len(producer.sent) == 1 and producer.sent[0]["partition"] == -1


def test_a_failed_producer_is_reported_as_unusable_not_as_the_tuples_fault():
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    producer = FakeProducer(errors=[fenced, fenced])
    with pytest.raises(ProducerUnusable):
        produce_tuple(producer, "t", b"v", key=None, headers=None, partition=None, anchors={5: 9})
    assert producer.sent == []


def test_a_record_error_passes_through_as_it_is():
    too_large = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))
    producer = FakeProducer(errors=[too_large, too_large])
    with pytest.raises(KafkaException) as raised:
        produce_tuple(producer, "t", b"v", key=None, headers=None, partition=0, anchors={5: 9})
    assert not isinstance(raised.value, ProducerUnusable)


def test_the_positional_call_matches_confluent_kafkas_argument_order():
    """produce_headers passes everything positionally (a keyword costs ~0.7 us a call): slot 7 is
    the timestamp and slot 8 the headers in confluent-kafka's own Producer, and in the in-memory one."""
    from confluent_kafka import Producer

    from reliable_kafka.testing import MemoryKafka

    real = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        with pytest.raises(TypeError, match="headers"):
            real.produce("t", b"v", None, -1, None, None, 0, 5)
        with pytest.raises(TypeError):
            real.produce("t", b"v", None, -1, None, None, "not a timestamp", None)
        real.produce("t", b"v", None, -1, None, None, 0, [("h", b"1")])
    finally:
        real.purge()
    kafka = MemoryKafka()
    kafka.create_topic("t")
    memory = kafka.producer({})
    produce_headers(memory, "t", b"v", b"k", None, [("h", b"1")])
    memory.flush()
    [message] = kafka.messages("t")
    assert (message.key(), message.value(), message.headers()) == (b"k", b"v", [("h", b"1")])


class _Queued(FakeProducer):
    """A producer with ``n`` records not yet delivered, that notes each flush."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.flushes = n, []

    def __len__(self) -> int:
        return self.n

    def flush(self, timeout) -> int:
        self.flushes.append(timeout)
        self.n = 0
        return 0


def test_send_polled_flushes_what_a_poll_produced_within_its_bound_and_nothing_when_it_produced_nothing():
    produced, idle = _Queued(3), _Queued(0)
    send_polled(produced)
    send_polled(idle)
    assert produced.flushes == [SEND_WAIT_S] and len(produced) == 0
    assert idle.flushes == []


def _producer_config(kafka_config=None, **overrides) -> dict:
    made = {}

    class Recording:  # a client factory (reliable_kafka.kafka.factory) that keeps the config
        def producer(self, config):
            made.update(config)
            return FakeProducer()

    new_producer("127.0.0.1:1", kafka_config, clients=Recording(), defaults=SENT_PER_POLL, **overrides)
    return made


def test_component_defaults_lie_under_the_users_kafka_config_and_the_required_settings_over_both():
    assert _producer_config()["linger.ms"] == SENT_PER_POLL["linger.ms"]
    assert _producer_config({"linger.ms": 1})["linger.ms"] == 1  # the user's choice stands
    assert _producer_config({"linger.ms": 1}, **{"linger.ms": 2})["linger.ms"] == 2
    config = _producer_config({"acks": 1})
    assert config["enable.idempotence"] is True and config["acks"] == 1  # library defaults still apply
    assert _producer_config({"bootstrap.servers": "elsewhere:9"})["bootstrap.servers"] == "127.0.0.1:1"
