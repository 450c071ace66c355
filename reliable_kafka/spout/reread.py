"""Reading source records again by offset: a spout that does not hold a record it must redeliver or
dead-letter (a transactional spout's predecessor left it in flight; a Spark job never holds one)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, cast

from confluent_kafka import Consumer, Message, TopicPartition

from reliable_kafka.core.clock import Clock
from reliable_kafka.errors import ReliableKafkaError
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.clients import new_consumer
from reliable_kafka.kafka.factory import KafkaClients

__all__ = ["SourceRereader", "RereadFailed", "clusters", "DELETED", "NOT_A_RECORD"]

log = logging.getLogger(__name__)

REREAD_MAX_GAP = 500  # offsets this close are read again in one sequential pass
REREAD_TIMEOUT_S = 20.0  # well inside a transactional spout's 60 s transaction timeout

TopicPartitionKey = tuple[str, int]
DELETED = "was deleted from Kafka (retention) while in flight"  # gone's ``why`` for such a record
NOT_A_RECORD = "is not a committed record of the source"  # a transaction marker or aborted record


class RereadFailed(ReliableKafkaError):
    """Records that Kafka still holds could not be read again in time (the broker is away?)."""


class SourceRereader:
    """Reads ``(tp, offset)`` records into ``records`` (as ``to_record(message)``), in few passes.

    Offsets close together are read in one sequential pass (a redelivery storm after a broker
    restart is thousands of neighbours). An offset Kafka no longer holds (retention) or that is not
    a committed record (a transaction marker, an aborted or compacted-away record: the consumer's
    position passed it without handing it out) is handed to ``gone(tp, offset, why)`` (``why`` is
    :data:`DELETED` or :data:`NOT_A_RECORD`): there is nothing left to redeliver; the spout counts
    it, and parks a dead-letter reference to a deleted one. Raises :class:`RereadFailed` when a record
    Kafka still holds could not be read within ``timeout_s``.
    """

    def __init__(
        self,
        *,
        component: str,
        bootstrap_servers: str,
        group_id: str,
        kafka_config: dict[str, Any],
        clients: KafkaClients | None = None,
        records: MutableMapping[tuple[TopicPartitionKey, int], object],
        to_record: Callable[[Message], object],
        gone: Callable[[TopicPartitionKey, int, str], None],
        batch_size: int = 500,
        timeout_s: float = REREAD_TIMEOUT_S,
        clock: Clock = time,
    ) -> None:
        self.component = component
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.kafka_config = kafka_config
        self.clients = clients
        self.records = records
        self.to_record = to_record
        self.gone = gone
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self._clock = clock
        self._consumer: Consumer | None = None  # made on the first read again

    def __call__(self, wanted: Iterable[tuple[TopicPartitionKey, int]]) -> None:
        by_partition: dict[TopicPartitionKey, set[int]] = {}
        for key, offset in wanted:
            if (key, offset) not in self.records:
                by_partition.setdefault(key, set()).add(offset)
        if not by_partition:
            return
        try:
            for key, offsets in by_partition.items():
                self._read_partition(key, offsets)
        finally:
            # librdkafka resets a partition's position some time after it is unassigned: a consumer
            # of its own per call never takes an earlier call's position for this one's
            self.close()

    def _read_partition(self, key: TopicPartitionKey, offsets: set[int]) -> None:
        if self._consumer is None:
            self._consumer = new_consumer(
                self.bootstrap_servers,
                self.group_id,
                self.kafka_config,
                clients=self.clients,
                **{"isolation.level": "read_committed"},
            )
        low, _ = self._consumer.get_watermark_offsets(TopicPartition(*key), timeout=10, cached=False)
        missing = set()
        for offset in sorted(offsets):
            if offset < low:  # deleted by retention while in flight: nothing left to redeliver
                self.gone(key, offset, DELETED)
            else:
                missing.add(offset)
        for run in clusters(sorted(missing), max_gap=REREAD_MAX_GAP):
            run = [offset for offset in run if offset in missing]  # an earlier run may have read past some
            if run:
                self._read_run(self._consumer, key, run, missing)

    def _read_run(self, consumer: Consumer, key: TopicPartitionKey, run: list[int], missing: set[int]) -> None:
        """Read from ``run[0]`` until the position passes ``run[-1]``; offsets of ``missing`` (the
        partition's) read on the way are taken, those passed without a record are not records."""
        partition = TopicPartition(*key)
        consumer.assign([TopicPartition(key[0], key[1], run[0])])
        deadline = self._clock.monotonic() + self.timeout_s
        position = run[0]  # every offset below it was read, or holds no record
        try:
            while position <= run[-1] and self._clock.monotonic() < deadline:
                # ask for no more than the run still needs: consume() returns once it has them
                # instead of waiting out its timeout for a full batch
                wanted = min(self.batch_size, run[-1] + 1 - position)
                for message in consumer.consume(num_messages=wanted, timeout=0.5):
                    if message.error() is not None:
                        # a refused READ (or DESCRIBE on the group) stops the spout, naming the
                        # permission; anything else is librdkafka retrying, until the deadline
                        check_consumed(message, consumer, component=self.component)
                        log.debug("%s: re-reading %s[%d]: %s", self.component, *key, message.error())
                        continue
                    offset = cast(int, message.offset())  # a consumed record's, never None
                    position = max(position, offset + 1)
                    if offset in missing:
                        missing.discard(offset)
                        self.records[(key, offset)] = self.to_record(message)
                # librdkafka hands out no transaction marker, but its position passes one: also at
                # the end of the log, where no record follows the marker to show it was passed
                position = max(position, consumer.position([partition])[0].offset)
        finally:
            consumer.unassign()
        for offset in sorted(o for o in missing if o < position):  # read past: not a record
            missing.discard(offset)
            self.gone(key, offset, NOT_A_RECORD)
        left = [offset for offset in run if offset in missing]
        if left:
            raise RereadFailed(
                f"{self.component}: {len(left)} in-flight records of {key[0]}[{key[1]}] from offset "
                f"{left[0]} could not be read again within {self.timeout_s:.0f}s; "
                f"is the broker up?"
            )

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def clusters(offsets: list[int], *, max_gap: int) -> list[list[int]]:
    """Sorted offsets split where the gap to the next one is over ``max_gap`` (one read each)."""
    runs: list[list[int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][-1] <= max_gap:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    return runs
