"""A Spark spout's micro-batch made roots in the driver (docs/design.md section 7.1 and 7.2), two ways, same ids.

* **From offset ranges** (stream batches): Spark's Kafka source reads exactly ``[start, end)`` per
  partition, and its offset log planned those ranges before the batch ran (``offsets/<id>``: the
  ends; the starts are the previous batch's ends, or for batch 0 the initial offsets in
  ``sources/0/0``). The driver derives every offset's root and edge in NumPy
  (``derive.derive_ids``) and registers them with the tracker a partition at a time: nothing is
  collected from the batch, no Spark job runs for it. An offset that holds no record (a
  transaction marker, an aborted or compacted-away record, one deleted by retention) gets a root
  too; it has no outputs, so its final ack alone completes the tree and the offset is done, as it
  would be anyway (a commit point passes what Kafka never hands out). So the counters of such a
  batch (``stats.inputs``, ``completed``) count offsets, markers included: telling them apart
  would take the Spark job this path avoids (docs/spark.md).
* **Collected** (batches with redeliveries, recovery ranges, or ranges the offset log cannot give,
  e.g. a partition added since the last batch): the records' coordinates and ids are collected as
  columns, packed in the JVM into one row of arrays, and registered as before.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Redelivery
from reliable_kafka.errors import DecodeError
from reliable_kafka.ops.failures import FailureRecord
from reliable_kafka.spark.checkpoint import CheckpointFiles, parse_kafka_offsets, read_log_entry
from reliable_kafka.spark.derive import derive_ids
from reliable_kafka.spout.roots import RootOwner

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["BatchRoots", "OffsetLog", "register_ranges", "register_collected", "record_columns", "RANGE_LIMIT"]

log = logging.getLogger(__name__)

TP = tuple[str, int]
Ranges = dict[TP, tuple[int, int]]

RANGE_LIMIT = 100_000
"""Batches spanning more offsets than this (or than ``max_offsets_per_trigger``) are collected:
offsets without records (a compacted topic) must not swell the tracker."""


class OffsetLog:
    """The offset ranges of a streaming query's batches, read from its checkpoint's offset log."""

    def __init__(self, checkpoint_dir: str, files: CheckpointFiles, *, source_index: int = 0) -> None:
        self.root = checkpoint_dir.rstrip("/")
        self.files = files
        self.source_index = source_index
        self._last: tuple[int, dict[TP, int]] | None = None  # the newest batch read: the next one's starts

    def ends(self, batch_id: int) -> dict[TP, int] | None:
        if self._last is not None and self._last[0] == batch_id:
            return self._last[1]
        try:
            if batch_id < 0:  # batch 0 starts where the query started
                lines = read_log_entry(f"{self.root}/sources/{self.source_index}/0", files=self.files)
                line = lines[0].strip() if lines else ""
            else:
                lines = read_log_entry(f"{self.root}/offsets/{batch_id}", files=self.files)
                line = lines[1 + self.source_index].strip() if len(lines) > 1 + self.source_index else ""
            return parse_kafka_offsets(line) if line and line != "-" else None
        except DecodeError:
            return None  # not there (purged, another layout): the batch is collected instead

    def ranges(self, batch_id: int) -> Ranges | None:
        """``(topic, partition) -> (start, end)`` of batch ``batch_id``; None when the log does not
        say exactly (a missing file, a partition without a start, an unresolved or backwards offset)."""
        ends = self.ends(batch_id)
        starts = self.ends(batch_id - 1) if ends is not None else None
        if ends is None or starts is None:
            return None
        self._last = (batch_id, ends)
        ranges: Ranges = {}
        for tp, end in ends.items():
            start = starts.get(tp)
            if start is None or start < 0 or end < start:
                return None
            if end > start:
                ranges[tp] = (start, end)
        return ranges


def register_ranges(owner: RootOwner, ranges: Ranges, salt: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Register every offset of ``ranges`` (first attempts) under ids derived from ``salt``, except
    those the tracker says are done; returns ((root, edge) entries, skipped roots). The caller
    holds the tracker's lock."""
    entries: list[tuple[int, int]] = []
    skipped: list[int] = []
    for (topic, partition), (start, end) in sorted(ranges.items()):
        tp = (topic, partition)
        offsets = np.arange(start, end, dtype=np.int64)
        roots, edges = derive_ids(salt, topic, partition, offsets, 1)
        _track_first_attempts(owner, tp, offsets, roots, edges, entries, skipped)
    return entries, skipped


