"""How a bolt runs its handler calls in parallel (:class:`Parallel`, a bolt's ``parallel=``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reliable_kafka.errors import ConfigError

if TYPE_CHECKING:
    from reliable_kafka.bolt.collector import Tuple
    from reliable_kafka.bolt.executors import CallExecutor

__all__ = ["Parallel", "ORDERINGS"]

ORDERINGS = ("key", "partition", "none")


@dataclass(frozen=True)
class Parallel:
    """A bolt's handler calls in flight at once; ``Bolt(parallel=4)`` is ``Parallel(4)``.

    - ``parallelism`` [1]: handler calls in flight at once. 1 with a plain function: the loop calls
      the handler inline, one tuple after another. Above 1, or with an ``async def`` handler: a
      plain handler runs on ``parallelism`` threads, an ``async def`` one as tasks on one asyncio
      loop with at most ``parallelism`` in flight (docs/guarantees.md).
    - ``ordering`` ["key"]: ``"key"`` runs the tuples of one key one at a time in offset order
      (Storm's fields grouping; the record key, or ``key_of(tuple)``; tuples whose key is None are
      ordered per partition), ``"partition"`` one at a time per partition, ``"none"`` in any order.
    - ``key_of`` [None: the record key]: derives the ordering key of a tuple (hashable).
    - ``max_in_flight`` [None: 4 x parallelism]: tuples held at most (running and waiting for their
      key); beyond it the bolt pauses its partitions until calls end.
    - ``revoke_wait_s`` [10.0]: how long a revoke or ``close()`` waits for running calls before it
      commits the done prefix and abandons them (their trees time out and replay).
    - ``executor`` [None: by handler kind]: runs the calls (:mod:`reliable_kafka.bolt.executors`;
      ``SteppedCalls`` lets a test finish calls in any order).
    """

    parallelism: int = 1
    ordering: str = "key"
    key_of: Callable[[Tuple], object] | None = None
    max_in_flight: int | None = None
    revoke_wait_s: float = 10.0
    executor: CallExecutor | None = None

    def __post_init__(self) -> None:
        parallelism, max_in_flight, wait = self.parallelism, self.max_in_flight, self.revoke_wait_s
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ConfigError(
                f"Parallel: parallelism must be an int >= 1 (handler calls in flight), got {parallelism!r}"
            )
        if self.ordering not in ORDERINGS:
            raise ConfigError(
                f"Parallel: ordering must be one of {', '.join(map(repr, ORDERINGS))}, got {self.ordering!r}"
            )
        if self.key_of is not None and not callable(self.key_of):
            raise ConfigError(f"Parallel: key_of must be callable (tuple -> ordering key) or None, got {self.key_of!r}")
        if max_in_flight is not None and (
            not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < parallelism
        ):
            raise ConfigError(
                f"Parallel: max_in_flight must be an int >= parallelism ({parallelism}) or None, got {max_in_flight!r}"
            )
        if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not wait >= 0:  # NaN fails >= 0
            raise ConfigError(f"Parallel: revoke_wait_s must be a number of seconds >= 0, got {wait!r}")
        executor = self.executor
        if executor is not None and not all(callable(getattr(executor, m, None)) for m in ("start", "submit", "close")):
            raise ConfigError(
                "Parallel: executor must run calls (start, submit and close: reliable_kafka.bolt.executors), "
                f"got {executor!r}"
            )

    @classmethod
    def of(cls, component: str, value: object) -> Parallel:
        """A bolt's ``parallel=``: a :class:`Parallel`, or its parallelism as an int."""
        if isinstance(value, Parallel):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ConfigError as error:
                raise ConfigError(f"{component}: parallel={value!r}: {error}") from None
        raise ConfigError(
            f"{component}: parallel must be an int (handler calls in flight) or a Parallel, "
            f"got {value!r} ({type(value).__name__})"
        )
