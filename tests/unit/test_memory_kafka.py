"""The in-memory Kafka's own semantics: logs, transactions, groups, commits, faults."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka


def _consumer(kafka, group="g", **config):
    return kafka.consumer({"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})


def _read_all(consumer, topic, partitions=1):
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer.consume(10_000, 0)


def _open_transaction(*values: bytes):
    """A MemoryKafka with topic ``t``, and a producer (transactional.id ``x``) whose open transaction
    wrote ``values`` (queued, not delivered)."""
    kafka = MemoryKafka()
    kafka.create_topic("t")
    txn = kafka.producer({"transactional.id": "x"})
    txn.init_transactions()
    txn.begin_transaction()
    for value in values:
        txn.produce("t", value)
    return kafka, txn


# a run of writes: ("plain", n) plain records, or ("txn", n, commit?) one transaction of n records
writes = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.integers(1, 3)),
        st.tuples(st.just("txn"), st.integers(1, 3), st.booleans()),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(writes)
def test_read_committed_sees_plain_and_committed_records_in_order_and_offsets_rise(plan):
    kafka = MemoryKafka(clock=ManualClock())
    kafka.create_topic("t")
    plain = kafka.producer({})
    txn = kafka.producer({"transactional.id": "x"})
    txn.init_transactions()
    visible, everything = [], []
    for i, step in enumerate(plan):
        values = [f"{i}.{j}".encode() for j in range(step[1])]
        if step[0] == "plain":
            for value in values:
                plain.produce("t", value)
            plain.flush()
            visible += values
        else:
            txn.begin_transaction()
            for value in values:
                txn.produce("t", value)
            if step[2]:
                txn.commit_transaction()
                visible += values
            else:
                txn.flush()
                txn.abort_transaction()
        everything += values
    committed = _read_all(_consumer(kafka, **{"isolation.level": "read_committed"}), "t")
    uncommitted = _read_all(_consumer(kafka, **{"isolation.level": "read_uncommitted"}), "t")
    assert [m.value() for m in committed] == visible
    assert [m.value() for m in uncommitted] == everything
    offsets = [m.offset() for m in uncommitted]
    assert offsets == sorted(set(offsets))  # strictly rising; markers leave gaps
    markers = sum(1 for step in plan if step[0] == "txn")
    assert kafka.topics["t"].partitions[0].end == len(everything) + markers


def test_read_committed_stops_at_an_open_transaction_even_before_later_plain_records():
    kafka, txn = _open_transaction(b"open")
    txn.flush()
    plain = kafka.producer({})
    plain.produce("t", b"later")
    plain.flush()
    reader = _consumer(kafka)
    assert _read_all(reader, "t") == []
    assert reader.get_watermark_offsets(TopicPartition("t", 0), cached=False) == (0, 0)  # the stable end
    assert reader.get_watermark_offsets(TopicPartition("t", 0), cached=True) == (0, 2)
    txn.commit_transaction()
    assert [m.value() for m in reader.consume(10, 0)] == [b"open", b"later"]


@settings(max_examples=100, deadline=None)
# no NUL and no lone surrogates: confluent-kafka's TopicPartition takes a UTF-8 C string
@given(
    st.integers(0, 2**62),
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=200) | st.none(),
)
def test_commit_metadata_round_trips(offset, metadata):
    kafka = MemoryKafka()
    kafka.create_topic("t")
    tp = TopicPartition("t", 0, offset) if metadata is None else TopicPartition("t", 0, offset, metadata)
    _consumer(kafka).commit(offsets=[tp], asynchronous=False)
    (found,) = _consumer(kafka).committed([TopicPartition("t", 0)])
    assert (found.offset, found.metadata) == (offset, metadata or None)


# group events: ("join",), ("close", i), ("crash", i), ("poll", i) on the i-th live consumer
events = st.lists(
    st.one_of(
        st.tuples(st.just("join")),
        st.tuples(st.sampled_from(["close", "crash", "poll", "poll", "poll"]), st.integers(0, 5)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(events, st.booleans())
def test_a_partition_never_has_two_owners_and_all_are_owned_once_members_settle(plan, cooperative):
    kafka = MemoryKafka()
    kafka.create_topic("t", 4)
    strategy = {"partition.assignment.strategy": "cooperative-sticky"} if cooperative else {}
    live, log = [], []

    def owned():
        return [(tp.partition, i) for i, c in enumerate(live) for tp in c.assignment()]

    def join():
        consumer = _consumer(kafka, **strategy)
        name = len(log)
        consumer.subscribe(
            ["t"],
            on_assign=lambda c, ps: log.append(("assign", name, [p.partition for p in ps])),
            on_revoke=lambda c, ps: log.append(("revoke", name, [p.partition for p in ps])),
        )
        live.append(consumer)

    for event in plan:
        if event[0] == "join":
            join()
        elif live:
            consumer = live[event[1] % len(live)]
            if event[0] == "poll":
                consumer.poll(0)
            elif event[0] == "close":
                consumer.close()
                live.remove(consumer)
            else:
                kafka.crash(consumer)
                live.remove(consumer)
        partitions = [p for p, _ in owned()]
        assert len(partitions) == len(set(partitions)), owned()
    for _ in range(3):
        for consumer in live:
            consumer.poll(0)
    if live:
        assert sorted(p for p, _ in owned()) == [0, 1, 2, 3]


def test_the_old_owner_revokes_and_commits_before_the_new_owner_is_assigned():
    kafka = MemoryKafka()
    kafka.create_topic("t", 2)
    events = []
    first = _consumer(kafka)

    def revoke(consumer, partitions):
        events.append(("revoke", sorted(p.partition for p in partitions)))
        consumer.commit(offsets=[TopicPartition("t", p.partition, 9, "done") for p in partitions], asynchronous=False)

    first.subscribe(["t"], on_revoke=revoke)
    first.poll(0)
    second = _consumer(kafka)
    second.subscribe(
        ["t"],
        on_assign=lambda c, ps: events.append(
            ("assign", [(p.partition, tp.offset, tp.metadata) for p, tp in zip(ps, c.committed(ps))])
        ),
    )
    second.poll(0)  # its partition is still held by the first consumer: nothing yet
    assert events == []
    first.poll(0)
    second.poll(0)
    assert events == [("revoke", [0, 1]), ("assign", [(1, 9, "done")])]


def test_a_closed_static_member_keeps_its_share_for_its_next_incarnation():
    kafka = MemoryKafka()
    kafka.create_topic("t", 2)
    static = {"group.instance.id": "worker-a"}
    a, b = _consumer(kafka, **static), _consumer(kafka)
    for consumer in (a, b):
        consumer.subscribe(["t"])
    for consumer in (a, b, a, b):
        consumer.poll(0)
    share = a.assignment()
    a.close()
    b.poll(0)
    assert len(b.assignment()) == 1  # the static member's partition waits for it
    again = _consumer(kafka, **static)
    again.subscribe(["t"])
    again.poll(0)
    assert again.assignment() == share


def test_a_consumer_whose_session_expired_loses_its_partitions_and_its_commits_fail():
    kafka = MemoryKafka()
    kafka.create_topic("t")
    lost = []
    consumer = _consumer(kafka)
    consumer.subscribe(["t"], on_lost=lambda c, ps: lost.append([p.partition for p in ps]))
    consumer.poll(0)
    kafka.expire(consumer)
    with pytest.raises(KafkaException) as raised:
        consumer.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
    consumer.poll(0)  # on_lost, then it joins again
    assert lost == [[0]]
    assert consumer.assignment() == [], "the rejoin's assignment arrives at a later poll, as librdkafka's"
    consumer.poll(0)  # and gets the partition back
    assert [tp.partition for tp in consumer.assignment()] == [0]


def test_a_paused_partition_stays_paused_when_it_is_assigned_again():
    """As librdkafka (2.16, measured on a real broker): the pause belongs to the partition, so a
    partition revoked while paused comes back paused."""
    kafka = MemoryKafka()
    kafka.create_topic("t")
    ListSource(kafka, "t", [b"a", b"b"])
    consumer = _consumer(kafka)
    consumer.subscribe(["t"])
    consumer.poll(0)
    consumer.pause(consumer.assignment())
    kafka.expire(consumer)
    consumer.poll(0)  # lost
    consumer.resume(consumer.assignment())  # nothing is assigned: resumes nothing
    assert consumer.consume(10, 0) == [] and [tp.partition for tp in consumer.assignment()] == [0]
    assert consumer.consume(10, 0) == [], "read a partition that was paused when it was revoked"
    consumer.resume(consumer.assignment())
    assert [m.value() for m in consumer.consume(10, 0)] == [b"a", b"b"]


def test_injected_faults():
    kafka = MemoryKafka()
    kafka.create_topic("t")
    reports = []
    producer = kafka.producer({"on_delivery": lambda error, message: reports.append(error)})
    kafka.fail_next("produce")
    with pytest.raises(BufferError):  # librdkafka's queue is full
        producer.produce("t", b"refused")
    kafka.fail_next("produce", error=KafkaError.MSG_SIZE_TOO_LARGE)
    with pytest.raises(KafkaException):
        producer.produce("t", b"refused")
    kafka.fail_next("delivery")
    producer.produce("t", b"dropped")
    producer.produce("t", b"kept")
    producer.flush()
    assert [e.code() if e else None for e in reports] == [KafkaError._MSG_TIMED_OUT, None]
    assert [m.value() for m in kafka.messages("t")] == [b"kept"]

    consumer = _consumer(kafka)
    kafka.fail_next("commit", error=KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    with pytest.raises(KafkaException) as raised:
        consumer.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    assert raised.value.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS
    assert kafka.committed("g", "t", 0) is None
    consumer.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    assert kafka.committed("g", "t", 0) == (1, None)


def test_a_fenced_producer_fails_fatally_and_its_open_transaction_is_aborted():
    kafka, old = _open_transaction(b"zombie")
    old.flush()
    new = kafka.producer({"transactional.id": "x"})
    new.init_transactions()  # fences the old one and aborts its transaction
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction()
    assert raised.value.args[0].fatal() and raised.value.args[0].code() == KafkaError._FENCED
    assert kafka.messages("t") == []
    kafka.fence("x")
    new.begin_transaction()  # local: the producer learns it was fenced when it reaches the broker
    new.produce("t", b"fenced")
    with pytest.raises(KafkaException):
        new.commit_transaction()
    with pytest.raises(KafkaException):
        new.begin_transaction()  # fatal from then on
    assert [m.value() for m in kafka.messages("t", read_committed=False)] == [b"zombie"]  # never b"fenced"


@pytest.mark.parametrize("delivered_before_commit", [True, False])
def test_a_transaction_with_a_record_that_failed_delivery_cannot_commit(delivered_before_commit):
    """As librdkafka's commit_transaction: the transaction is abortable; the next one commits."""
    kafka, txn = _open_transaction(b"lost", b"written")
    kafka.fail_next("delivery")
    if delivered_before_commit:  # the failure already reported by a poll
        txn.poll(0)
    with pytest.raises(KafkaException) as raised:
        txn.commit_transaction()
    error = raised.value.args[0]
    assert error.txn_requires_abort() and not error.fatal() and error.code() == KafkaError._MSG_TIMED_OUT
    txn.abort_transaction()
    assert kafka.messages("t") == []  # b"written" was in the log, in the aborted transaction
    txn.begin_transaction()
    txn.produce("t", b"again")
    txn.commit_transaction()
    assert [m.value() for m in kafka.messages("t")] == [b"again"]


