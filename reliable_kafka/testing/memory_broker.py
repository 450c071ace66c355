"""The in-memory Kafka's broker side: topics, partition logs, transactions, injected faults.

One :class:`MemoryKafka` is a whole cluster in one process. It is also a
:class:`~reliable_kafka.kafka.factory.KafkaClients`: pass it as ``clients=`` to a spout, bolt or
acker worker and they run on it unchanged. Nothing runs in the background: a producer's records
reach the log when it is polled or flushed, a consumer group rebalances when its members poll, and
time is the injected ``clock``. The same calls in the same order give the same result.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from reliable_kafka.errors import ArgumentError, ConfigError
from reliable_kafka.testing.memory_groups import Group
from reliable_kafka.validation import require_bool, require_callable, require_int

if TYPE_CHECKING:
    from reliable_kafka.testing.memory_clients import MemoryAdmin, MemoryProducer
    from reliable_kafka.testing.memory_consumer import MemoryConsumer

__all__ = ["MemoryKafka", "ManualClock", "FAULTS", "new_message"]

TopicPartitionKey = tuple[str, int]
Headers = list[tuple[str, bytes | None]]  # a record's headers as a consumer reads them
DeliveryCallback = Callable[[KafkaError | None, Message], None]  # a produce's on_delivery

# what fail_next() can make fail, and the error each raises or reports by default
FAULTS = {
    "produce": None,  # produce() raises BufferError, librdkafka's queue-full (or the KafkaException given)
    "delivery": KafkaError._MSG_TIMED_OUT,  # the record is not written; its delivery report has the error
    "commit": KafkaError.REQUEST_TIMED_OUT,  # consumer.commit() raises, nothing is committed
    "consume": KafkaError.TOPIC_AUTHORIZATION_FAILED,  # consume() returns an error event (no record) first
    "committed": KafkaError.NOT_COORDINATOR,  # consumer.committed() raises (a fresh broker's coordinator)
    "send_offsets": KafkaError.COORDINATOR_NOT_AVAILABLE,  # send_offsets_to_transaction raises (abortable)
    "commit_transaction": KafkaError.REQUEST_TIMED_OUT,  # commit_transaction raises (abortable), nothing commits
}

# librdkafka's error event for a static member fenced by another with its group.instance.id
FENCED_STATIC_MEMBER = KafkaError(
    KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other consumer with same group.instance.id"
)


def _message_class() -> Callable[..., Message]:
    """confluent-kafka's Message where it can be made (2.13 and later), else a stand-in with its getters."""
    try:
        Message(topic="t")
        return Message
    except TypeError:
        return cast("Callable[..., Message]", PlainMessage)  # the same getters: used as a Message


class PlainMessage:
    """A consumed or delivered record with confluent-kafka's ``Message`` getters (older confluent-kafka)."""

    def __init__(
        self,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Headers | None = None,
        timestamp: tuple[int, int] = (0, 0),
        error: KafkaError | None = None,
    ) -> None:
        self._fields: tuple[
            str | None,
            int | None,
            int | None,
            bytes | None,
            bytes | None,
            Headers | None,
            tuple[int, int],
            KafkaError | None,
        ] = (topic, partition, offset, key, value, headers, timestamp, error)

    def topic(self) -> str | None:
        return self._fields[0]

    def partition(self) -> int | None:
        return self._fields[1]

    def offset(self) -> int | None:
        return self._fields[2]

    def key(self) -> bytes | None:
        return self._fields[3]

    def value(self) -> bytes | None:
        return self._fields[4]

    def headers(self) -> Headers | None:
        return self._fields[5]

    def timestamp(self) -> tuple[int, int]:
        return self._fields[6]

    def error(self) -> KafkaError | None:
        return self._fields[7]

    def __len__(self) -> int:
        return len(self._fields[4] or b"")


MESSAGE = _message_class()


def new_message(**fields: Any) -> Message:
    return MESSAGE(**fields)


