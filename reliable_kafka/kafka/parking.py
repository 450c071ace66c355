"""Quarantine and dead-letter writes: a record is parked with the ``rk-parked`` header, never lost.

Parking never raises because of the record (docs/design.md section 3, 4): one too large to copy is parked as a
reference, and a copy that failed is written again.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from reliable_kafka import codec
from reliable_kafka.codec import ATTEMPTS_HEADER, ParkedRecord
from reliable_kafka.errors import DecodeError
from reliable_kafka.kafka.authorization import check_delivery
from reliable_kafka.kafka.clients import coordinates, message_coordinates
from reliable_kafka.kafka.produce import Header, OnDelivery, ProducerUnusable, produce_waiting

__all__ = ["Quarantine", "park", "park_reference"]

log = logging.getLogger(__name__)


class Quarantine:
    """Copies records that cannot be used to ``<topology>.quarantine``, counted and logged.

    The original key, value and headers are kept; the ``rk-parked`` header says why and from where.
    A record too large to copy is parked as a reference (see :func:`park`). Parking never raises
    because of the record: a copy that could not be queued or delivered is kept in ``unsent`` and
    written again by :meth:`retry_unsent`, so a worker may commit past a quarantined record only
    when ``unsent`` is empty after a flush.
    """

    def __init__(self, producer: Producer, *, topic: str, component: str) -> None:
        self.producer = producer
        self.topic = topic
        self.component = component
        self.count = 0
        self.unsent: list[tuple[dict[str, Any], ParkedRecord]] = []

    def park(self, message: Message, reason: str) -> None:
        self.count += 1
        log.warning(
            "%s: %s at %s; copied to %s and skipped",
            self.component,
            reason,
            message_coordinates(message),
            self.topic,
        )
        timestamp = message.timestamp()[1] if message.timestamp() else -1
        topic, partition, offset = coordinates(message)
        self._write(
            {"key": message.key(), "value": message.value(), "headers": message.headers()},
            ParkedRecord(
                reason=reason,
                attempts=0,
                source_topic=topic,
                source_partition=partition,
                source_offset=offset,
                source_timestamp_ms=timestamp,
                component=self.component,
            ),
        )

    def decode_error(self, message: Message, error: DecodeError) -> None:
        self.park(message, str(error.at(*coordinates(message))))

    def retry_unsent(self) -> None:
        """Write again the copies that failed (call it from the worker's loop, not a callback)."""
        unsent, self.unsent = self.unsent, []
        for record, parked in unsent:
            self._write(record, parked)

    def _write(self, record: dict[str, Any], parked: ParkedRecord) -> None:
        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                log.error(
                    "%s: quarantine copy of %s[%d]@%d not delivered (%s); writing it again",
                    self.component,
                    parked.source_topic,
                    parked.source_partition,
                    parked.source_offset,
                    error,
                )
                self.unsent.append((record, parked))

        try:
            park(self.producer, self.topic, parked=parked, on_delivery=delivered, **record)
        except ProducerUnusable:
            raise
        except KafkaException as exc:  # not the record's fault (e.g. the topic is missing): try again later
            log.error(
                "%s: quarantine copy of %s[%d]@%d not queued (%s); will try again",
                self.component,
                parked.source_topic,
                parked.source_partition,
                parked.source_offset,
                exc,
            )
            self.unsent.append((record, parked))


_SIZE_ERRORS = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)
# what a reference keeps of a copy's headers: the attempt history (not rk-reason, the last attempt's
# reason, which ``dlq list`` would show in place of why there is no copy)
_HISTORY_HEADERS = (ATTEMPTS_HEADER,)
_TOO_LARGE: dict[tuple[str, str, int, int], None] = {}  # copies refused as too large, oldest first
_TOO_LARGE_KEPT = 10_000
_TOO_LARGE_LOCK = threading.Lock()  # workers of one process (LocalCluster threads) share it


def park(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
    parked: ParkedRecord,
    on_delivery: OnDelivery | None = None,
) -> None:
    """Write a record to a dead-letter or quarantine topic with the ``rk-parked`` header.

    The record's size never makes this fail: one too large to copy (``produce`` or the broker
    answers MSG_SIZE_TOO_LARGE: over the producer's ``message.max.bytes`` or the topic's
    ``max.message.bytes``) is parked as a reference instead, with no key, no value and only the
    header (its coordinates, ``original_bytes``, ``value_omitted``). ``on_delivery`` hears about
    the record actually written. Without ``on_delivery`` a failed write is queued again from the
    delivery callback, so a flush returns only once it is delivered (or times out).
    Raises :class:`ProducerUnusable` when the producer is fenced or fatal, and KafkaException for
    an error no record could avoid (e.g. an unknown topic).
    """
    size = len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in (headers or []))
    parked = dataclasses.replace(parked, original_bytes=size)
    if (topic, parked.source_topic, parked.source_partition, parked.source_offset) in _TOO_LARGE:
        parked = _as_reference(parked, "refused as too large before")  # e.g. in an aborted transaction
    _park(producer, topic, key, value, headers, parked, on_delivery, in_callback=False)


