"""Packing of ack-topic entries per partition (``root mod N``), in columns, ready to encode."""

from __future__ import annotations

import numpy as np

from reliable_kafka.core.kinds import EventKind
from reliable_kafka.ids import partition_for_root

__all__ = ["AckPacker", "PackedEntries"]

PackedEntries = tuple[np.ndarray, np.ndarray, np.ndarray]  # kinds uint8, roots int64, vals int64


class AckPacker:
    """Collects (kind, root, val) entries grouped by ack partition until drained.

    ``ack_partitions`` is N, the ack topic's partition count; with N = 0 (reliability off) every
    entry is dropped, as Storm does with zero ackers.
    """

    __slots__ = ("ack_partitions", "_kinds", "_roots", "_vals", "_count")

    def __init__(self, *, ack_partitions: int) -> None:
        if ack_partitions < 0:
            raise ValueError(f"ack_partitions must be >= 0, got {ack_partitions}")
        self.ack_partitions = ack_partitions
        self._kinds: dict[int, list[int]] = {}
        self._roots: dict[int, list[int]] = {}
        self._vals: dict[int, list[int]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, kind: EventKind, root: int, val: int = 0) -> None:
        if self.ack_partitions == 0:
            return
        partition = partition_for_root(root, self.ack_partitions)
        if partition not in self._kinds:
            self._kinds[partition], self._roots[partition], self._vals[partition] = [], [], []
        self._kinds[partition].append(int(kind))
        self._roots[partition].append(root)
        self._vals[partition].append(val)
        self._count += 1

    def add_many(self, kind: EventKind, entries) -> None:
        """Add ``(root, val)`` pairs of one kind."""
        for root, val in entries:
            self.add(kind, root, val)

    def drain(self) -> dict[int, PackedEntries]:
        """Everything collected, per partition, as columns; the packer is empty afterwards."""
        packed = {
            partition: (
                np.array(self._kinds[partition], dtype=np.uint8),
                np.array(self._roots[partition], dtype=np.int64),
                np.array(self._vals[partition], dtype=np.int64),
            )
            for partition in self._kinds
        }
        self._kinds, self._roots, self._vals, self._count = {}, {}, {}, 0
        return packed
