"""Producing a tuple with its ``rk-anchors`` header, waiting for room instead of failing, flushing."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from reliable_kafka import codec
from reliable_kafka.core.clock import Clock
from reliable_kafka.errors import DeliveryError, ReliableKafkaError

Header = tuple[str, str | bytes | None]
Headers = list[Header]  # a record's headers, as confluent-kafka's produce takes them
ConsumedHeaders = list[tuple[str, bytes | None]]  # a consumed record's headers (values are bytes)
OnDelivery = Callable[[KafkaError | None, Message], None]  # a delivery report's callback

__all__ = [
    "produce_tuple",
    "produce_headers",
    "produce_waiting",
    "send_polled",
    "SEND_WAIT_S",
    "ProducerUnusable",
    "flush_or_raise",
    "release_producer",
]

log = logging.getLogger(__name__)


def produce_tuple(
    producer: Producer,
    topic: str,
    value: bytes | None,
    *,
    key: bytes | None,
    headers: Sequence[Header] | None,
    partition: int | None,
    anchors: dict[int, int],
    on_delivery: OnDelivery | None = None,
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
    produce_headers(producer, topic, value, key, partition, headers, on_delivery)


def produce_headers(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    partition: int | None,
    headers: Headers | None,
    on_delivery: OnDelivery | None = None,
) -> None:
    """:func:`produce_tuple` with the headers already made (``rk-anchors`` included, if tracked)."""
    try:  # once per emitted tuple: all positional (confluent-kafka's order: topic, value, key, partition,
        # callback, on_delivery, timestamp (0: now), headers); a keyword costs ~0.7 us a call, measured
        producer.produce(
            topic, value, key, _ANY_PARTITION if partition is None else partition, on_delivery, None, 0, headers
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


def produce_waiting(producer: Producer, topic: str, value: bytes | None, **kwargs: Any) -> None:
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


SEND_WAIT_S = 0.005  # longest a poll waits for its records to be delivered (then linger.ms sends the rest)


def send_polled(producer: Producer, timeout: float = SEND_WAIT_S) -> None:
    """Send what this poll produced now, in one produce request per partition, and wait for it up
    to ``timeout``.

    ``flush`` ignores ``linger.ms`` (``producer.flush(0)`` does not: librdkafka's sender may wake
    after it returned, and the records then wait out the linger), so the round ends with the batch
    on the broker: latency has no linger wait, and a slow loop's batch is not cut in pieces
    (:data:`~reliable_kafka.kafka.clients.SENT_PER_POLL`). A poll that produced nothing costs a
    ``len``. Records not delivered within ``timeout`` stay queued and go as usual.
    """
    if len(producer):
        producer.flush(timeout)


def release_producer(producer: Producer | None, *, timeout: float = 10.0, owner: str = "") -> None:
    """Flush ``producer`` on the way out, purge what it could not deliver within ``timeout``, close it.

    Called after the last commit: nothing still queued was committed past, so dropping it loses
    nothing (it is produced again after the restart). Closing ends the client at once: otherwise it
    lives as long as the component object does (a test's, a notebook's), and keeps asking the
    broker for its topics' metadata: for a refused topic, a denial every few hundred milliseconds.
    """
    if producer is None:
        return
    try:
        # a delivery report may raise here (a refused write): the caller's error, raised after closing
        remaining = producer.flush(timeout)
        if remaining:
            log.warning(
                "%s: %d records not delivered within %.0f s on close; dropped (nothing was committed past them)",
                owner or "producer",
                remaining,
                timeout,
            )
    finally:
        _end(producer, owner)


def _end(producer: Producer, owner: str) -> None:
    try:
        producer.purge()
        producer.flush(0)  # serve the purged records' delivery reports
        close = getattr(producer, "close", None)  # older confluent-kafka has none: the client ends when collected
        if close is not None:
            close()
    except (KafkaException, ReliableKafkaError) as exc:  # the purged records' reports repeat the first error
        log.debug("%s: while closing the producer: %s", owner or "producer", exc)


def flush_or_raise(producer: Producer, *, timeout: float = 30.0, what: str = "records", clock: Clock = time) -> None:
    """Flush and raise :class:`DeliveryError` if anything is still queued after ``timeout``."""
    deadline = clock.monotonic() + timeout
    remaining = producer.flush(timeout)
    while remaining and clock.monotonic() < deadline:
        remaining = producer.flush(max(0.1, deadline - clock.monotonic()))
    if remaining:
        raise DeliveryError(f"{remaining} {what} not delivered within {timeout:.0f}s; is the broker up?")
