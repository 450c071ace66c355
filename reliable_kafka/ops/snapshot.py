"""What a running component says about itself: counters, latency, partitions, a short history.

:func:`view_of` wraps a worker (spout, transactional spout, bolt, acker worker, Spark spout or
bolt) in a read-only view; :meth:`ComponentView.sample` reads its public counters and returns a
plain dict. The reporter thread and the Prometheus collector call it from their own threads while
the worker runs, so a view only reads: integer counters (atomic under the GIL) and dict copies; a
read that races a mutation of a dict is retried (``RuntimeError: dictionary changed size``). The
Kafka consumer is not touched from those threads (a call into it while the worker's thread is in
``consume`` can block): :meth:`ComponentView.refresh` reads its position and cached end offsets
in the worker's own thread, from the run loop, about once a second.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, is_dataclass

from reliable_kafka.core.latency import LatencyHistogram

__all__ = ["ComponentView", "view_of"]

log = logging.getLogger(__name__)

OFFSET_INVALID = -1001


def _retry(read, default):
    for _ in range(5):
        try:
            return read()
        except RuntimeError:  # a dict changed size under us: read again
            continue
    return default


def _consumer_partitions(consumer) -> list[dict]:
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


def _lag(partitions: list[dict]) -> int | None:
    known = [p for p in partitions if p["position"] is not None and p["end"] is not None]
    if partitions and not known:
        return None
    return sum(max(0, p["end"] - p["position"]) for p in known)


class ComponentView:
    """Base view: what every kind shares. Subclasses fill ``kind`` and :meth:`_read`."""

    kind = "component"
    latency_name: str | None = None  # "complete" (spouts) or "process" (bolts)

    def __init__(self, worker) -> None:
        self.worker = worker
        self.consumer_partitions: list[dict] = []  # as of the last refresh()

    def refresh(self) -> None:
        """In the worker's thread: the consumer's assigned partitions, positions and cached ends."""
        self.consumer_partitions = _consumer_partitions(getattr(self.worker, "_consumer", None))

    @property
    def name(self) -> str:
        return self.worker.name

    @property
    def topology(self) -> str:
        return self.worker.topics.topology

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

    def sample(self) -> dict:
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

    def _read(self) -> dict:
        raise NotImplementedError


def _counters(stats) -> dict:
    values = asdict(stats) if is_dataclass(stats) and not isinstance(stats, type) else dict(vars(stats))
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class SpoutView(ComponentView):
    kind = "spout"
    latency_name = "complete"

    def latency(self) -> LatencyHistogram:
        return self.worker.tracker.complete_latency

    def _tracker_counts(self) -> tuple[object, dict[str, int]]:
        """The tracker's counters (a TrackerStats) and its dead letters by reason."""
        return self.worker.tracker.stats, self.worker.tracker.dead_letters_by_reason

    def _read(self) -> dict:
        worker, tracker = self.worker, self.worker.tracker
        counters = _counters(worker.stats)
        tracker_stats, by_reason = self._tracker_counts()
        for key in ("failed", "timed_out", "backstop_expired", "redelivered", "ignored_outcomes"):
            counters[key] = getattr(tracker_stats, key)
        pending = tracker.pending_roots()
        partitions = [dict(p) for p in self.consumer_partitions]
        committed = _retry(lambda: dict(worker.stats.committed), {})
        summary = _retry(tracker.pending_summary, {})
        now_ms = tracker.now_ms()
        for p in partitions:
            tp = (p["topic"], p["partition"])
            p["committed"] = committed.get(tp)
            count, retrying, oldest, first_ms = summary.get(tp, (0, 0, None, None))
            p["pending"], p["retrying"] = count, retrying
            p["oldest_pending"] = (
                None if oldest is None else {"offset": oldest, "age_s": round(max(0, now_ms - first_ms) / 1000.0, 3)}
            )
        lag = _lag(partitions)
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
        return self.worker.committed_complete_latency

    def _tracker_counts(self) -> tuple[object, dict[str, int]]:
        return self.worker.committed_tracker_stats, self.worker.committed_dead_letters_by_reason


class BoltView(ComponentView):
    kind = "bolt"
    latency_name = "process"

    def latency(self) -> LatencyHistogram:
        return self.worker.process_latency

    def _read(self) -> dict:
        worker = self.worker
        counters = _counters(worker.stats)
        handled = worker.process_latency.count
        counters["handled"] = handled
        partitions = [dict(p) for p in self.consumer_partitions]
        lag = _lag(partitions)
        # tuples taken from the consumer whose handler call has not returned (a stuck handler: >= 1)
        in_hand = max(0, counters.get("received", 0) - counters.get("quarantined", 0) - handled)
        return {
            "counters": counters,
            "progress": handled,
            "backlog": None if lag is None else lag + in_hand,
            "partitions": partitions,
        }


class AckerView(ComponentView):
    kind = "acker"

    @property
    def inputs(self) -> list[str]:
        return [self.worker.topics.acks]

    def outputs(self) -> list[str]:
        return [self.worker.topics.outcomes]

    def _read(self) -> dict:
        worker = self.worker
        counters = _counters(worker.stats)
        partitions = [dict(p) for p in self.consumer_partitions]
        return {
            "counters": counters,
            "progress": counters.get("records", 0),
            "backlog": _lag(partitions),
            "pending_roots": worker.stats.pending,
            "table_bytes": worker.stats.table_bytes,
            "partitions": partitions,
        }


class SparkSpoutView(ComponentView):
    kind = "spark-spout"
    latency_name = "complete"

    def latency(self) -> LatencyHistogram:
        return self.worker.tracker.complete_latency

    def _read(self) -> dict:
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

    def _read(self) -> dict:
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


def view_of(worker) -> ComponentView | None:
    """The view for ``worker``'s kind (its ``component``); None for an object this module does not know."""
    view = _VIEWS.get(getattr(worker, "component", ""))
    return None if view is None else view(worker)
