"""Ack events packed per ack partition and produced as ack-topic records."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaError, Producer

from reliable_kafka import codec
from reliable_kafka.core.ack_packer import AckPacker
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.authorization import check_delivery
from reliable_kafka.kafka.produce import produce_waiting

__all__ = ["AckSender", "MAX_ENTRIES_PER_RECORD"]

log = logging.getLogger(__name__)

MAX_ENTRIES_PER_RECORD = 8000  # 17 bytes an entry: ~136 KB records, well under message.max.bytes (1 MB)


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

    def extend(self, kind: EventKind, roots: list[int], vals: list[int]) -> None:
        self._packer.extend(kind, roots, vals)

    def send(self) -> int:
        """Produce everything added so far (does not flush the producer); returns entries sent."""
        sent = 0
        for partition, (kinds, roots, vals) in self._packer.drain().items():
            for start in range(0, len(kinds), self.max_entries_per_record):
                stop = start + self.max_entries_per_record
                value = codec.encode_ack_batch(self.sender, kinds[start:stop], roots[start:stop], vals[start:stop])
                produce_waiting(self.producer, self.acks_topic, value, partition=partition, on_delivery=self._delivered)
                self.records_sent += 1
            sent += len(kinds)
        self.entries_sent += sent
        return sent

    def _delivered(self, error, message) -> None:
        check_delivery(error, message, self.producer)  # refused: the component stops (DESIGN 10)
        if error is not None:
            log.error("ack batch to %s[%s] not delivered: %s", self.acks_topic, message.partition(), error)
            self.delivery_errors.append(error)
