"""Where a parallel bolt's handler calls run: a pool of threads, one asyncio loop, or a stepped
queue that a test or the simulation runs one call at a time (docs/design.md section 6.1).

An executor only runs calls. Each :class:`Call` is run by ``run(call)`` (a plain handler) or
awaited as ``run_async(call)`` (an ``async def`` handler), both given by the bolt at
:meth:`start`; they mark the call begun (``begin(call)``: False when the bolt abandoned it while it
waited) and report its end to the bolt's loop themselves. The bolt hands over every call that may
run now (at most ``max_in_flight``); the executor runs at most ``size`` of them at once, the others
wait in its queue, so a slot that frees takes the next call without waiting for the bolt's loop.
A serial bolt (``parallelism=1``, a plain handler) uses none of this: its loop calls the handler
inline (:mod:`reliable_kafka.bolt.serial`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from reliable_kafka.errors import ArgumentError

if TYPE_CHECKING:
    from reliable_kafka.bolt.collector import Tuple
    from reliable_kafka.core.input_offsets import InputOffsets

__all__ = [
    "Call",
    "CallExecutor",
    "ThreadCalls",
    "AsyncioCalls",
    "SteppedCalls",
    "QUEUED",
    "RUNNING",
    "ENDED",
    "ABANDONED",
]

log = logging.getLogger(__name__)


QUEUED, RUNNING, ENDED, ABANDONED = range(4)  # a call's state once handed to an executor


class Call:
    """One handler call of a parallel bolt: its tuple, its ordering key and where it stands."""

    __slots__ = ("tuple_", "key", "offsets", "started", "error", "state")

    def __init__(self, tuple_: Tuple, key: object, offsets: InputOffsets) -> None:
        self.tuple_ = tuple_
        self.key = key  # its ordering key (None: none, it may run beside anything)
        self.offsets = offsets  # its partition's InputOffsets when it was received
        self.started = 0.0  # monotonic (the bolt's clock), set when it began to run
        self.error: BaseException | None = None  # an op of the call that could not be applied
        self.state = QUEUED  # RUNNING once begun, then ENDED; ABANDONED by a revoke or close before it began


class CallExecutor(Protocol):
    def start(
        self,
        run: Callable[[Call], None],
        run_async: Callable[[Call], Awaitable[None]] | None,
        begin: Callable[[Call], bool],
    ) -> None:
        """``run``: runs a plain handler's call; ``run_async``: awaits an ``async def`` handler's (else
        None); both begin the call themselves (``begin``, which a stepped executor also calls)."""

    def submit(self, calls: list[Call]) -> None: ...

    def close(self, timeout: float) -> None: ...


class ThreadCalls:
    """``size`` daemon threads, each running one call at a time (a stuck handler cannot hold the
    process's exit: the bolt abandons it after its bounded wait)."""

    def __init__(self, size: int, *, name: str = "bolt") -> None:
        self.size = size
        self.name = name
        self._inbox: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def start(
        self,
        run: Callable[[Call], None],
        run_async: Callable[[Call], Awaitable[None]] | None,
        begin: Callable[[Call], bool],
    ) -> None:
        self._run = run
        for i in range(self.size):
            thread = threading.Thread(target=self._work, name=f"{self.name}-call-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        inbox, run = self._inbox, self._run
        while (call := inbox.get()) is not None:
            run(call)

    def submit(self, calls: list[Call]) -> None:
        put = self._inbox.put
        for call in calls:
            put(call)

    def close(self, timeout: float) -> None:
        for _ in self._threads:
            self._inbox.put(None)
        for thread in self._threads:
            thread.join(timeout / max(1, len(self._threads)))
        self._threads.clear()


class AsyncioCalls:
    """One asyncio loop in a daemon thread; each call a task on it, at most ``size`` of them at
    once: the others wait in a queue on the loop's thread, and a task that ends starts the next
    (no task exists for a call that waits)."""

    def __init__(self, size: int, *, name: str = "bolt") -> None:
        self.size = size
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: deque[Call] = deque()  # touched on the loop's thread only

    def start(
        self,
        run: Callable[[Call], None],
        run_async: Callable[[Call], Awaitable[None]] | None,
        begin: Callable[[Call], bool],
    ) -> None:
        # this executor runs async def handlers, for which the bolt gives run_async
        self._run_async: Callable[[Call], Awaitable[None]] = run_async  # type: ignore[assignment]
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name=f"{self.name}-asyncio", daemon=True)
        self._thread.start()

    def submit(self, calls: list[Call]) -> None:
        assert self._loop is not None  # started
        self._loop.call_soon_threadsafe(self._queue, calls)  # one wake-up of the loop per round

    def _queue(self, calls: list[Call]) -> None:
        self._waiting.extend(calls)
        self._start_tasks()

    def _start_tasks(self, _ended: asyncio.Task[None] | None = None) -> None:
        if _ended is not None:
            self._tasks.discard(_ended)
        waiting, tasks = self._waiting, self._tasks
        while waiting and len(tasks) < self.size:
            task = asyncio.ensure_future(self._run_async(waiting.popleft()))
            tasks.add(task)
            task.add_done_callback(self._start_tasks)

    def close(self, timeout: float) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        def stop() -> None:
            self._waiting.clear()  # abandoned: a cancelled task must not start the next
            for task in list(self._tasks):
                task.cancel()
            loop.call_soon(loop.stop)  # after the cancelled tasks ran their last step

        loop.call_soon_threadsafe(stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None


class SteppedCalls:
    """Calls wait here until :meth:`run_one` runs one of them in the caller's thread: a test or the
    seeded simulation decides which call finishes when (out of order), deterministically. As a
    pool of ``size`` threads (default: the bolt's ``parallelism``) would, the first ``size``
    waiting calls have begun (the others wait their turn), and only those can be run."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self.waiting: list[Call] = []

    def start(
        self,
        run: Callable[[Call], None],
        run_async: Callable[[Call], Awaitable[None]] | None,
        begin: Callable[[Call], bool],
    ) -> None:
        self._run, self._run_async, self._begin = run, run_async, begin
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, calls: list[Call]) -> None:
        self.waiting.extend(calls)
        self._begin_heads()

    def _begin_heads(self) -> None:
        """The calls a pool would run now begin; those abandoned before they began leave the queue."""
        self.waiting[:] = [call for call in self.waiting if call.state != ABANDONED]
        for call in self.waiting[: self.running_slots()]:
            self._begin(call)

    def running_slots(self) -> int:
        """How many of the waiting calls have begun (:meth:`run_one` runs one of those)."""
        assert self.size is not None  # given, or set by the bolt when it starts
        return min(self.size, len(self.waiting))

    def run_one(self, index: int = 0) -> Call:
        """Run the ``index``-th waiting call, one that has begun, to its end (an ``async def``
        handler's on a private loop)."""
        self._begin_heads()
        if not 0 <= index < self.running_slots():
            raise ArgumentError(f"call {index} has not begun: {self.running_slots()} of {len(self.waiting)} have")
        call = self.waiting.pop(index)
        if self._run_async is not None:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._run_async(call))
        else:
            self._run(call)
        self._begin_heads()
        return call

    def close(self, timeout: float) -> None:
        self.waiting.clear()  # abandoned, as a revoke abandons calls that do not end in time
        if self._loop is not None:
            self._loop.close()
            self._loop = None
