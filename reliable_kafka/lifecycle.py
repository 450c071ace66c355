"""The run loop every worker shares: start, poll until stopped, close (also on SIGTERM)."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
from collections.abc import Iterator
from typing import Protocol, TypeVar

from reliable_kafka.errors import ConfigError
from reliable_kafka.ops import reporter as ops_reporter

__all__ = [
    "Pollable",
    "run_until_stopped",
    "YOUNG_GC_ENV",
    "SUGGESTED_YOUNG_GC_THRESHOLD",
    "young_gc_threshold",
    "young_collections_per_batch",
]

Stats = TypeVar("Stats", covariant=True)

YOUNG_GC_ENV = "RK_GC_YOUNG_THRESHOLD"
SUGGESTED_YOUNG_GC_THRESHOLD = 50_000
"""An opt-in for a worker process: ``RK_GC_YOUNG_THRESHOLD=50000`` raises CPython's young-generation
GC threshold to that while worker loops run (unset, the default: the process's own is left alone).

A loop holds a consumed batch (up to 500 messages, each with its header list, tuple and anchors)
while it works through it: with the default threshold (700 container objects allocated and not
freed) young collections run several times per batch, find the batch alive, and promote it to the
older generations, which full collections then walk again. At 50,000 a collection comes after
many batches and finds their objects gone (the word count's Python CPU fell by about a sixth:
``./rk bench pipeline``, docs/performance.md). Cyclic garbage waits a little longer to be collected.
It is a setting of the whole process, so the library never changes it unasked: the container image
sets it for the processes it runs. Only a lower threshold is raised, and the old one comes back
when the last worker loop ends.
"""


def young_gc_threshold() -> int | None:
    """The threshold ``RK_GC_YOUNG_THRESHOLD`` asks for, or None when it is unset or empty."""
    raw = os.environ.get(YOUNG_GC_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(
            f"{YOUNG_GC_ENV}={raw!r}: a whole number of objects >= 1 (e.g. {SUGGESTED_YOUNG_GC_THRESHOLD}) or unset"
        )
    return value


_gc_lock = threading.Lock()
_gc_loops = 0  # worker loops running in this process (LocalCluster: several threads)
_gc_saved: tuple[int, ...] | None = None  # the process's thresholds, restored by the last loop
_gc_raised_to: int | None = None


@contextlib.contextmanager
def young_collections_per_batch() -> Iterator[None]:
    """Raise the young-generation GC threshold to :func:`young_gc_threshold`'s while the block runs
    (nothing when it is unset)."""
    global _gc_loops, _gc_saved, _gc_raised_to
    wanted = young_gc_threshold()
    with _gc_lock:
        if _gc_loops == 0:
            current = gc.get_threshold()
            if wanted is not None and current[0] < wanted:
                _gc_saved, _gc_raised_to = current, wanted
                gc.set_threshold(wanted, *current[1:])
        _gc_loops += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_loops -= 1
            if _gc_loops == 0 and _gc_saved is not None:
                if gc.get_threshold()[0] == _gc_raised_to:  # else someone set their own meanwhile
                    gc.set_threshold(*_gc_saved)
                _gc_saved = None


class Pollable(Protocol[Stats]):
    @property
    def stats(self) -> Stats: ...  # read-only here, so any stats class fits (Stats is covariant)

    def start(self) -> None: ...

    def poll_once(self) -> None: ...

    def close(self) -> None: ...


def _cluster_answers(worker: object, stop: threading.Event) -> bool:
    """Wait for a real cluster to answer before a worker starts (``kafka.admin.wait_for_cluster``);
    True at once for a worker without a :class:`Connection` of confluent-kafka's clients (tests and
    the simulation give MemoryKafka's). A worker with a ``metrics_port`` serves it from the first
    failed try (``ops.waiting``: live, not ready, ``rk_component_waiting_for_kafka 1``) until the
    cluster answers, so the port does not look like a dead process meanwhile."""
    from reliable_kafka.config import Connection
    from reliable_kafka.kafka.admin import admin_client
    from reliable_kafka.ops.waiting import wait_serving

    connection = getattr(worker, "connection", None)
    if not isinstance(connection, Connection) or connection.clients is not None:
        return True
    name = str(getattr(worker, "name", type(worker).__name__))
    admin = admin_client(connection.bootstrap_servers, dict(connection.client_config()), component=name)
    return wait_serving(worker, admin, stop, bootstrap_servers=connection.bootstrap_servers)


def run_until_stopped(worker: Pollable[Stats], stop: threading.Event | None, *, handle_signals: bool) -> Stats:
    """Run ``worker`` until ``stop`` is set, or SIGTERM/SIGINT with ``handle_signals`` (main thread
    only); ``close`` always runs, so a stopped worker flushes and commits what it has."""
    stop = stop or threading.Event()
    young_gc_threshold()  # a malformed RK_GC_YOUNG_THRESHOLD fails here, before anything starts
    if handle_signals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    reporter = None
    try:
        if not _cluster_answers(worker, stop):
            return worker.stats  # stopped while the cluster was not reachable: nothing started
        worker.start()  # inside: a start that fails half-way (a refused topic) still closes what it made
        reporter = ops_reporter.attach(worker)  # status snapshots and /metrics (reliable_kafka.ops)
        with young_collections_per_batch():
            while not stop.is_set():
                worker.poll_once()
                if reporter is not None:
                    reporter.tick()
    finally:
        try:
            worker.close()
        finally:
            if reporter is not None:
                reporter.close()  # after close: the last snapshot has the final counters
    return worker.stats
