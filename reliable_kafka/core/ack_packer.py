"""Packing of ack-topic entries per partition (``root mod N``), in columns, ready to encode."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from reliable_kafka.core.ids import partitions_for_roots
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import ArgumentError, ConfigError

__all__ = ["AckPacker", "PackedEntries"]

PackedEntries = tuple[np.ndarray, np.ndarray, np.ndarray]  # kinds uint8, roots int64, vals int64


class AckPacker:
    """Collects (kind, root, val) entries grouped by ack partition until drained.

    ``ack_partitions`` is N, the ack topic's partition count; with N = 0 (reliability off) every
    entry is dropped, as Storm does with zero ackers. Adding is three list appends; the
    partitioning is done once per drain, vectorised (the hot path adds an entry per tuple). A
    bolt's batch of ACKs may come as NumPy columns (``extend``): kept as they are, in order with
    the entries added around them (a Python int costs about 20 ns to convert at drain).
    """

    __slots__ = ("ack_partitions", "_kinds", "_roots", "_vals", "_columns", "_in_columns")

    def __init__(self, *, ack_partitions: int) -> None:
        if ack_partitions < 0:
            raise ConfigError(f"AckPacker: ack_partitions must be >= 0, got {ack_partitions}")
        self.ack_partitions = ack_partitions
        self._kinds: list[int] = []
        self._roots: list[int] = []
        self._vals: list[int] = []
        self._columns: list[PackedEntries] = []  # entries added before the lists', in order
        self._in_columns = 0

    def __len__(self) -> int:
        return len(self._roots) + self._in_columns

    def add(self, kind: EventKind, root: int, val: int = 0) -> None:
        if self.ack_partitions == 0:
            return
        self._kinds.append(kind)
        self._roots.append(root)
        self._vals.append(val)

    def add_many(self, kind: EventKind, entries: Iterable[tuple[int, int]]) -> None:
        """Add ``(root, val)`` pairs of one kind."""
        if self.ack_partitions == 0:
            return
        for root, val in entries:
            self._kinds.append(kind)
            self._roots.append(root)
            self._vals.append(val)

    def extend(self, kind: EventKind, roots: list[int] | np.ndarray, vals: list[int] | np.ndarray) -> None:
        """Add ``(roots[i], vals[i])`` entries of one kind: a batch's acks, collected by its loop
        (lists of ints, or int64 NumPy columns, which are kept without a conversion per entry)."""
        if self.ack_partitions == 0:
            return
        if len(roots) != len(vals):
            raise ArgumentError(f"AckPacker.extend: {len(roots)} roots but {len(vals)} vals")
        if isinstance(roots, np.ndarray) or isinstance(vals, np.ndarray):
            if len(roots):
                if self._roots:  # what was added before goes first
                    self._in_columns += len(self._roots)
                    self._columns.append(self._lists_as_columns())
                kinds = np.full(len(roots), int(kind), dtype=np.uint8)
                self._columns.append((kinds, np.array(roots, dtype=np.int64), np.array(vals, dtype=np.int64)))
                self._in_columns += len(kinds)
            return
        self._kinds.extend([kind] * len(roots))
        self._roots.extend(roots)
        self._vals.extend(vals)

    def _lists_as_columns(self) -> PackedEntries:
        """The entries in the lists as columns; the lists start empty again."""
        # bytearray reads the IntEnum members as ints in C (np.array asks each for its value: ~4x the cost)
        kinds = np.frombuffer(bytearray(self._kinds), dtype=np.uint8)
        roots = np.array(self._roots, dtype=np.int64)
        vals = np.array(self._vals, dtype=np.int64)
        self._kinds, self._roots, self._vals = [], [], []
        return kinds, roots, vals

    def drain(self) -> dict[int, PackedEntries]:
        """Everything collected, per partition, as columns (in the order added); empty afterwards."""
        if self._columns:
            if self._roots:
                self._columns.append(self._lists_as_columns())
            columns, self._columns, self._in_columns = self._columns, [], 0
            if len(columns) == 1:
                kinds, roots, vals = columns[0]
            else:
                kinds, roots, vals = (np.concatenate(parts) for parts in zip(*columns))
        elif self._roots:
            kinds, roots, vals = self._lists_as_columns()
        else:
            return {}
        if self.ack_partitions == 1:
            return {0: (kinds, roots, vals)}
        partitions = partitions_for_roots(roots, self.ack_partitions)
        order = np.argsort(partitions, kind="stable")  # keeps each partition's entries in order
        partitions, kinds, roots, vals = partitions[order], kinds[order], roots[order], vals[order]
        starts = np.flatnonzero(np.diff(partitions, prepend=-1))
        stops = np.append(starts[1:], len(partitions))
        return {int(partitions[a]): (kinds[a:b], roots[a:b], vals[a:b]) for a, b in zip(starts, stops)}