def park_reference(
    producer: Producer,
    topic: str,
    *,
    parked: ParkedRecord,
    headers: Sequence[Header] | None = None,
    on_delivery: OnDelivery | None = None,
) -> None:
    """Park a reference to a record that cannot be copied because Kafka no longer has it (deleted by
    retention or ``delete_records`` while in flight): no key, no value, the ``rk-parked`` header
    with its coordinates, ``value_omitted`` and ``original_bytes`` -1 (unknown), and of ``headers``
    the attempt history (``rk-attempts``) as a copy carries it. ``reliable-kafka
    dlq`` shows it as such and ``dlq replay`` skips it. Raises as :func:`park`."""
    parked = dataclasses.replace(parked, value_omitted=True, original_bytes=-1)
    _park(producer, topic, None, None, headers, parked, on_delivery, in_callback=False)


def _park(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
    parked: ParkedRecord,
    on_delivery: OnDelivery | None,
    *,
    in_callback: bool,
) -> None:
    if parked.value_omitted:  # a reference: nothing of the record, only its attempt history
        key, value = None, None
        headers = [(k, v) for k, v in headers or [] if k in _HISTORY_HEADERS]

    def delivered(error: KafkaError | None, message: Message) -> None:
        check_delivery(error, message, producer)  # refused: stop, never write it again and again
        if error is not None and error.code() in _SIZE_ERRORS and not parked.value_omitted:
            _remember_too_large(topic, parked)
            again = _as_reference(parked, f"the broker refused it: {error.name()}")
        elif error is not None and on_delivery is None:
            log.error(
                "%s: parked record %s[%d]@%d not delivered (%s); writing it again",
                topic,
                parked.source_topic,
                parked.source_partition,
                parked.source_offset,
                error,
            )
            again = parked
        else:
            if on_delivery is not None:
                on_delivery(error, message)
            return
        try:
            _park(producer, topic, key, value, headers, again, on_delivery, in_callback=True)
        except (KafkaException, BufferError) as exc:  # no poll() inside a callback: report it
            log.error(
                "%s: parked record %s[%d]@%d could not be queued again: %s",
                topic,
                parked.source_topic,
                parked.source_partition,
                parked.source_offset,
                exc,
            )
            if on_delivery is not None:
                on_delivery(KafkaError(KafkaError._FAIL, f"not queued again: {exc}"), message)

    kept = [(k, v) for k, v in (headers or []) if k != codec.PARKED_HEADER]
    kept.append((codec.PARKED_HEADER, codec.encode_parked(parked)))
    try:
        if in_callback:
            producer.produce(topic, value, key=key, headers=kept, on_delivery=delivered)
        else:
            produce_waiting(producer, topic, value, key=key, headers=kept, on_delivery=delivered)
    except ProducerUnusable:
        raise
    except KafkaException as exc:
        if exc.args[0].code() not in _SIZE_ERRORS or parked.value_omitted:
            raise
        _remember_too_large(topic, parked)
        _park(
            producer,
            topic,
            None,
            None,
            headers,
            _as_reference(parked, f"over the producer's message.max.bytes: {exc.args[0].name()}"),
            on_delivery,
            in_callback=in_callback,
        )


def _as_reference(parked: ParkedRecord, why: str) -> ParkedRecord:
    log.error(
        "%s[%d]@%d: %d bytes, too large to park (%s); parking a reference without the value",
        parked.source_topic,
        parked.source_partition,
        parked.source_offset,
        parked.original_bytes,
        why,
    )
    return dataclasses.replace(
        parked,
        value_omitted=True,
        reason=f"{parked.reason} [value omitted: {parked.original_bytes} bytes, too large to copy ({why}); "
        f"read it at {parked.source_topic}[{parked.source_partition}]@{parked.source_offset}]",
    )


def _remember_too_large(topic: str, parked: ParkedRecord) -> None:
    with _TOO_LARGE_LOCK:
        _TOO_LARGE[(topic, parked.source_topic, parked.source_partition, parked.source_offset)] = None
        while len(_TOO_LARGE) > _TOO_LARGE_KEPT:
            del _TOO_LARGE[next(iter(_TOO_LARGE))]
