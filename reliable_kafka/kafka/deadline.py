"""A hard deadline around a client call that can block forever."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from reliable_kafka.errors import ReliableKafkaError

__all__ = ["StuckCall", "with_deadline"]


class StuckCall(ReliableKafkaError):
    """A client call did not return within its deadline (the client is abandoned, not reused)."""


def with_deadline(call: Callable[..., Any], *args: Any, seconds: float) -> Any:
    """``call(*args)`` with a hard deadline.

    librdkafka's ``send_offsets_to_transaction`` can ignore its own timeout and block forever when
    the group coordinator goes away during the call (confluentinc/librdkafka#5456, #5511); the
    caller then abandons that producer and starts a new one, whose ``init_transactions`` fences it.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call(*args)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"deadline-{getattr(call, '__name__', 'call')}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise StuckCall(f"{getattr(call, '__name__', call)} did not return within {seconds:.0f}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
