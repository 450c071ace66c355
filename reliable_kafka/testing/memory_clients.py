"""The in-memory Kafka's producer and admin client (confluent-kafka's API, the subset the library uses).

A produced record waits in the producer's queue until ``poll`` or ``flush`` delivers it (appends it
to its partition and runs its delivery report), so a crash between produce and flush loses it, as
a real process that dies with a full librdkafka queue does. A transactional producer's records are
in the log at delivery but hidden from ``read_committed`` readers until the transaction commits.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ClusterMetadata, PartitionMetadata, TopicMetadata

from reliable_kafka.testing.memory_broker import DeliveryCallback, Headers, new_message

if TYPE_CHECKING:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import ConfigEntry, ConfigResource, NewTopic

    from reliable_kafka.testing.memory_broker import MemoryKafka, Transaction
    from reliable_kafka.testing.memory_groups import Member

__all__ = ["MemoryProducer", "MemoryAdmin", "cluster_metadata"]


def cluster_metadata(kafka: MemoryKafka, topic: str | None = None) -> ClusterMetadata:
    """What ``list_topics`` answers: every topic, or the one asked for (with an error when missing)."""
    metadata = ClusterMetadata()
    metadata.cluster_id, metadata.controller_id, metadata.orig_broker_id = "memory", 0, 0  # type: ignore[assignment]
    names = [topic] if topic is not None else list(kafka.topics)
    for name in names:
        described = TopicMetadata()
        described.topic = name
        found = kafka.topics.get(name)
        if found is None:
            described.error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{name}: unknown topic")
        else:
            for i in range(len(found.partitions)):
                partition = PartitionMetadata()
                partition.id, partition.leader, partition.replicas, partition.isrs = i, 0, [0], [0]
                described.partitions[i] = partition
        metadata.topics[name] = described
    return metadata


class _Queued:
    __slots__ = ("topic", "partition", "key", "value", "headers", "timestamp_ms", "on_delivery", "transaction")

    def __init__(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        on_delivery: DeliveryCallback | None,
        transaction: Transaction | None,
    ) -> None:
        self.topic, self.partition, self.key, self.value = topic, partition, key, value
        self.headers, self.timestamp_ms = headers, timestamp_ms
        self.on_delivery, self.transaction = on_delivery, transaction


class MemoryProducer:
    """confluent-kafka's ``Producer`` on a :class:`MemoryKafka`."""

    def __init__(self, kafka: MemoryKafka, config: dict[str, Any]) -> None:
        self._kafka = kafka
        self.config = dict(config)
        self._on_delivery: DeliveryCallback | None = config.get("on_delivery") or config.get("delivery.report.callback")
        self._errors_only = str(config.get("delivery.report.only.error", "false")).lower() in ("true", "1")
        self._queue: list[_Queued] = []
        self._counter = 0  # round-robin for keyless records
        self._transactional_id: str | None = config.get("transactional.id")
        self._epoch: int | None = None
        self._transaction: Transaction | None = None
        self._fatal: KafkaError | None = None

    def __len__(self) -> int:
        return len(self._queue)

    # --- producing ------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,  # confluent-kafka's positional order (on_delivery is its alias)
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        self._check_usable(contact=False)  # queued locally: a fencing shows at delivery or commit
        if self._transactional_id is not None and self._transaction is None:
            raise KafkaException(
                KafkaError(KafkaError._STATE, "Operation not valid in state Ready: produce outside a transaction")
            )
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        fault = self._kafka.take_fault("produce")
        if fault is not None:
            raise KafkaException(fault)
        if partition is not None and partition >= 0 and topic in self._kafka.topics:
            self._kafka.log(topic, partition)  # raises for a partition that does not exist
        if isinstance(headers, dict):
            headers = list(headers.items())
        encoded: Headers | None = (
            [(k, v.encode() if isinstance(v, str) else v) for k, v in headers] if headers else None
        )
        self._queue.append(
            _Queued(
                topic,
                partition if partition is not None else -1,
                key,
                value,
                encoded,
                timestamp or None,
                on_delivery or callback,
                self._transaction,
            )
        )

    def poll(self, timeout: float | None = None) -> int:
        """Deliver everything queued; returns the number of delivery reports served."""
        return self._deliver()

    def flush(self, timeout: float | None = None) -> int:
        self._deliver()
        return len(self._queue)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self._fail_queued(KafkaError(KafkaError._PURGE_QUEUE, "Local: Purged in queue"))

    def close(self, timeout: float | None = None) -> bool:
        self.flush(timeout)
        return True

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return cluster_metadata(self._kafka, topic)

    def _crash(self) -> None:
        self._queue = []  # never delivered: the process died with them
        self._fatal = KafkaError(KafkaError._FATAL, "producer crashed (MemoryKafka.crash)", fatal=True)

    def _deliver(self) -> int:
        if self._queue and self._transactional_id is not None and self._epoch is not None:
            try:
                self._check_usable()  # sending is where a fenced producer learns it
            except KafkaException:
                return 0  # the queued records were failed with the fatal error
        queue, self._queue = self._queue, []
        served = 0
        for queued in queue:
            if queued.transaction is not None and queued.transaction.state != "open":
                # its transaction was aborted (fenced by a newer producer) before it was sent
                served += self._report(
                    queued, KafkaError(KafkaError._PURGE_QUEUE, "transaction aborted"), queued.partition, -1001, (0, 0)
                )
                continue
            error = self._kafka.take_fault("delivery")
            offset = -1001
            partition = queued.partition
            if error is None and queued.topic not in self._kafka.topics:
                if self._kafka.auto_create_topics:
                    self._kafka.create_topic(queued.topic, self._kafka.default_partitions)
                else:
                    error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{queued.topic}: unknown topic")
            if error is None:
                error = self._refused(queued)
            if error is None:
                if partition < 0:
                    partition = self._kafka.partition_for(queued.topic, queued.key, self._counter)
                    self._counter += 1
                record = self._kafka.append(
                    queued.topic,
                    partition,
                    key=queued.key,
                    value=queued.value,
                    headers=queued.headers,
                    timestamp_ms=queued.timestamp_ms,
                    transaction=queued.transaction,
                )
                offset = record.offset
                timestamp = record.timestamp
            else:
                timestamp = (0, 0)
                if queued.transaction is not None and queued.transaction.delivery_error is None:
                    queued.transaction.delivery_error = error
            served += self._report(queued, error, partition, offset, timestamp)
        return served

    def _refused(self, queued: _Queued) -> KafkaError | None:
        """The broker's refusal of a record over its topic's ``max.message.bytes`` (key and value
        counted; Kafka counts the whole record batch, a few dozen bytes more)."""
        limit = self._kafka.topics[queued.topic].config.get("max.message.bytes")
        size = len(queued.key or b"") + len(queued.value or b"")
        if limit is None or size <= int(limit):
            return None
        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, f"Broker: Message size too large ({size} > {limit})")

    def _report(
        self, queued: _Queued, error: KafkaError | None, partition: int, offset: int, timestamp: tuple[int, int]
    ) -> int:
        callback = queued.on_delivery or self._on_delivery
        if callback is None or (error is None and self._errors_only):
            return 0
        message = new_message(
            topic=queued.topic,
            partition=partition,
            offset=offset,
            key=queued.key,
            value=queued.value,
            headers=queued.headers,
            timestamp=timestamp,
            error=error,
        )
        callback(error, message)
        return 1

    def _fail_queued(self, error: KafkaError) -> None:
        queue, self._queue = self._queue, []
        for queued in queue:
            self._report(queued, error, queued.partition, -1001, (0, 0))

    # --- transactions ---------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        if self._transactional_id is None:
            raise KafkaException(KafkaError(KafkaError._NOT_CONFIGURED, "transactional.id is not set"))
        self._epoch = self._kafka.init_transactions(self._transactional_id)
        self._transaction = None

    def begin_transaction(self) -> None:
        self._check_transactional(contact=False)  # local in librdkafka: a fencing is not noticed here
        if self._transaction is not None:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is already open"))
        assert self._transactional_id is not None  # _check_transactional raised otherwise
        self._transaction = self._kafka.begin(self._transactional_id)

    def send_offsets_to_transaction(
        self,
        positions: list[TopicPartition],
        group_metadata: tuple[str, Member | None],  # MemoryConsumer.consumer_group_metadata()
        timeout: float | None = None,
    ) -> None:
        self._check_in_transaction()
        self._raise_if_a_record_failed()
        fault = self._kafka.take_fault("send_offsets")
        if fault is not None:
            raise KafkaException(fault)
        group, member = group_metadata
        if member is not None and not member.alive:  # KIP-447: a zombie consumer cannot commit
            raise KafkaException(
                KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "the consumer left its group", txn_requires_abort=True)
            )
        assert self._transaction is not None  # _check_in_transaction raised otherwise
        self._transaction.offsets.setdefault(group, []).extend(tp for tp in positions if tp.offset >= 0)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._check_in_transaction()
        self._deliver()
        self._raise_if_a_record_failed()
        fault = self._kafka.take_fault("commit_transaction")
        if fault is not None:
            raise KafkaException(fault)
        assert self._transactional_id is not None  # _check_in_transaction raised otherwise
        self._kafka.commit_transaction(self._transactional_id)
        self._transaction = None

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._check_transactional()
        if self._transaction is None:
            return
        self._fail_queued(KafkaError(KafkaError._PURGE_QUEUE, "Local: Purged in queue (transaction aborted)"))
        assert self._transactional_id is not None  # _check_transactional raised otherwise
        self._kafka.abort_transaction(self._transactional_id)
        self._transaction = None

    def _raise_if_a_record_failed(self) -> None:
        """librdkafka: a record of the transaction that failed for good makes it abortable."""
        assert self._transaction is not None  # _check_in_transaction raised otherwise
        failed = self._transaction.delivery_error
        if failed is not None:
            raise KafkaException(
                KafkaError(
                    failed.code(), f"a record of the transaction failed: {failed.str()}", txn_requires_abort=True
                )
            )

    def _check_usable(self, *, contact: bool = True) -> None:
        """Raise the producer's fatal error; ``contact``: a call that reaches the broker, which is
        where a fenced producer learns that a newer one took its transactional id."""
        if self._fatal is not None:
            raise KafkaException(self._fatal)
        if (
            contact
            and self._transactional_id is not None
            and self._epoch is not None
            and self._kafka.epoch(self._transactional_id) != self._epoch
        ):
            self._fatal = KafkaError(
                KafkaError._FENCED,
                f"producer {self._transactional_id} epoch {self._epoch} was fenced by a newer instance",
                fatal=True,
            )
            self._fail_queued(self._fatal)
            raise KafkaException(self._fatal)

    def _check_transactional(self, *, contact: bool = True) -> None:
        if self._transactional_id is None or self._epoch is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "init_transactions() was not called"))
        self._check_usable(contact=contact)

    def _check_in_transaction(self) -> None:
        self._check_transactional()
        if self._transaction is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))


