"""Fatal Kafka client errors (a fenced static member, a fenced producer) never leave a component
idle: the acker and the outcome reader make new clients, within bounds; the others stop with
ClientFailed. In-memory Kafka with librdkafka's fatal consumer behaviour, one thread, manual clock."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reliable_kafka import Connection, Loop, Tracking, codec
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.fatal import ClientFailed, Rebuilds, client_failed, fatal_error, is_fatal
from reliable_kafka.kafka.outcomes import OutcomeListener
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka
from reliable_kafka.topology import TopologyTopics

TOPOLOGY = "t"
ACKS = f"{TOPOLOGY}.acks"
OUTCOMES = f"{TOPOLOGY}.outcomes"
FENCED = KafkaError(
    KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other consumer with same group.instance.id"
)
SPOUT = 7
STATIC = {"group.id": "g", "group.instance.id": "g.a", "auto.offset.reset": "earliest", "enable.auto.commit": False}


# --- the classification -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code", [KafkaError._FATAL, KafkaError._FENCED, KafkaError.FENCED_INSTANCE_ID, KafkaError.PRODUCER_FENCED]
)
def test_fatal_codes_are_fatal_even_without_the_fatal_flag(code):
    # librdkafka's consumed _FATAL event has fatal() False (measured with confluent-kafka 2.16)
    assert is_fatal(KafkaError(code, "x"))
    assert fatal_error(KafkaException(KafkaError(code, "x"))) is not None


def test_routine_errors_are_not_fatal():
    for code in (
        KafkaError._PARTITION_EOF,
        KafkaError._TRANSPORT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
    ):
        assert not is_fatal(KafkaError(code, "x"))
    assert not is_fatal(None)
    assert fatal_error(RuntimeError("x")) is None


def test_unknown_member_is_fatal_only_for_a_static_member():
    unknown = KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "x")
    assert not is_fatal(unknown)
    assert is_fatal(unknown, instance_id="g.a")


def test_rebuilds_are_bounded_and_the_last_error_names_the_instance():
    clock = ManualClock()
    rebuilds = Rebuilds(limit=2, window_s=60, backoff_s=1, clock=clock)
    failed = client_failed(FENCED, component="acker-a", instance_id="g.acker-a")
    rebuilds.allow(failed)
    rebuilds.allow(failed)
    assert rebuilds.count == 2
    with pytest.raises(ClientFailed, match="g.acker-a.*its own name"):
        rebuilds.allow(failed)
    clock.advance(61_000)  # the window passed: a coordinator move much later is one more rebuild
    rebuilds.allow(failed)
    assert rebuilds.count == 3


# --- the in-memory consumer behaves as librdkafka's fenced one -------------------------------


def test_a_fatal_consume_fault_is_one_event_then_nothing_and_close_works():
    kafka = MemoryKafka()
    kafka.create_topic("src")
    ListSource(kafka, "src").send([b"a", b"b"])
    consumer = kafka.consumer(STATIC)
    consumer.subscribe(["src"])
    consumer.consume(10, 0)
    kafka.fail_next("consume", error=FENCED)
    events = consumer.consume(10, 0)
    assert [m.error().code() for m in events] == [KafkaError._FATAL]
    assert consumer.consume(10, 0) == []
    with pytest.raises(KafkaException) as raised:
        consumer.commit(offsets=[TopicPartition("src", 0, 1)], asynchronous=False)
    assert raised.value.args[0].code() == KafkaError._FATAL
    consumer.close()
    again = kafka.consumer(STATIC)
    again.subscribe(["src"])
    read = [m.value() for _ in range(5) for m in again.consume(10, 0)]
    assert read == [b"a", b"b"], "the next incarnation took the static member's share"


# --- the acker ----------------------------------------------------------------------------------


def _send(kafka: MemoryKafka, kind: EventKind, roots: range) -> None:
    roots_list = list(roots)
    value = codec.encode_ack_batch(SPOUT, [int(kind)] * len(roots_list), roots_list, [r * 3 for r in roots_list])
    ListSource(kafka, ACKS).send([{"value": value, "partition": 0}])


def _completed(kafka: MemoryKafka) -> set[int]:
    done = set()
    for message in kafka.messages(OUTCOMES):
        batch = codec.decode_outcomes(message.value())
        done.update(r for r, k in zip(batch.roots.tolist(), batch.kinds.tolist()) if k == int(OutcomeKind.COMPLETED))
    return done


def _named_acker(clock: ManualClock, kafka: MemoryKafka) -> AckerWorker:
    acker = AckerWorker(
        topology=TOPOLOGY,
        connection=Connection("memory", clients=kafka),
        loop=Loop(commit_interval_ms=0, clock=clock),
        name="a",
    )
    acker.start()
    for _ in range(10):
        acker.poll_once(0)
        if acker._partitions:
            return acker
    raise AssertionError("the acker was not assigned its partition")


def test_a_fenced_acker_makes_a_new_consumer_and_rebuilds_its_table_from_the_commit():
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _named_acker(clock, kafka)
    _send(kafka, EventKind.INIT, range(1, 6))  # five pending trees: the low point stays before them
    acker.poll_once(0)
    assert acker.stats.pending == 5
    kafka.fail_next("consume", error=FENCED)  # a coordinator move fenced the static member
    acker.poll_once(0)
    assert acker.stats.client_rebuilds == 1
    _send(kafka, EventKind.ACK, range(1, 6))
    for _ in range(10):
        acker.poll_once(0)
    assert _completed(kafka) == {1, 2, 3, 4, 5}, "the rebuilt table replayed the INITs and folded the ACKs"
    acker.close()


def test_a_fenced_commit_result_also_rebuilds_the_consumer():
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _named_acker(clock, kafka)
    _send(kafka, EventKind.INIT, range(1, 3))
    acker._on_commit(KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced"), [TopicPartition(ACKS, 0, 0)])
    acker.poll_once(0)
    assert acker.stats.client_rebuilds == 1
    _send(kafka, EventKind.ACK, range(1, 3))
    for _ in range(10):
        acker.poll_once(0)
    assert _completed(kafka) == {1, 2}
    acker.close()


def test_a_fence_reported_twice_rebuilds_once():
    # seen on the cluster: the commit results and the consumed _FATAL event of one fence came in one
    # poll; the stale commit result then made the healthy new consumer be thrown away too
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _named_acker(clock, kafka)
    acker._on_commit(KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced"), [TopicPartition(ACKS, 0, 0)])
    kafka.fatal(acker._consumer)
    for _ in range(3):
        acker.poll_once(0)
    assert acker.stats.client_rebuilds == 1
    acker.close()


def test_an_acker_fenced_again_and_again_stops_naming_its_instance_id():
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _named_acker(clock, kafka)
    with pytest.raises(ClientFailed, match="t.ackers.a"):
        for _ in range(10):
            kafka.fail_next("consume", error=FENCED)
            acker.poll_once(0)
    assert acker.stats.client_rebuilds == 3
    acker.close()  # closes without committing or raising


# --- the outcome reader -------------------------------------------------------------------------


def test_a_fatal_outcome_reader_makes_a_new_consumer_where_it_stood():
    kafka = MemoryKafka()
    kafka.create_topic(OUTCOMES)
    listener = OutcomeListener(
        bootstrap_servers="memory", topics=TopologyTopics(TOPOLOGY), spout_id=SPOUT, clients=kafka, clock=ManualClock()
    )
    listener.start()
    ListSource(kafka, OUTCOMES).send([codec.encode_outcomes(SPOUT, [1], [int(OutcomeKind.COMPLETED)])])
    assert listener.poll() == [(1, OutcomeKind.COMPLETED)]
    kafka.fail_next("consume", error=FENCED)
    assert listener.poll() == []
    ListSource(kafka, OUTCOMES).send([codec.encode_outcomes(SPOUT, [2], [int(OutcomeKind.COMPLETED)])])
    assert listener.poll() == [(2, OutcomeKind.COMPLETED)], "read on from where it stood, nothing twice"
    listener.close()


# --- spouts and bolts stop (their process exits non-zero; a supervisor starts them again) -------


def _fenced_while_running(kafka: MemoryKafka, component) -> ClientFailed:
    component.start()
    for _ in range(5):
        component.poll_once(0)
    kafka.fatal(component._consumer)  # its own consumer (fail_next would hit the outcome reader's too)
    with pytest.raises(ClientFailed) as raised:
        for _ in range(5):
            component.poll_once(0)
    component.close()
    return raised.value


@pytest.mark.parametrize("transactional", [False, True])
def test_a_fenced_spout_stops_with_client_failed(transactional):
    from reliable_kafka.spout.spout import Spout

    kafka = MemoryKafka()
    for topic in ("src", "out"):
        kafka.create_topic(topic)
    AckerWorker(topology=TOPOLOGY, connection=Connection("memory", clients=kafka)).start()  # the topology's topics
    ListSource(kafka, "src").send([b"a"])
    options = {"topology": TOPOLOGY, "connection": Connection("memory", clients=kafka), "source_topics": "src"}
    spout = (
        Spout(**options, group_id="s", emit_to="out", name="s-1", transactional=True)
        if transactional
        else Spout(**options, group_id="s", emit_to="out", tracking=Tracking(root_index=False))
    )
    failed = _fenced_while_running(kafka, spout)
    assert failed.component == spout.name and failed.client == "consumer"
    if transactional:
        assert failed.instance_id == "s.s-1"


def test_a_fenced_bolt_stops_with_client_failed():
    from reliable_kafka.bolt.runner import BasicBolt

    kafka = MemoryKafka()
    kafka.create_topic("in")
    AckerWorker(topology=TOPOLOGY, connection=Connection("memory", clients=kafka)).start()
    ListSource(kafka, "in").send([b"a"])
    bolt = BasicBolt(
        topology=TOPOLOGY,
        connection=Connection("memory", clients=kafka),
        source_topics="in",
        group_id="b",
        handler=lambda tuple_, collector: None,
        name="b-1",
    )
    assert _fenced_while_running(kafka, bolt).component == "b-1"
