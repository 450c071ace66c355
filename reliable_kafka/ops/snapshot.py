"""What a running component says about itself: counters, latency, partitions, a short history.

:func:`view_of` wraps a worker (spout, transactional spout, bolt, acker worker, Spark spout or
bolt) in a read-only view; :meth:`ComponentView.sample` reads its public counters and returns a
plain dict. The reporter thread and the Prometheus collector call it from their own threads while
the worker runs, so a view only reads: integer counters (atomic under the GIL) and dict copies; a
read that races a mutation of a dict is retried (``RuntimeError: dictionary changed size``). The
Kafka consumer is not touched from those threads (a call into it while the worker's thread is in
``consume`` can block): :meth:`ComponentView.refresh` reads its position and cached end offsets
in the worker's own thread, from the run loop, about once a second. What the broker says (the end
offsets and the group's committed offsets) is read by :class:`BrokerOffsets`, a client of the
view's own, from the sampling thread: a worker whose loop is blocked still shows its true lag.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.ops.errors import last_error_of

if TYPE_CHECKING:
    from confluent_kafka import Consumer

__all__ = ["ComponentView", "BrokerOffsets", "view_of"]

log = logging.getLogger(__name__)

OFFSET_INVALID = -1001

T = TypeVar("T")
D = TypeVar("D")

Worker = Any
"""A spout, bolt, acker worker or Spark job, read by its public attributes (``getattr`` for the
optional ones): the workers import this module, so it names none of their classes."""

Partition = dict[str, Any]
"""A partition's row in a snapshot: topic, partition, position, end, committed, lag and the kind's own."""


def _retry(read: Callable[[], T], default: D) -> T | D:
    for _ in range(5):
        try:
            return read()
        except RuntimeError:  # a dict changed size under us: read again
            continue
    return default


def _consumer_partitions(consumer: Consumer | None) -> list[Partition]:
    """Assigned partitions with the consumer's position and cached end (both local, no I/O)."""
    if consumer is None:
        return []
    try:
        assignment = consumer.assignment()
        positions = consumer.position(assignment) if assignment else []
    except Exception:  # closed meanwhile, or not subscribed yet
        return []
    out = []
    for tp in positions:
        try:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
        except Exception:
            high = OFFSET_INVALID
        out.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "position": tp.offset if tp.offset >= 0 else None,
                "end": high if high >= 0 else None,
            }
        )
    return out


def _lag(partitions: list[Partition], start_at: str = "committed") -> int | None:
    """Records between ``start_at`` (the group's committed offset, or the consumer's position) and
    the end, summed (None: unknown); a partition without one counts as :func:`_partition_lag` does."""
    total, known = 0, False
    for p in partitions:
        lag = _partition_lag(p, (start_at, "start", "position"))
        if lag is not None:
            total += lag
            known = True
    return total if known or not partitions else None


class BrokerAnswer(NamedTuple):
    committed: int | None  # the group's commit point (None: nothing committed)
    start: int | None  # the log's first offset
    end: int | None  # the offset the next record will get


