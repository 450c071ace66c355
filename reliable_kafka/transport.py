"""Kafka plumbing shared by spouts, bolts, ackers and the Spark integration.

Thin: it moves bytes between Kafka and the pure core. Producers are idempotent with ``acks=all``
so a retried send never duplicates an ack entry (a duplicated ACK would break a tree's XOR).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reliable_kafka import codec
from reliable_kafka.client_log import with_log
from reliable_kafka.codec import ParkedRecord
from reliable_kafka.core.ack_packer import AckPacker
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.errors import ConfigError, DecodeError, DeliveryError
from reliable_kafka.topology import TopologyTopics, admin_client, partition_count

__all__ = [
    "new_producer",
    "new_consumer",
    "check_ack_sender_config",
    "AckSender",
    "OutcomeListener",
    "Quarantine",
    "park",
    "message_coordinates",
    "produce_tuple",
    "ERRORS_ONLY",
    "ProducerUnusable",
    "flush_or_raise",
    "StuckCall",
    "with_deadline",
]

log = logging.getLogger(__name__)

MAX_ENTRIES_PER_RECORD = 2000  # 17 bytes an entry: ~34 KB records, well under message.max.bytes

_PRODUCER_DEFAULTS = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "queue.buffering.max.messages": 500_000,
}


def _merged(kafka_config: dict | None, required: dict, defaults: dict) -> dict:
    config = {**defaults, **(kafka_config or {})}  # the user's dict is copied, never changed
    config.update(required)
    return config


_DUPLICATES_WHY = (
    "a producer that sends ack events must be idempotent, or a retried send can write an ack "
    "record twice: a duplicated INIT record cancels itself (XOR) and completes its trees before "
    "any ack, a duplicated ACK record unbalances them and they time out and replay"
)


def _flat(config: dict) -> dict:
    """``config`` as librdkafka sees it: confluent-kafka merges ``default.topic.config`` over it."""
    topic_config = config.get("default.topic.config")
    return {**config, **topic_config} if isinstance(topic_config, dict) else config


def check_ack_sender_config(config: dict | None, *, component: str) -> None:
    """Raise :class:`ConfigError` if ``config`` would let an ack sender write a record twice.

    Refuses ``enable.idempotence`` set to anything librdkafka does not read as true (it reads
    ``true``, ``t`` and ``1`` in any case as true), and the settings librdkafka itself refuses
    with idempotence: ``acks`` other than ``all``/``-1``, ``retries`` < 1, ``max.in.flight`` > 5,
    ``queuing.strategy`` other than ``fifo`` (each under any of its librdkafka names).
    """
    config = _flat(config or {})
    if "enable.idempotence" in config and str(config["enable.idempotence"]).lower() not in ("true", "t", "1"):
        raise ConfigError(
            f"{component}: kafka_config sets enable.idempotence={config['enable.idempotence']!r}; "
            f"{_DUPLICATES_WHY}. Remove enable.idempotence (the library sets it to true)")
    rules = (
        (("acks", "request.required.acks"), lambda v: str(v).lower() in ("all", "-1"), "all"),
        (("retries", "message.send.max.retries"), lambda v: _int(v) is None or _int(v) >= 1, ">= 1"),
        (("max.in.flight", "max.in.flight.requests.per.connection"),
         lambda v: _int(v) is None or _int(v) <= 5, "<= 5"),
        (("queuing.strategy",), lambda v: str(v).lower() == "fifo", "fifo"),
    )
    for names, allowed, needed in rules:
        for name in names:
            if name in config and not allowed(config[name]):
                raise ConfigError(
                    f"{component}: kafka_config sets {name}={config[name]!r}, which defeats idempotence "
                    f"(it needs {names[0]} {needed}); {_DUPLICATES_WHY}. Remove {name} from kafka_config")


def _int(value) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None  # not a number: librdkafka refuses it with its own message


def new_producer(bootstrap_servers: str, kafka_config: dict | None = None, *,
                 ack_sender: str | None = None, **overrides) -> Producer:
    """An idempotent ``acks=all`` producer; ``kafka_config`` passes librdkafka settings through.

    ``ack_sender`` names the component when the producer sends ack events: a configuration
    that could duplicate a record is then refused (:func:`check_ack_sender_config`).
    """
    config = _merged(kafka_config, {"bootstrap.servers": bootstrap_servers}, _PRODUCER_DEFAULTS)
    config.update(overrides)
    if ack_sender is not None:
        check_ack_sender_config(config, component=ack_sender)
    return Producer(with_log(config))


def new_consumer(bootstrap_servers: str, group_id: str, kafka_config: dict | None = None, **overrides) -> Consumer:
    """A consumer with manual commits and offset storage (the layer decides what is committed)."""
    defaults = {"auto.offset.reset": "earliest", "enable.partition.eof": False}
    required = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    config = _merged(kafka_config, required, defaults)
    config.update(overrides)
    return Consumer(with_log(config))


def message_coordinates(message: Message) -> str:
    return f"{message.topic()}[{message.partition()}]@{message.offset()}"


class AckSender:
    """Packs ack-topic entries per partition and produces one record per partition per ``send``.

    ``sender`` is the task id written into each record (the owner, for INIT entries).
    With ``ack_partitions == 0`` (no ackers) entries are dropped.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        acks_topic: str,
        ack_partitions: int,
        sender: int,
        max_entries_per_record: int = MAX_ENTRIES_PER_RECORD,
    ) -> None:
        self.producer = producer
        self.acks_topic = acks_topic
        self.sender = sender
        self.max_entries_per_record = max_entries_per_record
        self.delivery_errors: list[KafkaError] = []
        self.records_sent = 0
        self.entries_sent = 0
        self._packer = AckPacker(ack_partitions=ack_partitions)
        # add(kind, root, val=0): the packer's own method, one call per ack entry instead of two
        self.add = self._packer.add

    @property
    def ack_partitions(self) -> int:
        return self._packer.ack_partitions

    def __len__(self) -> int:
        return len(self._packer)

    def add_many(self, kind: EventKind, entries: Iterable[tuple[int, int]]) -> None:
        self._packer.add_many(kind, entries)

    def send(self) -> int:
        """Produce everything added so far (does not flush the producer); returns entries sent."""
        sent = 0
        for partition, (kinds, roots, vals) in self._packer.drain().items():
            for start in range(0, len(kinds), self.max_entries_per_record):
                stop = start + self.max_entries_per_record
                value = codec.encode_ack_batch(self.sender, kinds[start:stop], roots[start:stop], vals[start:stop])
                _produce(self.producer, self.acks_topic, value, partition=partition, on_delivery=self._delivered)
                self.records_sent += 1
            sent += len(kinds)
        self.entries_sent += sent
        return sent

    def _delivered(self, error, message) -> None:
        if error is not None:
            log.error("ack batch to %s[%s] not delivered: %s", self.acks_topic, message.partition(), error)
            self.delivery_errors.append(error)


