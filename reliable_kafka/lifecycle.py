"""The run loop every worker shares: start, poll until stopped, close (also on SIGTERM)."""

from __future__ import annotations

import signal
import threading
from typing import Protocol, TypeVar

from reliable_kafka.ops import reporter as ops_reporter

__all__ = ["Pollable", "run_until_stopped"]

Stats = TypeVar("Stats")


class Pollable(Protocol):
    @property
    def stats(self) -> object: ...  # read-only here, so any stats class fits

    def start(self) -> None: ...

    def poll_once(self) -> None: ...

    def close(self) -> None: ...


def run_until_stopped(worker: Pollable, stop: threading.Event | None, *, handle_signals: bool):
    """Run ``worker`` until ``stop`` is set, or SIGTERM/SIGINT with ``handle_signals`` (main thread
    only); ``close`` always runs, so a stopped worker flushes and commits what it has."""
    stop = stop or threading.Event()
    if handle_signals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    reporter = None
    try:
        worker.start()  # inside: a start that fails half-way (a refused topic) still closes what it made
        reporter = ops_reporter.attach(worker)  # status snapshots and /metrics (reliable_kafka.ops)
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