class BrokerOffsets:
    """The broker's end offsets and a group's committed offsets, read with a consumer of its own
    (it joins no group; the worker's consumer is never touched from another thread). Answers
    are kept ``max_age_s``, so a metrics scrape between snapshots asks nothing more."""

    TIMEOUT_S = 2.0  # a broker that does not answer in time: the figures are unknown this round

    def __init__(self, worker: Worker, *, max_age_s: float = 1.0) -> None:
        self.worker = worker
        self.max_age_s = max_age_s
        self._consumer: Consumer | None = None
        self._read_at = -1e9
        self._known: dict[tuple[str, int], BrokerAnswer] = {}

    def read(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], BrokerAnswer]:
        """(topic, partition) -> the group's committed offset and the log's start and end, for
        ``tps``; a partition missing from the answer was not read this round."""
        now = time.monotonic()
        if now - self._read_at < self.max_age_s and all(tp in self._known for tp in tps):
            return self._known
        self._read_at = now
        known: dict[tuple[str, int], BrokerAnswer] = {}
        try:
            from confluent_kafka import TopicPartition

            consumer = self._client()
            committed: dict[tuple[str, int], int | None] = {}
            if getattr(self.worker, "group_id", None):
                for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=self.TIMEOUT_S):
                    committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
            for t, p in tps:
                start, end = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=self.TIMEOUT_S, cached=False)
                known[(t, p)] = BrokerAnswer(
                    committed.get((t, p)), start if start >= 0 else None, end if end >= 0 else None
                )
        except Exception as exc:  # the broker is away, or a client closed meanwhile: unknown this round
            log.debug("%s: broker offsets not read: %s", getattr(self.worker, "name", "?"), exc)
        self._known = known
        return known

    def _client(self) -> Consumer:
        if self._consumer is None:
            from reliable_kafka.kafka.clients import new_consumer

            worker = self.worker
            group = getattr(worker, "group_id", None) or f"{worker.topics.topology}.status-offsets"
            self._consumer = new_consumer(
                worker.bootstrap_servers,
                group,
                getattr(worker, "kafka_config", None) or {},
                clients=getattr(worker, "clients", None),
            )
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception as exc:
                log.debug("broker offsets client close: %s", exc)
            self._consumer = None


class ComponentView:
    """Base view: what every kind shares. Subclasses fill ``kind`` and :meth:`_read`."""

    kind = "component"
    latency_name: str | None = None  # "complete" (spouts) or "process" (bolts)

    broker_committed = True  # the group's committed offsets from the broker (a spout knows its own)

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.consumer_partitions: list[Partition] = []  # as of the last refresh()
        self.broker = BrokerOffsets(worker)

    @property
    def reads_from_start(self) -> bool:
        """True when the worker's consumer begins a partition without a commit at the log's start
        (``auto.offset.reset=earliest``, reliable-kafka's default)."""
        config = getattr(self.worker, "kafka_config", None) or {}
        return str(config.get("auto.offset.reset", "earliest")).lower() in ("earliest", "smallest", "beginning")

    def refresh(self) -> None:
        """In the worker's thread: the consumer's assigned partitions, positions and cached ends."""
        self.consumer_partitions = _consumer_partitions(getattr(self.worker, "_consumer", None))

    def close(self) -> None:
        self.broker.close()

    def partitions(self) -> list[Partition]:
        """The assigned partitions (as of the last refresh) with the broker's end offset and, where
        the broker answered, the group's committed offset and ``lag`` (end minus committed)."""
        partitions = [dict(p) for p in self.consumer_partitions]
        if not partitions or getattr(self.worker, "bootstrap_servers", None) is None:
            return partitions
        answers = self.broker.read([(p["topic"], p["partition"]) for p in partitions])
        for p in partitions:
            answer = answers.get((p["topic"], p["partition"]))
            if answer is None:
                continue
            if answer.end is not None:
                p["end"] = answer.end
            if answer.start is not None and self.reads_from_start:
                p["start"] = answer.start  # where the consumer begins without a commit
            if self.broker_committed:
                p["committed"] = answer.committed
        return partitions

    def last_error(self) -> dict[str, Any] | None:
        found = last_error_of(self.worker)
        return None if found is None else found.as_json()

    @property
    def name(self) -> str:
        return cast(str, self.worker.name)

    @property
    def topology(self) -> str:
        return cast(str, self.worker.topics.topology)

    @property
    def group(self) -> str | None:
        return getattr(self.worker, "group_id", None)

    @property
    def inputs(self) -> list[str]:
        return list(getattr(self.worker, "source_topics", []))

    def outputs(self) -> list[str]:
        declared = getattr(self.worker, "output_topic", None)
        seen = getattr(self.worker, "output_topics", None) or ()
        return sorted({*seen, *([declared] if declared else [])})

    def latency(self) -> LatencyHistogram | None:
        return None

    def sample(self) -> dict[str, Any]:
        """``counters``, ``progress``, ``backlog``, ``partitions`` and kind-specific gauges."""
        lock = getattr(self.worker, "_lock", None)  # Spark jobs share their tracker between threads
        if lock is not None:
            with lock:
                read = self._read()
        else:
            read = self._read()
        stopped_by = getattr(self.worker, "stopped_by", None)  # why it stopped itself (a tripped guard)
        if stopped_by:
            read["stopped_by"] = stopped_by
        return read

    def _read(self) -> dict[str, Any]:
        raise NotImplementedError