def _track_first_attempts(
    owner: RootOwner,
    tp: TP,
    offsets: np.ndarray,
    roots: np.ndarray,
    edges: np.ndarray,
    entries: list[tuple[int, int]],
    skipped: list[int],
) -> None:
    """Register first attempts of ``tp`` (ascending NumPy columns) that the tracker does not say
    are done, in one call; their (root, edge) pairs go to ``entries``, skipped roots to ``skipped``."""
    skip = owner.tracker.skip_mask(tp, offsets)
    if skip.any():
        skipped.extend(roots[skip].tolist())
        keep = ~skip
        offsets, roots, edges = offsets[keep], roots[keep], edges[keep]
    kept_roots = roots.tolist()
    owner.track_many(tp, offsets.tolist(), kept_roots, 1)  # ascending and fresh: the tracker's bulk path
    entries.extend(zip(kept_roots, edges.tolist()))


RECORD_COLUMNS = ("topic", "partition", "offset", "attempt", "root", "edge")


def record_columns(batch: DataFrame) -> dict[str, list[Any]]:
    """The batch's record coordinates and ids as one list per column: packed into one row of
    arrays in the JVM, so the driver unpickles a few lists instead of building a Row per record."""
    packed = batch.selectExpr(f"collect_list(struct({', '.join(RECORD_COLUMNS)})) AS r")
    row = packed.selectExpr(*[f"transform(r, s -> s.`{n}`) AS `{n}`" for n in RECORD_COLUMNS]).collect()[0]
    return {n: row[n] or [] for n in RECORD_COLUMNS}


def register_collected(
    owner: RootOwner, columns: dict[str, list[Any]], redeliveries: list[Redelivery]
) -> tuple[list[tuple[int, int]], list[int], list[Redelivery]]:
    """Register the collected records (:func:`record_columns`): first attempts not done yet, and
    the redeliveries asked for; returns ((root, edge) entries, skipped roots, redeliveries Kafka
    did not hand out). The caller holds the tracker's lock.

    First attempts are registered a partition at a time (:func:`_first_attempts_in_bulk`) when
    that gives what record-by-record registration gives; else record by record."""
    split = _first_attempts_in_bulk(columns)
    if split is not None:
        # A redelivery re-emits an offset still pending, which changes no first attempt's skip;
        # one that is not pending (not expected) could, so that batch goes record by record.
        wanted = {(r.tp, r.offset) for r in redeliveries}
        later_rows = zip(split[1]["topic"], split[1]["partition"], split[1]["offset"])
        if not all(owner.tracker.is_pending((t, p), o) for t, p, o in later_rows if ((t, p), o) in wanted):
            split = None
    if split is None:
        return _register_one_by_one(owner, columns, redeliveries)
    firsts, later = split
    entries: list[tuple[int, int]] = []
    skipped: list[int] = []
    for tp, (offsets, roots, edges) in firsts.items():
        _track_first_attempts(owner, tp, offsets, roots, edges, entries, skipped)
    more, more_skipped, missing = _register_one_by_one(owner, later, redeliveries)
    return entries + more, skipped + more_skipped, missing


