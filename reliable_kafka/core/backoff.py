"""The wait before a failed record is delivered again (the tracker schedules redeliveries by it)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reliable_kafka.errors import ArgumentError
from reliable_kafka.validation import require_instance, require_int, require_number

__all__ = ["Backoff"]


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff before a redelivery.

    ``delay_ms(n)`` is the wait after attempt ``n`` failed: ``initial_ms * multiplier**(n-1)``,
    capped at ``max_ms``. With ``jitter = j > 0`` the delay is multiplied by a uniform factor in
    ``[1-j, 1+j]`` (then capped again); with ``jitter = 0`` (default) it is deterministic.

    Defaults: 1 s, x2, at most 60 s. With the spouts' ``max_retries=5`` a record is tried again
    after 1, 2, 4, 8 and 16 s: it rides out about 30 s of a downstream outage (a broker's leader
    election, a service's restart) before it is dead-lettered, where the former 100 ms start gave
    up after about 3 s. The anchors: Spring Kafka's retry topics wait 1 s between attempts by
    default (and cap exponential backoff at 30 s); Storm's KafkaSpout starts at 0, doubles, caps at
    10 s and retries forever. A longer outage wants a larger ``max_retries`` (each retry past the
    seventh adds ``max_ms``: ``max_retries=10`` covers about 5 minutes), or ``max_retries=None``
    to retry forever as Storm does (the dead-letter guard does not help then: nothing is parked).
    """

    initial_ms: int = 1000
    multiplier: float = 2.0
    max_ms: int = 60_000
    jitter: float = 0.0
    rng: random.Random | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        require_int("Backoff", "initial_ms", self.initial_ms, minimum=0)
        require_number("Backoff", "multiplier", self.multiplier, minimum=1.0)
        require_int("Backoff", "max_ms", self.max_ms, minimum=self.initial_ms)
        require_number("Backoff", "jitter", self.jitter, minimum=0.0, maximum=1.0)
        require_instance("Backoff", "rng", self.rng, random.Random)
        if self.rng is None:
            object.__setattr__(self, "rng", random.Random())

    def delay_ms(self, attempt: int) -> int:
        """Milliseconds to wait before redelivering a record whose attempt ``attempt`` failed."""
        if attempt < 1:
            raise ArgumentError(f"Backoff: attempt numbers start at 1, got {attempt}")
        try:
            delay = min(self.initial_ms * self.multiplier ** (attempt - 1), self.max_ms)
        except OverflowError:
            delay = self.max_ms
        if self.jitter and self.rng is not None:  # rng is set in __post_init__
            delay = min(delay * (1.0 + self.rng.uniform(-self.jitter, self.jitter)), self.max_ms)
        return int(round(delay))