def _counters(stats: object) -> dict[str, int | float]:
    values = asdict(stats) if is_dataclass(stats) and not isinstance(stats, type) else dict(vars(stats))
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class SpoutView(ComponentView):
    kind = "spout"
    latency_name = "complete"
    broker_committed = False  # its commit point is its own figure, the same as the broker's

    def latency(self) -> LatencyHistogram:
        return cast(LatencyHistogram, self.worker.tracker.complete_latency)

    def _tracker_counts(self) -> tuple[object, dict[str, int]]:
        """The tracker's counters (a TrackerStats) and its dead letters by reason."""
        return self.worker.tracker.stats, self.worker.tracker.dead_letters_by_reason

    def _read(self) -> dict[str, Any]:
        worker, tracker = self.worker, self.worker.tracker
        counters = _counters(worker.stats)
        tracker_stats, by_reason = self._tracker_counts()
        for key in ("failed", "timed_out", "backstop_expired", "redelivered", "ignored_outcomes"):
            counters[key] = getattr(tracker_stats, key)
        pending = tracker.pending_roots()
        partitions = self.partitions()
        committed: dict[tuple[str, int], int] = _retry(lambda: dict(worker.stats.committed), {})
        # (topic, partition) -> (pending, retrying, oldest pending offset, its first emit in ms)
        summary: dict[tuple[str, int], tuple[int, int, int | None, int | None]] = _retry(tracker.pending_summary, {})
        now_ms = tracker.now_ms()
        for p in partitions:
            tp = (p["topic"], p["partition"])
            p["committed"] = committed.get(tp)
            count, retrying, oldest, first_ms = summary.get(tp, (0, 0, None, None))
            p["pending"], p["retrying"] = count, retrying
            p["oldest_pending"] = (
                None if oldest is None else {"offset": oldest, "age_s": round(max(0, now_ms - first_ms) / 1000.0, 3)}
            )
            p["lag"] = _partition_lag(p)
        lag = _lag(partitions, "position")  # records not read yet; those read are in ``pending``
        return {
            "counters": counters,
            "progress": counters.get("completed", 0) + counters.get("dead_lettered", 0),
            "backlog": None if lag is None else pending + lag,
            "pending_roots": pending,
            "paused": bool(worker.stats.paused),
            "dead_letters_by_reason": _retry(lambda: dict(by_reason), {}),
            "partitions": partitions,
        }


class TransactionalSpoutView(SpoutView):
    """The tracker's counts as of the spout's last commit: an aborted round's work is done again."""

    kind = "transactional-spout"

    def latency(self) -> LatencyHistogram:
        return cast(LatencyHistogram, self.worker.committed_complete_latency)

    def _tracker_counts(self) -> tuple[object, dict[str, int]]:
        return self.worker.committed_tracker_stats, self.worker.committed_dead_letters_by_reason


class BoltView(ComponentView):
    kind = "bolt"
    latency_name = "process"

    def latency(self) -> LatencyHistogram:
        return cast(LatencyHistogram, self.worker.process_latency)

    def _read(self) -> dict[str, Any]:
        worker = self.worker
        counters = _counters(worker.stats)
        handled = worker.process_latency.count
        counters["handled"] = handled
        partitions = self.partitions()
        for p in partitions:
            p["lag"] = _partition_lag(p)
        lag = _lag(partitions)
        read = {
            "counters": counters,
            "progress": handled,
            # the committed offsets are behind every tuple not yet handled, acked and committed
            "backlog": lag,
            "partitions": partitions,
            "last_error": self.last_error(),
        }
        read.update(_calls(worker))
        return read