def _first_attempts_in_bulk(
    columns: dict[str, list[Any]],
) -> tuple[dict[TP, tuple[np.ndarray, np.ndarray, np.ndarray]], dict[str, list[Any]]] | None:
    """``({tp: (offsets, roots, edges)} of first attempts, the other rows' columns)``, or None when
    a partition's first attempts are not strictly ascending or share an offset with a later
    attempt: registering one record can change whether a later one is skipped (it moves a commit
    point over offsets never seen below it; a repeated offset is re-emitted), so those batches go
    record by record, in order. Ascending and distinct, checking every skip first is the same."""
    attempts = np.asarray(columns["attempt"], dtype=np.int64)
    first = attempts == 1
    if not first.any():
        return {}, columns
    topics = np.asarray(columns["topic"], dtype=object)
    partitions = np.asarray(columns["partition"], dtype=np.int64)
    offsets = np.asarray(columns["offset"], dtype=np.int64)
    roots = np.asarray(columns["root"], dtype=np.int64)
    edges = np.asarray(columns["edge"], dtype=np.int64)
    firsts: dict[TP, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for topic, partition in sorted({(t, p) for t, p in zip(topics[first].tolist(), partitions[first].tolist())}):
        rows = (topics == topic) & (partitions == partition)
        ours = offsets[rows & first]
        if len(ours) > 1 and not bool((ours[1:] > ours[:-1]).all()):
            return None
        if np.isin(ours, offsets[rows & ~first]).any():
            return None
        firsts[(topic, partition)] = (ours, roots[rows & first], edges[rows & first])
    others = np.flatnonzero(~first).tolist()  # a few redeliveries
    return firsts, {n: [columns[n][i] for i in others] for n in RECORD_COLUMNS}


def _register_one_by_one(
    owner: RootOwner, columns: dict[str, list[Any]], redeliveries: list[Redelivery]
) -> tuple[list[tuple[int, int]], list[int], list[Redelivery]]:
    tracker = owner.tracker
    wanted = {(r.tp, r.offset): r for r in redeliveries}
    entries: list[tuple[int, int]] = []
    skipped: list[int] = []
    # in offset order, as the tracker takes a partition's records: a Kafka partition split over
    # several Spark tasks (minPartitions) can come back from collect_list a chunk at a time, out of order
    rows = sorted(zip(*(columns[n] for n in RECORD_COLUMNS)), key=itemgetter(0, 1, 2))
    for topic, partition, offset, attempt, root, edge in rows:
        tp = (topic, partition)
        if attempt == 1:
            if tracker.should_skip(tp, offset):
                skipped.append(root)
                continue
        elif wanted.pop((tp, offset), None) is None:
            skipped.append(root)
            continue
        owner.track(tp, offset, root, attempt)
        entries.append((root, edge))
    return entries, skipped, list(wanted.values())


class BatchRoots:
    """A Spark spout's batches registered with its root owner (``owner``, guarded by ``lock``).

    ``offset_log`` gives stream batches' ranges (None: every batch is collected); ``low_watermark``
    tells a record deleted by retention from an offset that never held one. Counters: ``skipped``
    (records Spark handed over again that were already done), ``not_redelivered`` (redeliveries
    Kafka no longer had and that could not be dead-lettered as references; expected 0),
    ``from_ranges`` and ``collected`` (batches registered each way).
    """

    def __init__(
        self,
        *,
        component: str,
        owner: RootOwner,
        offset_log: OffsetLog | None,
        low_watermark: Callable[[TP], int],
        max_offsets_per_trigger: int | None = None,
        lock: AbstractContextManager[object] | None = None,
    ) -> None:
        self.component = component
        self.owner = owner
        self.offset_log = offset_log
        self.low_watermark = low_watermark
        self.range_limit = max(RANGE_LIMIT, max_offsets_per_trigger or 0)
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.skipped = 0
        self.not_redelivered = 0
        self.from_ranges = self.collected = 0  # batches registered each way

    def stream_ranges(self, batch_id: int | None) -> Ranges | None:
        """The offset ranges of stream batch ``batch_id``; None (collect it instead) when the offset
        log does not say, or they span more than ``range_limit`` offsets."""
        if batch_id is None or self.offset_log is None:
            return None
        ranges = self.offset_log.ranges(batch_id)
        if ranges is None or sum(end - start for start, end in ranges.values()) > self.range_limit:
            return None
        return ranges

    def register(
        self, batch: DataFrame, ranges: Ranges | None, salt: int, redeliveries: list[Redelivery]
    ) -> tuple[list[tuple[int, int]], list[int]]:
        """Register the batch's records (from ``ranges``, else collected: a Spark job over ``batch``);
        returns ((root, edge) entries, skipped roots)."""
        columns = record_columns(batch) if ranges is None else None  # outside the lock
        with self.lock:
            if columns is None:
                entries, skipped = register_ranges(self.owner, ranges or {}, salt)
                missing: list[Redelivery] = []
            else:
                entries, skipped, missing = register_collected(self.owner, columns, redeliveries)
            self.skipped += len(skipped)
            self.collected += columns is not None
            self.from_ranges += columns is None
        for redelivery in missing:
            self._not_found(redelivery)
        return entries, skipped

    def _not_found(self, redelivery: Redelivery) -> None:
        """A redelivery Kafka did not hand out: deleted by retention or ``delete_records`` (bound for
        the DLQ as a reference, done once that is delivered), or an offset that never held a record
        (a transaction marker that got a root from its batch's offset range: done)."""
        tp, offset = redelivery.tp, redelivery.offset
        if offset >= self.low_watermark(tp):
            log.debug("%s: %s[%d]@%d holds no record (a transaction marker); done", self.component, *tp, offset)
        elif self.owner.dead_letter_gone(tp, offset):
            log.error(
                "%s: %s[%d]@%d is no longer in Kafka; not redelivered (attempt %d, %s), a reference goes to the DLQ",
                self.component,
                *tp,
                offset,
                redelivery.attempt,
                redelivery.reason,
            )
            return
        else:  # no longer waiting for its redelivery (not expected: it was handed out); do not block the commit
            self.not_redelivered += 1
            log.error("%s: %s[%d]@%d is no longer in Kafka and not held for a retry; done", self.component, *tp, offset)
        with self.lock:
            self.owner.tracker.done_immediately(tp, offset)

    def requeue(self, redeliveries: list[Redelivery]) -> None:
        """Redeliveries whose batch failed before they were emitted: count a failed attempt."""
        tracker = self.owner.tracker
        with self.lock:
            for redelivery in redeliveries:
                root = tracker.emitted(redelivery.tp, redelivery.offset, attempt=redelivery.attempt)
                self.owner.act(tracker.on_outcome(root, OutcomeKind.FAILED))

    def fail_locally(self, roots: list[int], error: BaseException, *, task_id: int) -> None:
        """The batch of ``roots`` failed after they were registered: fail each here, with why."""
        with self.lock:
            for root in roots:
                failure = FailureRecord.of(roots=[root], component=self.component, task_id=task_id, error=error)
                self.owner.fail_locally(root, failure)