class MemoryAdmin:
    """confluent-kafka's ``AdminClient`` on a :class:`MemoryKafka` (topics and their configuration)."""

    def __init__(self, kafka: MemoryKafka, config: dict[str, Any]) -> None:
        self._kafka = kafka
        self.config = dict(config)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return cluster_metadata(self._kafka, topic)

    def create_topics(
        self,
        new_topics: list[NewTopic],
        operation_timeout: float = 0,
        request_timeout: float = 0,
        validate_only: bool = False,
    ) -> dict[str, Future[None]]:
        futures = {}
        for new in new_topics:
            future: Future[None] = Future()
            try:
                if not validate_only:
                    self._kafka.create_topic(new.topic, new.num_partitions, dict(new.config or {}))
                future.set_result(None)
            except KafkaException as exc:
                future.set_exception(exc)
            futures[new.topic] = future
        return futures

    def describe_configs(
        self, resources: list[ConfigResource], request_timeout: float = 0
    ) -> dict[ConfigResource, Future[dict[str, ConfigEntry]]]:
        from confluent_kafka.admin import ConfigEntry

        futures = {}
        for resource in resources:
            future: Future[dict[str, ConfigEntry]] = Future()
            found = self._kafka.topics.get(resource.name)
            if found is None:
                future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, resource.name)))
            else:
                config = {"message.timestamp.type": "CreateTime", **found.config}
                future.set_result({name: ConfigEntry(name, value) for name, value in config.items()})
            futures[resource] = future
        return futures
