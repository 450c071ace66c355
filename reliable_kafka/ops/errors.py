"""A component's last error, and handler tracebacks in the log without a flood.

A bolt whose handler raises on every record would write a full traceback per record. Instead,
:func:`handler_raised` logs each kind of error (its type, per component) in full the first time,
then counts it, and once per ``interval_s`` logs one line with the count ("ValueError raised 57
more times in the last 60 s"). It also keeps the component's :class:`LastError` (type, message,
the innermost frames of the stack, host, pid, time), which its status snapshot carries.

Components are keyed weakly: nothing here keeps a worker alive, and the worker's class needs no
new attribute.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LastError", "ErrorLog", "error_log", "last_error_of", "handler_raised", "FRAMES", "LOG_INTERVAL_S"]

FRAMES = 5  # innermost frames kept: where it raised and what called that
LOG_INTERVAL_S = 60.0
_MAX_MESSAGE = 1000


@dataclass(frozen=True)
class LastError:
    """One error as an operator reads it (JSON-ready through :meth:`as_json`)."""

    type: str
    message: str
    frames: list[str]  # innermost last, "file:line in function: source"
    host: str
    pid: int
    at: float  # Unix time
    where: str | None = None  # e.g. the tuple's coordinates
    count: int = 1  # errors of this component so far

    @classmethod
    def of(
        cls, error: BaseException, *, where: str | None = None, at: float | None = None, count: int = 1
    ) -> LastError:
        return cls(
            type=type(error).__name__,
            message=str(error)[:_MAX_MESSAGE],
            frames=frames_of(error),
            host=socket.gethostname(),
            pid=os.getpid(),
            at=round(time.time() if at is None else at, 3),
            where=where,
            count=count,
        )

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def frames_of(error: BaseException, limit: int = FRAMES) -> list[str]:
    """The innermost ``limit`` frames of ``error``'s traceback, one line each."""
    return [
        f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" + (f": {f.line.strip()}" if f.line else "")
        for f in traceback.extract_tb(error.__traceback__)[-limit:]
    ]


class ErrorLog:
    """One component's errors: the last one, a count, and the log's rate limit per error type."""

    def __init__(self, *, interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.last: LastError | None = None
        self.count = 0
        self._lock = threading.Lock()  # a parallel bolt's handler threads report here at once
        self._kinds: dict[str, tuple[float, int]] = {}  # type -> (interval start, suppressed since)

    def record(self, error: BaseException, *, where: str | None = None) -> None:
        with self._lock:
            self.count += 1
            self.last = LastError.of(error, where=where, count=self.count)

    def should_log(self, kind: str) -> tuple[bool, int, float]:
        """Whether to log this error in full now; else counted. Also returns the number of errors
        of ``kind`` not logged since the last full one, and how long ago that was, when the
        interval has passed and a count line is due (0 otherwise)."""
        now = self.clock()
        with self._lock:
            started, suppressed = self._kinds.get(kind, (None, 0))
            if started is None:
                self._kinds[kind] = (now, 0)
                return True, 0, 0.0
            if now - started < self.interval_s:
                self._kinds[kind] = (started, suppressed + 1)
                return False, 0, 0.0
            self._kinds[kind] = (now, 0)
            return False, suppressed + 1, now - started


_logs: weakref.WeakKeyDictionary[object, ErrorLog] = weakref.WeakKeyDictionary()
_logs_lock = threading.Lock()


def error_log(component: object) -> ErrorLog:
    """``component``'s error log (made on first use)."""
    with _logs_lock:
        found = _logs.get(component)
        if found is None:
            found = _logs[component] = ErrorLog()
        return found


def last_error_of(component: object) -> LastError | None:
    """The last error ``component`` recorded, or None."""
    found = _logs.get(component)
    return None if found is None else found.last


def handler_raised(
    component: object,
    error: BaseException,
    logger: logging.Logger,
    message: str,
    *args: object,
    where: str | None = None,
) -> None:
    """Record ``error`` as ``component``'s last error and log it: the first of its type in full
    (``message % args`` with the traceback), then one count line per interval."""
    errors = error_log(component)
    errors.record(error, where=where)
    kind = type(error).__name__
    full, more, span = errors.should_log(kind)
    if full:
        logger.error(message, *args, exc_info=error)
    elif more:
        name = getattr(component, "name", component)
        logger.error(
            "%s: %s raised %d more times in the last %.0f s (tracebacks of the same type are logged once "
            "per %.0f s); latest: %s",
            name,
            kind,
            more,
            span,
            errors.interval_s,
            message % args,
        )
