"""Ack events packed per ack partition and produced as ack-topic records."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from confluent_kafka import KafkaError, Message, Producer

from reliable_kafka import codec
from reliable_kafka.core.ack_packer import AckPacker
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.authorization import check_delivery
from reliable_kafka.kafka.produce import produce_waiting

__all__ = ["AckSender", "MAX_ENTRIES_PER_RECORD", "merge_acks"]

log = logging.getLogger(__name__)

MAX_ENTRIES_PER_RECORD = 8000  # 17 bytes an entry: ~136 KB records, well under message.max.bytes (1 MB)
_ACK = int(EventKind.ACK)


def merge_acks(kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries with each root's ACKs folded into one ACK (the XOR of their vals), where the
    root has no other kind of entry among them; the rest unchanged, in order (new arrays).

    A root's value at the acker is the XOR of its entries, so ``ACK(r, a), ACK(r, b)`` and
    ``ACK(r, a ^ b)`` decide the same: a count bolt acks 8 words of one sentence in one batch,
    and the acker then folds, and the broker stores, one entry instead of 8. A root with an INIT,
    FAIL or RESET_TIMEOUT among the entries keeps them all, in their order (FAIL-then-ACK and
    the like stay as sent).
    """
    is_ack = kinds == _ACK
    if np.count_nonzero(is_ack) < 2:
        return kinds, roots, vals
    candidates = np.flatnonzero(is_ack)
    if len(candidates) < len(kinds):
        candidates = candidates[~np.isin(roots[candidates], roots[~is_ack])]
    if len(candidates) < 2:
        return kinds, roots, vals
    order = candidates[np.argsort(roots[candidates], kind="stable")]  # by root, each root's in sent order
    sorted_roots = roots[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_roots[1:] != sorted_roots[:-1])))
    if len(starts) == len(order):
        return kinds, roots, vals  # no root acked twice
    merged_vals = vals.copy()
    merged_vals[order[starts]] = np.bitwise_xor.reduceat(vals[order], starts)
    keep = np.ones(len(kinds), dtype=bool)
    keep[order] = False
    keep[order[starts]] = True  # a root's merged ACK takes the place of its first
    return kinds[keep], roots[keep], merged_vals[keep]


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

    def extend(self, kind: EventKind, roots: list[int] | np.ndarray, vals: list[int] | np.ndarray) -> None:
        self._packer.extend(kind, roots, vals)

    def send(self) -> int:
        """Produce everything added so far (does not flush the producer); returns entries sent
        (after :func:`merge_acks`)."""
        sent = 0
        for partition, (kinds, roots, vals) in self._packer.drain().items():
            kinds, roots, vals = merge_acks(kinds, roots, vals)
            for start in range(0, len(kinds), self.max_entries_per_record):
                stop = start + self.max_entries_per_record
                value = codec.encode_ack_batch(self.sender, kinds[start:stop], roots[start:stop], vals[start:stop])
                produce_waiting(self.producer, self.acks_topic, value, partition=partition, on_delivery=self._delivered)
                self.records_sent += 1
            sent += len(kinds)
        self.entries_sent += sent
        return sent

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        check_delivery(error, message, self.producer)  # refused: the component stops (docs/design.md section 10)
        if error is not None:
            log.error("ack batch to %s[%s] not delivered: %s", self.acks_topic, message.partition(), error)
            self.delivery_errors.append(error)