def _calls(worker: Worker) -> dict[str, Any]:
    """The handler calls in flight and the age of the oldest, where the bolt tells them (a bolt
    without these methods reports none); safe from another thread."""
    found: dict[str, Any] = {}
    in_flight = getattr(worker, "calls_in_flight", None)
    oldest = getattr(worker, "oldest_call_age", None)
    parallelism = getattr(worker, "parallelism", None)
    if callable(in_flight):
        found["calls_in_flight"] = int(in_flight())
    if callable(oldest):
        age = oldest(time.monotonic())
        found["oldest_call_s"] = None if age is None else round(float(age), 3)
    if isinstance(parallelism, int):
        found["parallelism"] = parallelism
    return found


def _partition_lag(p: Partition, order: tuple[str, ...] = ("committed", "start", "position")) -> int | None:
    """End minus the commit point. Without a commit: from the log's start where the consumer begins
    there (the records read are not done either; ``reliable-kafka lag`` counts the same), else from
    the consumer's position."""
    for key in order:
        if p.get(key) is not None:
            return None if p.get("end") is None else max(0, p["end"] - p[key])
    return None


class AckerView(ComponentView):
    kind = "acker"

    @property
    def inputs(self) -> list[str]:
        return [self.worker.topics.acks]

    def outputs(self) -> list[str]:
        return [self.worker.topics.outcomes]

    def _read(self) -> dict[str, Any]:
        worker = self.worker
        counters = _counters(worker.stats)
        partitions = self.partitions()
        for p in partitions:
            p["lag"] = _partition_lag(p)
        return {
            "counters": counters,
            "progress": counters.get("records", 0),
            # records not read yet: an acker commits only below its oldest pending root, so its
            # committed offset trails the records it has folded while trees are in flight
            "backlog": _lag(partitions, "position"),
            "pending_roots": worker.stats.pending,
            "table_bytes": worker.stats.table_bytes,
            "partitions": partitions,
        }


class SparkSpoutView(ComponentView):
    kind = "spark-spout"
    latency_name = "complete"

    def latency(self) -> LatencyHistogram:
        return cast(LatencyHistogram, self.worker.tracker.complete_latency)

    def _read(self) -> dict[str, Any]:
        worker, tracker = self.worker, self.worker.tracker
        counters = _counters(worker.stats)
        counters.update({f"tracker_{k}": v for k, v in tracker.stats.as_dict().items()})
        counters["completed"] = tracker.stats.completed
        counters["dead_lettered"] = getattr(worker, "dead_lettered", 0)
        pending = tracker.pending_roots()
        summary = tracker.pending_summary()
        now_ms = tracker.now_ms()
        partitions = []
        for (topic, partition), point in tracker.commit_points().items():
            count, retrying, oldest, first_ms = summary.get((topic, partition), (0, 0, None, None))
            partitions.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "position": None,
                    "end": None,
                    "committed": point,
                    "pending": count,
                    "retrying": retrying,
                    "oldest_pending": None
                    if oldest is None
                    else {"offset": oldest, "age_s": round(max(0, now_ms - first_ms) / 1000.0, 3)},
                }
            )
        return {
            "counters": counters,
            "progress": counters["completed"] + counters["dead_lettered"],
            "backlog": pending,
            "pending_roots": pending,
            "dead_letters_by_reason": dict(tracker.dead_letters_by_reason),
            "partitions": partitions,
        }


class SparkBoltView(ComponentView):
    kind = "spark-bolt"

    def _read(self) -> dict[str, Any]:
        worker = self.worker
        counters = _counters(worker.stats)
        for key in ("acked", "failed", "untracked"):
            counters[key] = getattr(worker, key, 0)
        return {"counters": counters, "progress": counters.get("inputs", 0), "backlog": None, "partitions": []}


# a worker's ``component`` names its view: the workers import lifecycle, which imports this module,
# so it cannot import their classes
_VIEWS: dict[str, type[ComponentView]] = {
    view.kind: view for view in (SpoutView, TransactionalSpoutView, BoltView, AckerView, SparkSpoutView, SparkBoltView)
}


def view_of(worker: Worker) -> ComponentView | None:
    """The view for ``worker``'s kind (its ``component``); None for an object this module does not know."""
    view = _VIEWS.get(getattr(worker, "component", ""))
    return None if view is None else view(worker)