class ManualClock:
    """A clock that moves only when told to: ``clock()`` is the time in ms, ``advance(ms)`` moves it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        require_int("ManualClock", "start_ms", start_ms, minimum=0)
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ArgumentError(f"ManualClock: time does not go back ({ms} ms)")
        self.now_ms += ms

    # a component's clock too (reliable_kafka.core.clock.Clock): ``Spout(..., clock=manual_clock)``

    def monotonic(self) -> float:
        return self.now_ms / 1000

    time = monotonic

    def sleep(self, seconds: float, /) -> None:
        self.advance(max(0, int(seconds * 1000)))


@dataclass
class Transaction:
    """One producer transaction: the partitions it wrote and the group offsets it will commit."""

    transactional_id: str
    state: str = "open"  # open | committed | aborted
    first_offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    offsets: dict[str, list[TopicPartition]] = field(default_factory=dict)  # group -> with metadata
    # a record of it that failed delivery: its commit fails, abortable (librdkafka's commit_transaction)
    delivery_error: KafkaError | None = None


@dataclass
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp: tuple[int, int]
    transaction: Transaction | None = None
    control: bool = False  # a commit or abort marker: takes an offset, never delivered

    def visible(self, read_committed: bool) -> bool:
        if self.control:
            return False
        return not read_committed or self.transaction is None or self.transaction.state == "committed"

    def message(self, topic: str, partition: int) -> Message:
        return new_message(
            topic=topic,
            partition=partition,
            offset=self.offset,
            key=self.key,
            value=self.value,
            headers=list(self.headers) if self.headers else None,
            timestamp=self.timestamp,
        )


class PartitionLog:
    __slots__ = ("records", "start")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.start = 0  # offsets below it were deleted (retention)

    @property
    def end(self) -> int:
        """The high watermark: the offset the next record gets."""
        return self.records[-1].offset + 1 if self.records else self.start

    def stable_end(self) -> int:
        """The last stable offset: read_committed consumers stop at the first open transaction."""
        for record in self.records:
            if record.transaction is not None and record.transaction.state == "open":
                return record.offset
        return self.end

    def at(self, offset: int) -> int:
        """Index of the first record at or after ``offset``."""
        low, high = 0, len(self.records)
        while low < high:
            mid = (low + high) // 2
            if self.records[mid].offset < offset:
                low = mid + 1
            else:
                high = mid
        return low


@dataclass
class Topic:
    name: str
    partitions: list[PartitionLog]
    config: dict[str, str]

    @property
    def log_append_time(self) -> bool:
        return self.config.get("message.timestamp.type") == "LogAppendTime"


class MemoryKafka:
    """A Kafka cluster in memory, for unit tests and simulations (no threads, no sockets).

    Keyword arguments: ``clock`` [wall time]: a callable giving the time in ms (record timestamps,
    ``offsets_for_times``); ``auto_create_topics`` [False]: a produce to a missing topic creates it
    with ``default_partitions`` [1] partitions, instead of failing delivery;
    ``idle_waits_advance_clock`` [False]: a ``consume``/``poll`` that finds nothing moves a
    :class:`ManualClock` on by its timeout, as the wait would take (a simulation whose code reads
    that clock then sees its deadlines pass instead of spinning).

    Topics: :meth:`create_topic`, :meth:`messages`, :meth:`delete_records`. Groups: :meth:`committed`.
    Faults: :meth:`fail_next`, :meth:`fence`, and ``crash``/``lose_partitions`` on a consumer group's
    member (:meth:`crash`). Clients: :meth:`producer`, :meth:`consumer`, :meth:`admin` take
    librdkafka configuration dicts, as confluent-kafka's constructors do.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], int] | None = None,
        auto_create_topics: bool = False,
        default_partitions: int = 1,
        idle_waits_advance_clock: bool = False,
    ) -> None:
        require_callable("MemoryKafka", "clock", clock, optional=True)
        require_bool("MemoryKafka", "auto_create_topics", auto_create_topics)
        require_int("MemoryKafka", "default_partitions", default_partitions, minimum=1)
        require_bool("MemoryKafka", "idle_waits_advance_clock", idle_waits_advance_clock)
        if idle_waits_advance_clock and not hasattr(clock, "advance"):
            raise ConfigError(
                "MemoryKafka: idle_waits_advance_clock needs a clock with advance(ms), e.g. ManualClock()"
            )
        self.idle_waits_advance_clock = idle_waits_advance_clock
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self.topics: dict[str, Topic] = {}
        self.groups: dict[str, Group] = {}
        self._epochs: dict[str, int] = {}  # transactional.id -> current producer epoch
        self._open: dict[str, Transaction] = {}  # transactional.id -> its open transaction
        self._faults: dict[str, list[KafkaError | None]] = {name: [] for name in FAULTS}

    # --- KafkaClients ---------------------------------------------------------------------------

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        from reliable_kafka.testing.memory_clients import MemoryProducer

        return MemoryProducer(self, config)

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        from reliable_kafka.testing.memory_consumer import MemoryConsumer

        return MemoryConsumer(self, config)

    def admin(self, config: dict[str, Any]) -> MemoryAdmin:
        from reliable_kafka.testing.memory_clients import MemoryAdmin

        return MemoryAdmin(self, config)

    # --- topics ---------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """Create ``name`` (raises KafkaException TOPIC_ALREADY_EXISTS if it exists)."""
        if name in self.topics:
            raise KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."))
        if partitions < 1:
            raise KafkaException(KafkaError(KafkaError.INVALID_PARTITIONS, f"{name}: {partitions} partitions"))
        self.topics[name] = Topic(name, [PartitionLog() for _ in range(partitions)], dict(config or {}))
        for group in self.groups.values():
            group.topics_changed()

    def topic(self, name: str) -> Topic:
        found = self.topics.get(name)
        if found is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{name}: unknown topic"))
        return found

    def log(self, topic: str, partition: int) -> PartitionLog:
        partitions = self.topic(topic).partitions
        if not 0 <= partition < len(partitions):
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, f"{topic}[{partition}]: no such partition"))
        return partitions[partition]

    def messages(self, topic: str, partition: int | None = None, *, read_committed: bool = True) -> list[Message]:
        """The records of ``topic`` (one partition, or all in partition order) as a consumer sees them."""
        found = self.topic(topic)
        chosen = range(len(found.partitions)) if partition is None else [partition]
        result: list[Message] = []
        for p in chosen:
            log = found.partitions[p]
            end = log.stable_end() if read_committed else log.end
            result.extend(r.message(topic, p) for r in log.records if r.offset < end and r.visible(read_committed))
        return result

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Retention: records below offset ``before`` are gone (the log start moves up)."""
        log = self.log(topic, partition)
        end = log.end  # before the records go: deleting them all keeps the high watermark, as Kafka
        log.records = log.records[log.at(before) :]
        log.start = max(log.start, min(before, end))

    def append(
        self,
        topic: str,
        partition: int,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        transaction: Transaction | None,
    ) -> Record:
        """Write one record (a delivered produce)."""
        found = self.topic(topic)
        log = self.log(topic, partition)
        if found.log_append_time or timestamp_ms is None:
            stamp = (TIMESTAMP_LOG_APPEND_TIME if found.log_append_time else TIMESTAMP_CREATE_TIME, self.clock())
        else:
            stamp = (TIMESTAMP_CREATE_TIME, timestamp_ms)
        record = Record(log.end, key, value, headers, stamp, transaction)
        log.records.append(record)
        if transaction is not None:
            transaction.first_offsets.setdefault((topic, partition), record.offset)
        return record

    def partition_for(self, topic: str, key: bytes | None, counter: int) -> int:
        """librdkafka's default partitioner in spirit: a key hashes (CRC32) to one partition."""
        count = len(self.topic(topic).partitions)
        return (zlib.crc32(key) if key is not None else counter) % count

    # --- consumer groups ------------------------------------------------------------------------

    def group(self, group_id: str) -> Group:
        if group_id not in self.groups:
            self.groups[group_id] = Group(self, group_id)
        return self.groups[group_id]

    def committed(self, group_id: str, topic: str, partition: int) -> tuple[int, str | None] | None:
        """The group's committed (offset, metadata) of a partition, or None."""
        group = self.groups.get(group_id)
        return None if group is None else group.offsets.get((topic, partition))

    def crash(self, client: MemoryProducer | MemoryConsumer) -> None:
        """``client`` dies. A consumer leaves its group without a revoke callback and commits nothing
        more (its partitions go to the other members at their next poll); a producer loses what it
        had not delivered. Every later call on it raises."""
        client._crash()

    def expire(self, consumer: MemoryConsumer) -> None:
        """``consumer``'s session expires while it goes on (a long pause): its next poll calls
        ``on_lost`` (or ``on_revoke``) and it joins its group again; its commits until then fail."""
        consumer._expire()

    def fatal(self, consumer: MemoryConsumer, error: KafkaError | None = None) -> None:
        """``consumer`` gets librdkafka's fatal error (default: fenced as a static member, as after
        a coordinator move): its next consume returns one error event, then nothing; every other
        call but close raises. ``fail_next("consume", error=KafkaError._FATAL)`` does the same to
        whichever consumer consumes next."""
        consumer._fail_fatally(error or FENCED_STATIC_MEMBER)

    # --- transactions ---------------------------------------------------------------------------

    def init_transactions(self, transactional_id: str) -> int:
        """A new producer epoch: the previous one is fenced and its open transaction aborted."""
        self._end_transaction(transactional_id, commit=False)
        self._epochs[transactional_id] = self._epochs.get(transactional_id, 0) + 1
        return self._epochs[transactional_id]

    def fence(self, transactional_id: str) -> None:
        """Fault: a newer producer with this transactional id appeared (the current one is fenced)."""
        self.init_transactions(transactional_id)

    def epoch(self, transactional_id: str) -> int:
        return self._epochs.get(transactional_id, 0)

    def begin(self, transactional_id: str) -> Transaction:
        transaction = self._open[transactional_id] = Transaction(transactional_id)
        return transaction

    def _end_transaction(self, transactional_id: str, *, commit: bool) -> None:
        transaction = self._open.pop(transactional_id, None)
        if transaction is None:
            return
        transaction.state = "committed" if commit else "aborted"
        for topic, partition in transaction.first_offsets:
            log = self.log(topic, partition)
            log.records.append(
                Record(log.end, None, None, None, (TIMESTAMP_CREATE_TIME, self.clock()), transaction, control=True)
            )
        if commit:
            for group_id, offsets in transaction.offsets.items():
                self.group(group_id).store_commit(offsets)

    def commit_transaction(self, transactional_id: str) -> None:
        self._end_transaction(transactional_id, commit=True)

    def abort_transaction(self, transactional_id: str) -> None:
        self._end_transaction(transactional_id, commit=False)

    # --- faults ---------------------------------------------------------------------------------

    def fail_next(self, operation: str, count: int = 1, *, error: KafkaError | int | None = None) -> None:
        """Make the next ``count`` calls of ``operation`` fail (see :data:`FAULTS` for the names).

        ``error`` is a KafkaError or an error code (default: what the operation usually fails with;
        for ``produce`` a full local queue, BufferError, as librdkafka raises).
        """
        if operation not in FAULTS:
            raise ConfigError(f"MemoryKafka.fail_next: unknown operation {operation!r}; one of {sorted(FAULTS)}")
        if error is None:
            error = FAULTS[operation]
        if error is None:  # a full local queue: produce() raises BufferError, nothing is queued
            self._faults[operation].extend([None] * count)
            return
        if not isinstance(error, KafkaError):
            retriable = operation in ("produce", "delivery", "commit")
            error = KafkaError(
                error,
                f"injected {operation} fault",
                retriable=retriable,
                txn_requires_abort=operation in ("send_offsets", "commit_transaction"),
            )
        self._faults[operation].extend([error] * count)

    def take_fault(self, operation: str) -> KafkaError | None:
        """The next injected error of ``operation``, if any (a full queue raises BufferError here)."""
        pending = self._faults[operation]
        if not pending:
            return None
        error = pending.pop(0)
        if error is None:
            raise BufferError("Local: Queue full (injected)")
        return error
