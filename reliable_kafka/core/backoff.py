"""The wait before a failed record is delivered again (the tracker schedules redeliveries by it)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reliable_kafka.errors import ArgumentError, ConfigError

__all__ = ["Backoff"]


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff before a redelivery.

    ``delay_ms(n)`` is the wait after attempt ``n`` failed: ``initial_ms * multiplier**(n-1)``,
    capped at ``max_ms``. With ``jitter = j > 0`` the delay is multiplied by a uniform factor in
    ``[1-j, 1+j]`` (then capped again); with ``jitter = 0`` (default) it is deterministic.
    Defaults: 100 ms, x2, at most 30 s.
    """

    initial_ms: int = 100
    multiplier: float = 2.0
    max_ms: int = 30_000
    jitter: float = 0.0
    rng: random.Random | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.initial_ms < 0:
            raise ConfigError(f"Backoff: initial_ms must be >= 0, got {self.initial_ms}")
        if not self.multiplier >= 1.0:
            raise ConfigError(f"Backoff: multiplier must be >= 1.0, got {self.multiplier}")
        if self.max_ms < self.initial_ms:
            raise ConfigError(f"Backoff: max_ms ({self.max_ms}) must be >= initial_ms ({self.initial_ms})")
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError(f"Backoff: jitter must be within [0, 1], got {self.jitter}")
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
