"""The spout's side of the root index that ``reliable-kafka trace`` reads (the record format:
:mod:`reliable_kafka.codec.root_index`)."""

from __future__ import annotations

from array import array
from typing import Any

from reliable_kafka.codec.root_index import MAX_PAIRS_PER_RECORD, encode_root_index

__all__ = ["RootIndex", "ROOT_INDEX_INTERVAL_S"]

ROOT_INDEX_INTERVAL_S = 1.0  # a poll loop's root index goes about once a second (RootIndex.send_due)


class RootIndex:
    """The spout's side: (offset, root) pairs per source partition, sent by :meth:`send` (the Spark
    spout: with each batch's INITs) or, from a poll loop, by :meth:`send_due` about once a second."""

    def __init__(self, producer: Any, *, topic: str, spout_id: int, interval_s: float = ROOT_INDEX_INTERVAL_S) -> None:
        # a confluent-kafka Producer, or anything with its produce(topic, value, key=): the spout
        # hands its producer over once it has made it (None until then), a bench passes a stub
        self.producer = producer
        self.topic = topic
        self.interval_s = interval_s
        self.spout_id = spout_id
        self._pending: dict[tuple[str, int], array[int]] = {}
        self._sent_at: float | None = None
        self._full = False  # a partition holds MAX_PAIRS_PER_RECORD pairs: send at once

    def add(self, tp: tuple[str, int], offset: int, root: int) -> None:
        pairs = self._pending.get(tp)
        if pairs is None:
            pairs = self._pending[tp] = array("q")
        pairs.append(offset)
        pairs.append(root)
        if len(pairs) >= 2 * MAX_PAIRS_PER_RECORD:
            self._full = True

    def add_many(self, tp: tuple[str, int], offsets: list[int], roots: list[int]) -> None:
        """:meth:`add` for each (offset, root) pair of ``tp`` (a consumed batch), with one interleave."""
        if not len(offsets):
            return
        pairs = self._pending.get(tp)
        if pairs is None:
            pairs = self._pending[tp] = array("q")
        interleaved = [0] * (2 * len(offsets))
        interleaved[0::2] = offsets
        interleaved[1::2] = roots
        pairs.extend(interleaved)
        if len(pairs) >= 2 * MAX_PAIRS_PER_RECORD:
            self._full = True

    def send_due(self, now: float) -> None:
        """:meth:`send` if ``interval_s`` passed since the last send (``now``: a monotonic clock's
        seconds) or a partition's pairs fill a record. A poll round's record was one produce request
        a round (a tenth of a tracked pipeline's requests at 1,000 sentences/s) for what only
        ``reliable-kafka trace`` reads, a minute back from the record's time: a second late costs it
        nothing. A spout killed before the send loses its last second's index, never a tree."""
        if self._pending and (self._full or self._sent_at is None or now - self._sent_at >= self.interval_s):
            self._sent_at = now
            self.send()

    def send(self) -> None:
        """Produce what was added, one record per source partition (and per MAX_PAIRS_PER_RECORD pairs)."""
        if not self._pending:
            return
        pending, self._pending, self._full = self._pending, {}, False
        for (topic, partition), pairs in pending.items():
            key = f"{topic}:{partition}".encode()
            for value in encode_root_index(self.spout_id, pairs):
                try:
                    self.producer.produce(self.topic, value, key=key)
                except BufferError:  # only the trace loses these pairs; never the tree
                    pass
