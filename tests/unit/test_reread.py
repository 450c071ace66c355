"""SourceRereader on the in-memory Kafka: what it reads again, and how it stops."""

import pytest

from reliable_kafka.errors import AuthorizationError
from reliable_kafka.spout.reread import NOT_A_RECORD, RereadFailed, SourceRereader
from reliable_kafka.testing import ManualClock, MemoryKafka


def rereader(kafka, records, gone, timeout_s=5.0, why=False):
    return SourceRereader(
        component="spout-1",
        bootstrap_servers="memory",
        group_id="g.refetch",
        kafka_config={},
        clients=kafka,
        records=records,
        to_record=lambda message: message.value(),
        gone=lambda key, offset, reason: gone.append((key, offset, reason) if why else (key, offset)),
        timeout_s=timeout_s,
        clock=kafka.clock,
    )


def source(kafka, count):
    kafka.create_topic("source", partitions=1)
    producer = kafka.producer({})
    for i in range(count):
        producer.produce("source", f"r{i}".encode(), partition=0)
    producer.flush()


def test_reads_the_wanted_offsets_again():
    kafka = MemoryKafka(clock=ManualClock())
    source(kafka, 10)
    records, gone = {}, []
    rereader(kafka, records, gone)([(("source", 0), 3), (("source", 0), 7)])
    assert records == {(("source", 0), 3): b"r3", (("source", 0), 7): b"r7"} and gone == []


def test_a_refused_read_stops_at_once_naming_the_permission():
    """Before, the error event was skipped and the rereader retried until RereadFailed."""
    kafka = MemoryKafka(clock=ManualClock())
    source(kafka, 10)
    kafka.fail_next("consume")  # TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(AuthorizationError, match="READ"):
        rereader(kafka, {}, [])([(("source", 0), 3)])


def test_a_transient_error_is_retried():
    kafka = MemoryKafka(clock=ManualClock())
    source(kafka, 10)
    kafka.fail_next("consume", error=-185)  # _TRANSPORT: librdkafka reconnects
    records = {}
    rereader(kafka, records, [])([(("source", 0), 5)])
    assert records == {(("source", 0), 5): b"r5"}


def test_a_record_that_cannot_be_read_in_time_fails_the_reread():
    kafka = MemoryKafka(clock=ManualClock())
    source(kafka, 10)
    with pytest.raises(RereadFailed, match="could not be read again"):
        rereader(kafka, {}, [], timeout_s=0.0)([(("source", 0), 5)])


def _transactional_source(kafka, count):
    """``count`` records written in one transaction: offsets 0 to count-1, its commit marker at count."""
    kafka.create_topic("source", partitions=1)
    producer = kafka.producer({"transactional.id": "writer"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(count):
        producer.produce("source", f"r{i}".encode(), partition=0)
    producer.commit_transaction()


def test_a_transaction_marker_at_the_end_of_the_log_is_not_a_record_without_waiting():
    """No record follows the marker: before, the rereader waited for one until RereadFailed (20 s
    in a spout). The consumer's position passed the marker: that says it holds no record."""
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock, idle_waits_advance_clock=True)  # an idle wait moves the clock
    _transactional_source(kafka, 3)
    records, gone = {}, []
    started = clock.monotonic()
    rereader(kafka, records, gone, why=True)([(("source", 0), 2), (("source", 0), 3)])
    assert records == {(("source", 0), 2): b"r2"} and gone == [(("source", 0), 3, NOT_A_RECORD)]
    assert clock.monotonic() - started < 1.0  # it never waited for a record that cannot come


def test_a_marker_alone_is_not_a_record_and_a_second_read_of_lower_offsets_finds_its_records():
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock, idle_waits_advance_clock=True)
    _transactional_source(kafka, 5)
    records, gone = {}, []
    read = rereader(kafka, records, gone, why=True)
    read([(("source", 0), 5)])
    read([(("source", 0), 1)])  # below where the first read stopped: read, not taken for passed
    assert gone == [(("source", 0), 5, NOT_A_RECORD)] and records == {(("source", 0), 1): b"r1"}