def produce_tuple(producer: Producer, topic: str, value: bytes | None, *, key: bytes | None,
                  headers, partition: int | None, anchors: dict[int, int], on_delivery: Callable | None = None) -> None:
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
    while True:  # as _produce, inlined: this runs once per emitted tuple
        try:
            if partition is None:
                producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
            else:
                producer.produce(topic, value, key, partition, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or error.code() in _PRODUCER_STATE_ERRORS:
                raise ProducerUnusable(error) from exc
            raise


# Producer settings of spouts and bolts: delivery reports only for failed messages, to the
# producer's ``on_delivery`` (a report per delivered tuple was ~16% of a tracked pipeline's CPU).
# A failed tuple is never lost track of: its edge stays in its tree's XOR, so the tree times out
# and replays (librdkafka gives up on a message after message.timeout.ms, 300 s by default, long
# after the tree's 30 s); the report counts and logs it.
ERRORS_ONLY = {"delivery.report.only.error": True}


class ProducerUnusable(KafkaException):
    """The producer itself failed (fenced, fatal, or not in a transaction), not the record.

    Raised from ``produce``; spouts and bolts let it pass through a handler's error path (it is
    no reason to fail or retry the tuple), so that the transaction aborts and a new producer is
    made, or the process stops and its supervisor restarts it.
    """


_PRODUCER_STATE_ERRORS = (KafkaError._STATE, KafkaError._FENCED, KafkaError._FATAL)


def _produce(producer: Producer, topic: str, value: bytes, **kwargs) -> None:
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
        self.unsent: list[tuple[dict, ParkedRecord]] = []

    def park(self, message: Message, reason: str) -> None:
        self.count += 1
        log.warning(
            "%s: %s at %s; copied to %s and skipped",
            self.component, reason, message_coordinates(message), self.topic,
        )
        timestamp = message.timestamp()[1] if message.timestamp() else -1
        self._write(
            {"key": message.key(), "value": message.value(), "headers": message.headers()},
            ParkedRecord(
                reason=reason,
                attempts=0,
                source_topic=message.topic(),
                source_partition=message.partition(),
                source_offset=message.offset(),
                source_timestamp_ms=timestamp,
                component=self.component,
            ),
        )

    def decode_error(self, message: Message, error: DecodeError) -> None:
        self.park(message, str(error.at(message.topic(), message.partition(), message.offset())))

    def retry_unsent(self) -> None:
        """Write again the copies that failed (call it from the worker's loop, not a callback)."""
        unsent, self.unsent = self.unsent, []
        for record, parked in unsent:
            self._write(record, parked)

    def _write(self, record: dict, parked: ParkedRecord) -> None:
        def delivered(error, _message) -> None:
            if error is not None:
                log.error("%s: quarantine copy of %s[%d]@%d not delivered (%s); writing it again",
                          self.component, parked.source_topic, parked.source_partition, parked.source_offset,
                          error)
                self.unsent.append((record, parked))

        try:
            park(self.producer, self.topic, parked=parked, on_delivery=delivered, **record)
        except ProducerUnusable:
            raise
        except KafkaException as exc:  # not the record's fault (e.g. the topic is missing): try again later
            log.error("%s: quarantine copy of %s[%d]@%d not queued (%s); will try again", self.component,
                      parked.source_topic, parked.source_partition, parked.source_offset, exc)
            self.unsent.append((record, parked))


_SIZE_ERRORS = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)
_TOO_LARGE: dict[tuple[str, str, int, int], None] = {}  # copies refused as too large, oldest first
_TOO_LARGE_KEPT = 10_000
_TOO_LARGE_LOCK = threading.Lock()  # workers of one process (LocalCluster threads) share it