def test_a_crashed_producer_loses_what_it_had_not_delivered():
    kafka = MemoryKafka()
    kafka.create_topic("t")
    producer = kafka.producer({})
    producer.produce("t", b"queued")
    kafka.crash(producer)
    assert kafka.messages("t") == []
    with pytest.raises(KafkaException):
        producer.produce("t", b"after")


def test_timestamps_come_from_the_clock_and_offsets_for_times_finds_them():
    clock = ManualClock(start_ms=1_000)
    kafka = MemoryKafka(clock=clock)
    kafka.create_topic("t")
    kafka.create_topic("appended", config={"message.timestamp.type": "LogAppendTime"})
    producer = kafka.producer({})
    for _ in range(3):
        producer.produce("t", b"x")
        producer.produce("appended", b"y", timestamp=5)
        producer.flush()
        clock.advance(100)
    assert [m.timestamp() for m in kafka.messages("t")] == [(1, 1000), (1, 1100), (1, 1200)]
    assert [m.timestamp() for m in kafka.messages("appended")] == [(2, 1000), (2, 1100), (2, 1200)]
    consumer = _consumer(kafka)
    found = consumer.offsets_for_times([TopicPartition("t", 0, 1050), TopicPartition("t", 0, 5000)])
    assert [tp.offset for tp in found] == [1, -1]


def test_before_confluent_kafka_could_make_messages_a_stand_in_has_the_same_getters(monkeypatch):
    from reliable_kafka.testing import memory_broker
    from reliable_kafka.testing.contract import CHECKS

    monkeypatch.setattr(memory_broker, "MESSAGE", memory_broker.PlainMessage)  # confluent-kafka < 2.13
    for name in ("headers_round_trip", "read_committed_hides_aborted", "timestamps"):
        CHECKS[name](MemoryKafka(), "memory", name)


def test_idle_waits_can_move_a_manual_clock():
    clock = ManualClock(start_ms=0)
    kafka = MemoryKafka(clock=clock, idle_waits_advance_clock=True)
    kafka.create_topic("t")
    consumer = _consumer(kafka)
    consumer.assign([TopicPartition("t", 0, 0)])
    consumer.consume(10, 0.25)
    assert clock() == 250
    producer = kafka.producer({})
    producer.produce("t", b"x")
    producer.flush()
    assert len(consumer.consume(10, 0.25)) == 1 and clock() == 250  # no wait when records are there
    with pytest.raises(ValueError):
        MemoryKafka(idle_waits_advance_clock=True)  # wall time cannot be moved
