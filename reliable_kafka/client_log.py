"""librdkafka's own log lines, routed through Python logging.

Left alone, librdkafka prints lines such as ``%3|1700000000.123|FAIL|rdkafka#producer-1| ...:
Connection refused`` straight to stderr from its own threads. Every client the library creates
gets a ``logger`` (confluent-kafka's setting) instead: confluent-kafka then sets ``log.queue`` and
serves the lines from the client's own ``poll``/``consume``/``flush`` calls, as
``logger.log(level, "%s [%s] %s", facility, client, text)`` with the syslog level mapped to
Python's (0-2 CRITICAL, 3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG). A client that is never polled
keeps its lines queued in memory and prints nothing.

A broker that is down or restarting is routine here (librdkafka reconnects and retries; the
library reports what it costs: delivery errors, stalled commits). Its connection lines are logged
at INFO, at most one per client and facility every ``interval_s`` seconds, with a count of the
lines left out. Every other line keeps its level (security failures too: retrying cannot fix them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["LOGGER_NAME", "LibrdkafkaLog", "with_log"]

LOGGER_NAME = "reliable_kafka.librdkafka"

# librdkafka facilities of broker connection trouble: FAIL (connect refused, disconnected),
# GETPID (producer id not acquired yet: broker starting or gone), REQTMOUT (requests timed out)
# (security failures come under FAIL too; they keep their level: retrying will not fix them)
CONNECTION_FACILITIES = frozenset({"FAIL", "GETPID", "REQTMOUT"})
_SECURITY_WORDS = ("SSL", "SASL", "uthenticat")


class LibrdkafkaLog:
    """The ``logger`` object handed to confluent-kafka (it needs only a ``log`` method)."""

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}  # (client, facility) -> when last logged
        self._left_out: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args: Any) -> None:
        if len(args) != 3:  # not confluent-kafka's usual call: pass it on unchanged
            self.logger.log(level, msg, *args)
            return
        facility, client, text = args
        if (
            facility in CONNECTION_FACILITIES
            and level > logging.INFO
            and not any(word in text for word in _SECURITY_WORDS)
        ):
            key = (client, facility)
            now = self.clock()
            with self._lock:
                last = self._last.get(key)
                if last is not None and now - last < self.interval_s:
                    self._left_out[key] = self._left_out.get(key, 0) + 1
                    return
                self._last[key] = now
                left_out = self._left_out.pop(key, 0)
            if left_out:
                text = f"{text} ({left_out} similar lines in the last {self.interval_s:.0f} s left out)"
            level = logging.INFO
        self.logger.log(level, "%s [%s] %s", facility, client, text)


def with_log(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (copied) with a :class:`LibrdkafkaLog`, unless it names its own ``logger``."""
    if config.get("logger") is not None:
        return dict(config)
    return {**config, "logger": LibrdkafkaLog()}
