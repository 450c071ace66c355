"""The clock a component reads: the ``time`` module itself, or one a test or simulation moves.

Spouts, bolts, acker workers and their helpers take it as ``clock=`` (keyword-only; default: the
``time`` module) and read time only through it: :class:`reliable_kafka.testing.ManualClock` is one
that moves only when told to, which is how the seeded simulation runs the shipped classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "monotonic_ms"]


class Clock(Protocol):
    """The part of the ``time`` module that components use (seconds, as ``time`` counts them)."""

    def monotonic(self) -> float:
        """For intervals and deadlines."""
        ...

    def time(self) -> float:
        """Since the epoch: for timestamps written to Kafka."""
        ...

    def sleep(self, seconds: float, /) -> None:
        """Between two tries of a wait loop: a simulated clock moves on, so its deadlines pass."""
        ...


def _time_monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def monotonic_ms(clock: Clock = time) -> Callable[[], int]:
    """``clock.monotonic()`` in whole milliseconds, as a callable (the in-flight tracker's clock).

    Rounded, so that a simulated clock's milliseconds come back exactly; the ``time`` module's in
    integer nanoseconds (no float on the tracker's path, once per root).
    """
    if clock is time:
        return _time_monotonic_ms
    return lambda: round(clock.monotonic() * 1000)