def park(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers,
    parked: ParkedRecord,
    on_delivery: Callable | None = None,
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


def _park(producer: Producer, topic: str, key, value, headers, parked: ParkedRecord,
          on_delivery: Callable | None, *, in_callback: bool) -> None:
    if parked.value_omitted:
        key, value, headers = None, None, []

    def delivered(error, message) -> None:
        if error is not None and error.code() in _SIZE_ERRORS and not parked.value_omitted:
            _remember_too_large(topic, parked)
            again = _as_reference(parked, f"the broker refused it: {error.name()}")
        elif error is not None and on_delivery is None:
            log.error("%s: parked record %s[%d]@%d not delivered (%s); writing it again", topic,
                      parked.source_topic, parked.source_partition, parked.source_offset, error)
            again = parked
        else:
            if on_delivery is not None:
                on_delivery(error, message)
            return
        try:
            _park(producer, topic, key, value, headers, again, on_delivery, in_callback=True)
        except (KafkaException, BufferError) as exc:  # no poll() inside a callback: report it
            log.error("%s: parked record %s[%d]@%d could not be queued again: %s", topic,
                      parked.source_topic, parked.source_partition, parked.source_offset, exc)
            if on_delivery is not None:
                on_delivery(KafkaError(KafkaError._FAIL, f"not queued again: {exc}"), message)

    kept = [(k, v) for k, v in (headers or []) if k != codec.PARKED_HEADER]
    kept.append((codec.PARKED_HEADER, codec.encode_parked(parked)))
    try:
        if in_callback:
            producer.produce(topic, value, key=key, headers=kept, on_delivery=delivered)
        else:
            _produce(producer, topic, value, key=key, headers=kept, on_delivery=delivered)
    except ProducerUnusable:
        raise
    except KafkaException as exc:
        if exc.args[0].code() not in _SIZE_ERRORS or parked.value_omitted:
            raise
        _remember_too_large(topic, parked)
        _park(producer, topic, None, None, [],
              _as_reference(parked, f"over the producer's message.max.bytes: {exc.args[0].name()}"),
              on_delivery, in_callback=in_callback)


def _as_reference(parked: ParkedRecord, why: str) -> ParkedRecord:
    log.error("%s[%d]@%d: %d bytes, too large to park (%s); parking a reference without the value",
              parked.source_topic, parked.source_partition, parked.source_offset, parked.original_bytes, why)
    return dataclasses.replace(
        parked, value_omitted=True,
        reason=f"{parked.reason} [value omitted: {parked.original_bytes} bytes, too large to copy ({why}); "
               f"read it at {parked.source_topic}[{parked.source_partition}]@{parked.source_offset}]")


def _remember_too_large(topic: str, parked: ParkedRecord) -> None:
    with _TOO_LARGE_LOCK:
        _TOO_LARGE[(topic, parked.source_topic, parked.source_partition, parked.source_offset)] = None
        while len(_TOO_LARGE) > _TOO_LARGE_KEPT:
            del _TOO_LARGE[next(iter(_TOO_LARGE))]


class OutcomeListener:
    """Reads the outcomes addressed to one or more spout task ids from ``<topology>.outcomes``.

    Outcomes for owner ``w`` go to partition ``w mod P``; several owners may share it, so entries
    for ids not followed are skipped. ``start`` pins the position to the current end *before* the
    spout sends its first INIT, so no outcome of this incarnation can be missed. A transactional
    spout follows one owner id per source partition and starts reading where the last owner of
    that partition stopped (``follow(owner, from_offset=...)``).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topics: TopologyTopics,
        spout_id: int | None = None,
        kafka_config: dict | None = None,
        quarantine: Quarantine | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.spout_id = spout_id
        self.kafka_config = kafka_config
        self.quarantine = quarantine
        self.undecodable = 0
        self._owners: set[int] = set()
        self._next: dict[int, int] = {}  # partition -> next offset to deliver (all before: delivered)
        self._partitions = 0
        self._consumer: Consumer | None = None

    def start(self, *, timeout: float = 30.0) -> None:
        self._consumer = new_consumer(
            self.bootstrap_servers,
            f"{self.topics.topology}.outcome-reader",
            self.kafka_config,
            **{"isolation.level": "read_committed"},
        )
        partitions = partition_count(admin_client(self.bootstrap_servers, self.kafka_config),
                                     self.topics.outcomes, wait=timeout)
        if partitions is None:
            self._consumer.close()
            self._consumer = None
            raise ConfigError(
                f"outcome topic {self.topics.outcomes} is missing; start an acker worker or call "
                f"ensure_topics() for topology {self.topics.topology!r} first"
            )
        self._partitions = partitions
        if self.spout_id is not None:
            self.follow(self.spout_id)

    def partition_of(self, owner: int) -> int:
        return (owner & ((1 << 64) - 1)) % self._partitions

    def follow(self, owner: int, *, from_offset: int | None = None, timeout: float = 30.0) -> None:
        """Also deliver outcomes for ``owner``: from ``from_offset`` of its partition, else from now."""
        partition = self.partition_of(owner)
        self._owners.add(owner)
        assigned = {tp.partition for tp in self._consumer.assignment()}
        if partition not in assigned:
            if from_offset is None:
                from_offset = self._end_offset(partition, timeout)
            self._consumer.incremental_assign([TopicPartition(self.topics.outcomes, partition, from_offset)])
            self._next[partition] = from_offset
        elif from_offset is not None and from_offset < self.position(owner):
            # read again from the earlier point: outcomes for roots no longer held are ignored
            self._consumer.seek(TopicPartition(self.topics.outcomes, partition, from_offset))
            self._next[partition] = from_offset

    def _end_offset(self, partition: int, timeout: float) -> int:
        """The outcome partition's end, asked of its leader; retried while that is not settled.

        Right after an acker created the topic, the broker may answer NOT_LEADER_FOR_PARTITION for
        a moment (seen on a loaded machine): a spout must not die of that at start.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topics.outcomes, partition), timeout=max(1.0, deadline - time.monotonic()),
                    cached=False)
                return high
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("outcome partition %s[%s] not ready (%s); asking again", self.topics.outcomes, partition,
                         exc.args[0])
                time.sleep(0.2)

    def unfollow(self, owner: int) -> None:
        self._owners.discard(owner)

    def position(self, owner: int) -> int:
        """The next outcome offset to read on ``owner``'s partition (all before it were delivered)."""
        return self._next[self.partition_of(owner)]

    def poll(self, timeout: float = 0.0, *, max_records: int = 500) -> list[tuple[int, OutcomeKind]]:
        """Outcomes for the followed owners that arrived since the last call."""
        if self._consumer is None:
            raise RuntimeError("OutcomeListener.start() was not called")
        outcomes: list[tuple[int, OutcomeKind]] = []
        if self.quarantine is not None and self.quarantine.unsent:
            self.quarantine.retry_unsent()
        for message in self._consumer.consume(num_messages=max_records, timeout=timeout):
            if message.error() is not None:
                log.warning("outcome consumer: %s", message.error())
                continue
            self._next[message.partition()] = message.offset() + 1
            try:
                batch = codec.decode_outcomes(message.value())
            except DecodeError as error:
                self.undecodable += 1
                if self.quarantine is not None:
                    self.quarantine.decode_error(message, error)
                else:
                    log.warning("%s", error.at(message.topic(), message.partition(), message.offset()))
                continue
            if batch.spout not in self._owners:
                continue
            outcomes.extend(zip(batch.roots.tolist(), map(OutcomeKind, batch.kinds.tolist())))
        return outcomes

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def flush_or_raise(producer: Producer, *, timeout: float = 30.0, what: str = "records") -> None:
    """Flush and raise :class:`DeliveryError` if anything is still queued after ``timeout``."""
    deadline = time.monotonic() + timeout
    remaining = producer.flush(timeout)
    while remaining and time.monotonic() < deadline:
        remaining = producer.flush(max(0.1, deadline - time.monotonic()))
    if remaining:
        raise DeliveryError(f"{remaining} {what} not delivered within {timeout:.0f}s; is the broker up?")


class StuckCall(Exception):
    """A client call did not return within its deadline (the client is abandoned, not reused)."""


def with_deadline(call: Callable, *args, seconds: float):
    """``call(*args)`` with a hard deadline.

    librdkafka's ``send_offsets_to_transaction`` can ignore its own timeout and block forever when
    the group coordinator goes away during the call (confluentinc/librdkafka#5456, #5511); the
    caller then abandons that producer and starts a new one, whose ``init_transactions`` fences it.
    """
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = call(*args)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"deadline-{getattr(call, '__name__', 'call')}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise StuckCall(f"{getattr(call, '__name__', call)} did not return within {seconds:.0f}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
