"""SourceRereader on the in-memory Kafka: what it reads again, and how it stops."""

import pytest

from reliable_kafka.errors import AuthorizationError
from reliable_kafka.spout.reread import RereadFailed, SourceRereader
from reliable_kafka.testing import ManualClock, MemoryKafka


def rereader(kafka, records, gone, timeout_s=5.0):
    return SourceRereader(
        component="spout-1",
        bootstrap_servers="memory",
        group_id="g.refetch",
        kafka_config={},
        clients=kafka,
        records=records,
        to_record=lambda message: message.value(),
        gone=lambda key, offset, why: gone.append((key, offset)),
        timeout_s=timeout_s,
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
