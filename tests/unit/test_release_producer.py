"""release_producer: a component's producer ends with the component, whatever its last flush did."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka.kafka.produce import release_producer


class Producer:
    """Records the calls; ``stuck`` records never leave; ``refuse`` raises from the first flush."""

    def __init__(self, *, stuck: int = 0, refuse: bool = False) -> None:
        self.stuck, self.refuse, self.calls = stuck, refuse, []

    def flush(self, timeout=None):
        self.calls.append(("flush", timeout))
        if self.refuse:
            self.refuse = False
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        return self.stuck

    def purge(self):
        self.calls.append(("purge",))
        self.stuck = 0

    def close(self):
        self.calls.append(("close",))


def test_a_delivered_producer_is_closed():
    producer = Producer()
    release_producer(producer, timeout=5)
    assert producer.calls[0] == ("flush", 5) and producer.calls[-1] == ("close",)


def test_what_could_not_be_delivered_is_purged_and_reported(caplog):
    producer = Producer(stuck=3)
    release_producer(producer, timeout=5, owner="spout-1")
    assert ("purge",) in producer.calls and producer.calls[-1] == ("close",)
    assert "spout-1: 3 records not delivered" in caplog.text


def test_an_error_from_the_last_delivery_reports_is_raised_after_closing():
    producer = Producer(refuse=True)
    with pytest.raises(KafkaException):
        release_producer(producer)
    assert producer.calls[-1] == ("close",)


def test_nothing_to_release():
    release_producer(None)
