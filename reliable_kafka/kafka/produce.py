"""Producing a tuple with its ``rk-anchors`` header, waiting for room instead of failing, flushing."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from reliable_kafka import codec
from reliable_kafka.errors import DeliveryError, ReliableKafkaError

__all__ = ["produce_tuple", "produce_waiting", "ProducerUnusable", "flush_or_raise"]


def produce_tuple(
    producer: Producer,
    topic: str,
    value: bytes | None,
    *,
    key: bytes | None,
    headers,
    partition: int | None,
    anchors: dict[int, int],
    on_delivery: Callable | None = None,
) -> None:
    """Send a tuple: the user's key, value and headers, plus ``rk-anchors`` when it is tracked.

    ``on_delivery`` is per message; the hot path passes none and relies on the producer's own
    callback with ``delivery.report.only.error`` (see :data:`ERRORS_ONLY`): no Python call per
    delivered message, one per failed one.
    """
    if headers:
        headers = [(k, v) for k, v in headers if k != codec.ANCHORS_HEADER]
        if anchors:
            headers.append((codec.ANCHORS_HEADER, codec.encode_anchors(anchors)))
    elif anchors:
        headers = [(codec.ANCHORS_HEADER, codec.encode_anchors(anchors))]
    else:
        headers = None
    try:  # positional, partition -1 = the partitioner's choice: this runs once per emitted tuple
        producer.produce(
            topic, value, key, _ANY_PARTITION if partition is None else partition, on_delivery, headers=headers
        )
    except (BufferError, KafkaException):  # queue full, or the producer failed: the slow path decides
        produce_waiting(
            producer,
            topic,
            value,
            key=key,
            partition=_ANY_PARTITION if partition is None else partition,
            headers=headers,
            on_delivery=on_delivery,
        )


_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner picks one


class ProducerUnusable(KafkaException, ReliableKafkaError):
    """The producer itself failed (fenced, fatal, or not in a transaction), not the record.

    Raised from ``produce``; spouts and bolts let it pass through a handler's error path (it is
    no reason to fail or retry the tuple), so that the transaction aborts and a new producer is
    made, or the process stops and its supervisor restarts it.
    """


_PRODUCER_STATE_ERRORS = (KafkaError._STATE, KafkaError._FENCED, KafkaError._FATAL)


def produce_waiting(producer: Producer, topic: str, value: bytes | None, **kwargs) -> None:
    """produce(), waiting for room when librdkafka's local queue is full instead of failing."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or error.code() in _PRODUCER_STATE_ERRORS:
                raise ProducerUnusable(error) from exc
            raise


def flush_or_raise(producer: Producer, *, timeout: float = 30.0, what: str = "records") -> None:
    """Flush and raise :class:`DeliveryError` if anything is still queued after ``timeout``."""
    deadline = time.monotonic() + timeout
    remaining = producer.flush(timeout)
    while remaining and time.monotonic() < deadline:
        remaining = producer.flush(max(0.1, deadline - time.monotonic()))
    if remaining:
        raise DeliveryError(f"{remaining} {what} not delivered within {timeout:.0f}s; is the broker up?")
