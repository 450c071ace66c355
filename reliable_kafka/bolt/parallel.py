"""A parallel bolt's calls in flight: ordering keys, backpressure, and what its loop applies.

Up to ``parallelism`` handler calls run at once on an executor (:mod:`reliable_kafka.bolt.executors`).
The bolt's loop owns everything else, in its own thread: which call may start (one at a time per
ordering key), the per-partition done offsets (:class:`~reliable_kafka.core.input_offsets.InputOffsets`)
and every effect on Kafka. A call never touches the producer or a tuple's ack val: its collector
(:class:`CallCollector`) records what it asks for (emit, ack, fail, reset_timeout) on one queue,
and the loop applies those requests in the order each call made them, through the bolt's own
collector: the ack logic and the exception policy exist once (docs/design.md section 6.1). An emit
anchored to a tuple is applied before that tuple's ack, since the call asked for it first.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, Message, TopicPartition

from reliable_kafka.bolt.collector import BoltCollector, Tuple
from reliable_kafka.bolt.executors import (
    ABANDONED,
    ENDED,
    QUEUED,
    RUNNING,
    AsyncioCalls,
    Call,
    CallExecutor,
    SteppedCalls,
    ThreadCalls,
)
from reliable_kafka.bolt.options import Parallel
from reliable_kafka.codec.anchors import ANCHORS_HEADER, decode_anchors
from reliable_kafka.core.commit_metadata import decode_done_above, encode_done_above
from reliable_kafka.core.input_offsets import InputOffsets
from reliable_kafka.errors import ConfigError, DecodeError
from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.kafka.produce import ConsumedHeaders, Header

if TYPE_CHECKING:
    from reliable_kafka.bolt.runner import Bolt

__all__ = ["InFlightCalls", "CallCollector", "read_tuple", "parallel_calls"]

log = logging.getLogger(__name__)


# held full this long, the bolt pauses its partitions (a shorter fill only skips consuming)
PAUSE_AFTER_S = 1.0
# what a call asks the loop for, and how it ended
_EMIT, _ACK, _FAIL, _RESET, _RETURNED, _RAISED = range(6)
# a request or an end, as the loop reads it: (kind, call, what: the request's arguments or how it ended)
Op = tuple[int, Call, Any]


class CallCollector(BoltCollector):
    """The collector one handler call of a parallel bolt is given. Safe from any thread or task:
    each method only records the request for the bolt's loop, which applies them in order."""

    def __init__(self, put: Callable[[Op], None], call: Call) -> None:  # no bolt: nothing applied here
        self._put = put
        self._call = call
        self.current = call.tuple_

    def emit(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        anchors: Tuple | Sequence[Tuple] | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
    ) -> None:
        self._put((_EMIT, self._call, (topic, value, key, anchors, headers, partition)))

    def ack(self, tuple_: Tuple) -> None:
        self._put((_ACK, self._call, tuple_))

    def fail(
        self, tuple_: Tuple, reason: str | None = None, error: BaseException | None = None, retry: bool = True
    ) -> None:
        self._put((_FAIL, self._call, (tuple_, reason, error, retry)))

    def reset_timeout(self, tuple_: Tuple) -> None:
        self._put((_RESET, self._call, tuple_))


def read_tuple(message: Message) -> Tuple:
    """The consumed ``message`` as a :class:`Tuple` (raises DecodeError for a damaged ``rk-anchors``)."""
    raw: bytes | None = None
    headers: ConsumedHeaders = []
    # a consumed record's headers: a list of (name, bytes) pairs (confluent-kafka's type also has a dict)
    received: ConsumedHeaders | tuple[()] = message.headers() or ()  # type: ignore[assignment]
    for name, value in received:
        if name == ANCHORS_HEADER:
            raw = value
        else:
            headers.append((name, value))
    anchors = decode_anchors(raw) if raw is not None else {}
    topic, partition, offset = coordinates(message)
    tuple_ = Tuple(topic, partition, offset, message.key(), message.value(), headers, -1, anchors)
    tuple_._record = message  # its timestamp is read when asked for
    return tuple_


class InFlightCalls:
    """The loop's side of a parallel bolt (called only from the bolt's loop thread, except the two
    read-only status methods :meth:`calls_in_flight` and :meth:`oldest_call_age`)."""

    def __init__(
        self,
        bolt: Bolt,
        executor: CallExecutor,
        *,
        parallelism: int,
        max_in_flight: int,
        ordering: str,
        key_of: Callable[[Tuple], object] | None,
        is_async: bool,
    ) -> None:
        self._bolt = bolt
        self.executor = executor
        self.parallelism = parallelism
        self.max_in_flight = max_in_flight
        self._ordering = ordering
        self._key_of = key_of
        self._is_async = is_async
        self._ops: queue.SimpleQueue[Op] = queue.SimpleQueue()  # requests and ends, from any thread
        self._partitions: dict[tuple[str, int], InputOffsets] = {}
        self._runnable: deque[Call] = deque()  # may start now, in arrival order
        self._blocked: dict[object, deque[Call]] = {}  # key -> calls after the one holding it
        # calls handed to the executor and not ended, in hand-over order: QUEUED in the executor
        # or RUNNING (their state moves under _state_lock: a revoke abandons only calls not begun)
        self._submitted: dict[Call, None] = {}
        self._state_lock = threading.Lock()
        self.held = 0  # calls received and not finished: runnable, blocked, queued and running
        self.paused = False
        self._full_since: float | None = None  # held reached max_in_flight then (monotonic)
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if isinstance(self.executor, SteppedCalls) and self.executor.size is None:
            self.executor.size = self.parallelism
        self.executor.start(self._run, self._run_async if self._is_async else None, self.begin)

    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Track each partition from its committed offset, skipping what its metadata records as done."""
        try:
            committed = consumer.committed(partitions, timeout=30)
        except Exception as exc:  # nothing restored: the records done above the commit point run again
            log.warning("%s: committed offsets not read (%s); reading from the committed offsets", self._bolt.name, exc)
            committed = []
        found = {(tp.topic, tp.partition): tp for tp in committed}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            got = found.get(key)
            point = got.offset if got is not None and got.offset >= 0 else None
            done_above: list[int] = []
            if point is not None and got is not None and got.metadata:
                try:
                    done_above = decode_done_above(point, got.metadata)
                except DecodeError as error:
                    log.warning("%s: ignoring commit metadata of %s[%d]: %s", self._bolt.name, *key, error)
            self._partitions[key] = InputOffsets(point, done_above)
        self.paused = False  # partitions assigned now are not paused: a full round pauses them all again

    def revoke(self, partitions: Iterable[TopicPartition], wait_s: float) -> None:
        """Drop the calls of ``partitions`` not started, wait up to ``wait_s`` for their running
        ones (the caller then commits the done prefix and calls :meth:`forget`)."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._drop_waiting(lambda call: (call.tuple_.topic, call.tuple_.partition) in keys)
        if self._closed:
            wait_s = 0.0  # close() waited already (the consumer's close revokes everything)
        self.wait(lambda: any((c.tuple_.topic, c.tuple_.partition) in keys for c in self._submitted), wait_s)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Calls of these partitions still running are abandoned: their ends no longer count for a commit."""
        for tp in partitions:
            self._partitions.pop((tp.topic, tp.partition), None)

    def close(self, wait_s: float) -> None:
        """Drop every call not started, wait up to ``wait_s`` for the running ones (the caller commits)."""
        self._drop_waiting(lambda call: True)
        self.wait(lambda: bool(self._submitted), wait_s)
        self._closed = True

    def stop(self, timeout: float) -> None:
        """After the last commit: calls still running are abandoned (their trees time out and replay)."""
        self._bolt.stats.abandoned += len(self._submitted)
        self.held -= len(self._submitted)
        self._submitted.clear()
        self.executor.close(timeout)

    def wait(self, busy: Callable[[], bool], wait_s: float) -> None:
        clock = self._bolt._clock.monotonic
        deadline = clock() + wait_s
        self.apply()  # what ended already counts, however short the wait
        while busy():
            left = deadline - clock()
            if left <= 0:
                log.warning(
                    "%s: %d handler calls still running after %.1f s; abandoned (their trees time out and replay)",
                    self._bolt.name,
                    len(self._submitted),
                    wait_s,
                )
                return
            self.apply(wait=min(left, 0.05))

    # --- receiving and starting -----------------------------------------------------------------

    def room(self) -> int:
        """How many more records may be taken from the consumer now (backpressure)."""
        return self.max_in_flight - self.held

    def may_consume(self) -> bool:
        """Room for records: any while running, half of ``max_in_flight`` once paused (each
        resume fetches again what the pause dropped: not once per ended call)."""
        room = self.max_in_flight - self.held
        if room > 0:
            self._full_since = None
        return room > 0 and (not self.paused or room >= max(1, self.max_in_flight // 2))

    def should_pause(self, now: float) -> bool:
        """Full for :data:`PAUSE_AFTER_S` and not paused yet: the bolt pauses its partitions, so that
        it can go on consuming (rebalances, ``max.poll.interval.ms``) without taking records."""
        if self.paused:
            return False
        if self._full_since is None:
            self._full_since = now
        return now - self._full_since >= PAUSE_AFTER_S

    def accept(self, messages: list[Message]) -> None:
        """Turn consumed ``messages`` into calls: skipped when done before, quarantined when their
        anchors do not decode, else queued behind their key."""
        bolt = self._bolt
        stats = bolt.stats
        for message in messages:
            topic, partition, offset = coordinates(message)
            offsets = self._partitions.get((topic, partition))
            if offsets is None:  # consumed before its assign callback ran here: nothing restored
                offsets = self._partitions[(topic, partition)] = InputOffsets()
            if offsets.skip(offset):  # done by an earlier owner (commit metadata)
                bolt._uncommitted = True
                continue
            try:
                offsets.received(offset)
            except Exception:  # a rewind (e.g. an offset reset): these records are held or done already
                log.warning("%s: %s[%d]@%d received again; skipped", bolt.name, topic, partition, offset)
                continue
            stats.received += 1
            try:
                tuple_ = read_tuple(message)
            except DecodeError as error:  # its tree cannot be acked: upstream times it out; the copy keeps it
                assert bolt._quarantine is not None  # made by start()
                bolt._quarantine.decode_error(message, error)
                stats.quarantined += 1
                offsets.done(offset)
                bolt._uncommitted = True
                continue
            if not tuple_.tracked:
                stats.untracked += 1
            call = Call(tuple_, None, offsets)
            self.held += 1
            try:
                call.key = self._key(tuple_)
                hash(call.key)
            except Exception as exc:  # a key_of that raises: the tuple fails, as a raising handler's
                call.key = None
                call.error = exc
            if call.key is None:
                self._runnable.append(call)
            elif call.key in self._blocked:
                self._blocked[call.key].append(call)
            else:
                self._blocked[call.key] = deque()
                self._runnable.append(call)

    def _key(self, tuple_: Tuple) -> object:
        ordering = self._ordering
        if ordering == "none":
            return None
        if ordering == "key":
            key = tuple_.key if self._key_of is None else self._key_of(tuple_)
            if key is not None:
                return ("key", key)
        return ("partition", tuple_.topic, tuple_.partition)  # "partition", and records without a key

    def dispatch(self) -> None:
        """Hand every runnable call to the executor: it runs ``parallelism`` at once and queues the
        rest, so a slot that frees takes the next call without waiting for this loop's round."""
        runnable, submitted = self._runnable, self._submitted
        if not runnable:
            return
        handed = []
        while runnable:
            call = runnable.popleft()
            if call.error is not None:  # its key could not be read: failed without a call
                self._ended(call, call.error)
                continue
            submitted[call] = None
            handed.append(call)
        if handed:
            self.executor.submit(handed)

    def begin(self, call: Call) -> bool:
        """``call`` begins to run (an executor's thread or task): False if a revoke or close
        abandoned it while it was queued (it must not run)."""
        with self._state_lock:
            if call.state == ABANDONED:
                return False
            if call.state == QUEUED:
                call.state = RUNNING
                call.started = self._bolt._clock.monotonic()
            return True

    def _abandon_queued(self, call: Call) -> bool:
        """``call`` will not run if it has not begun (True: abandoned; False: it runs or ran)."""
        with self._state_lock:
            if call.state != QUEUED:
                return False
            call.state = ABANDONED
            return True

    # --- in the executor's threads --------------------------------------------------------------

    def _run(self, call: Call) -> None:
        if not self.begin(call):
            return
        put, clock = self._ops.put, time.monotonic
        started = clock()
        try:
            self._bolt.handler(call.tuple_, CallCollector(put, call))  # type: ignore[misc]
        except BaseException as exc:  # the loop decides what a raise means (Bolt._call_raised)
            call.state = ENDED
            put((_RAISED, call, (exc, clock() - started)))
        else:
            call.state = ENDED
            put((_RETURNED, call, clock() - started))

    async def _run_async(self, call: Call) -> None:
        if not self.begin(call):
            return
        put, clock = self._ops.put, time.monotonic
        started = clock()
        try:
            await self._bolt.handler(call.tuple_, CallCollector(put, call))  # type: ignore[misc]
        except asyncio.CancelledError:
            raise  # the bolt is closing: abandoned
        except BaseException as exc:
            call.state = ENDED
            put((_RAISED, call, (exc, clock() - started)))
        else:
            call.state = ENDED
            put((_RETURNED, call, clock() - started))

    # --- in the loop: applying what the calls asked for ------------------------------------------

    def apply(self, wait: float = 0.0) -> int:
        """Apply the requests and ends reported so far (waiting up to ``wait`` s for the first);
        the number of calls that ended."""
        ops = self._ops
        try:
            op = ops.get(timeout=wait) if wait > 0 else ops.get_nowait()
        except queue.Empty:
            return 0
        bolt = self._bolt
        collector = bolt.collector
        observe = bolt.process_latency.observe
        ended = 0
        while True:
            kind, call, what = op
            if kind == _EMIT:
                topic, value, key, anchors, headers, partition = what
                collector.current = call.tuple_  # a basic bolt anchors to the call's own tuple
                try:
                    collector.emit(topic, value, key=key, anchors=anchors, headers=headers, partition=partition)
                except bolt.FATAL:
                    raise
                except Exception as exc:  # as if the emit had raised in the handler: the call fails
                    if call.error is None:
                        call.error = exc
                finally:
                    collector.current = None
            elif kind == _ACK:
                collector.ack(what)
            elif kind == _FAIL:
                collector.fail(*what)
            elif kind == _RESET:
                collector.reset_timeout(what)
            else:
                ended += 1
                if kind == _RETURNED:
                    observe(what)
                    self._ended(call, call.error)
                else:
                    error, seconds = what
                    observe(seconds)
                    self._ended(call, error)
            try:
                op = ops.get_nowait()
            except queue.Empty:
                break
        bolt._count_emits()
        return ended

    def _ended(self, call: Call, error: BaseException | None) -> None:
        """``call`` returned (``error`` None) or raised: its tuple acked or failed, its offset done,
        its key passed to the next call waiting for it."""
        bolt = self._bolt
        tuple_ = call.tuple_
        try:
            if error is not None:
                bolt._call_raised(tuple_, error)
            elif bolt._acks_on_return:
                bolt.collector.ack(tuple_)
        finally:
            self._submitted.pop(call, None)
            self.held -= 1
            call.offsets.done(tuple_.offset)
            bolt._uncommitted = True
            self._pass_key(call)

    def _pass_key(self, call: Call) -> None:
        key = call.key
        if key is None:
            return
        blocked = self._blocked.get(key)
        if blocked:
            self._runnable.append(blocked.popleft())
        elif blocked is not None:
            del self._blocked[key]

    def _drop_waiting(self, dropping: Callable[[Call], bool]) -> None:
        """Abandon calls not started that ``dropping`` selects (read again by the partition's next owner)."""
        dropped = 0
        for key, blocked in list(self._blocked.items()):
            kept = deque(call for call in blocked if not dropping(call))
            dropped += len(blocked) - len(kept)
            self._blocked[key] = kept
        heads = [call for call in self._runnable if dropping(call)]
        if heads:
            self._runnable = deque(call for call in self._runnable if not dropping(call))
            for call in heads:
                self._pass_key(call)
        dropped += len(heads)
        # queued in the executor, not begun: they will not run
        for call in [call for call in self._submitted if dropping(call) and self._abandon_queued(call)]:
            del self._submitted[call]
            self._pass_key(call)
            dropped += 1
        self.held -= dropped
        self._bolt.stats.abandoned += dropped

    # --- committing -----------------------------------------------------------------------------

    def offsets_to_commit(self) -> list[TopicPartition]:
        """Each partition's commit point, with the offsets done above it as metadata."""
        offsets = []
        for (topic, partition), tracked in self._partitions.items():
            point = tracked.commit_point()
            if point is None:
                continue
            metadata, truncated = encode_done_above(point, tracked.done_above(point))
            if truncated:
                self._bolt.stats.metadata_truncated += 1
            offsets.append(TopicPartition(topic, partition, point, metadata))
        return offsets

    # --- status (any thread) --------------------------------------------------------------------

    def _begun(self) -> list[Call]:
        """The calls running now (read from any thread: the loop may change the dict meanwhile)."""
        for _ in range(5):
            try:
                return [call for call in self._submitted if call.state == RUNNING]
            except RuntimeError:
                continue
        return []

    def handed_over(self) -> int:
        """Calls the executor holds, running or queued (the loop's own view)."""
        return len(self._submitted)

    def calls_in_flight(self) -> int:
        return len(self._begun())

    def oldest_call_age(self, now: float) -> float | None:
        begun = self._begun()
        return max(0.0, now - min(call.started for call in begun)) if begun else None


def parallel_calls(bolt: Bolt, options: Parallel) -> InFlightCalls | None:
    """``bolt``'s calls in flight (None: the serial loop); ConfigError where ``options`` do not fit the bolt."""
    who = type(bolt).__name__
    parallelism, executor = options.parallelism, options.executor
    max_in_flight = 4 * parallelism if options.max_in_flight is None else options.max_in_flight
    is_async = bolt.handler is not None and _is_async(bolt.handler)
    if parallelism == 1 and not is_async and executor is None:
        return None  # the serial loop: no threads, queues or locks
    if bolt.batch_handler is not None:
        raise ConfigError(
            f"{who}: batch_handler runs one call per consumed batch; with parallelism={parallelism} give a "
            "per-tuple handler instead (each tuple then gets its own outcome)"
        )
    if bolt.transactional:
        raise ConfigError(
            f"{who}: transactional=True needs parallelism=1 and a plain function handler: a transaction spans "
            "a consumed batch, whose tuples a parallel bolt finishes out of order (docs/guarantees.md)"
        )
    if executor is None:
        executor = AsyncioCalls(parallelism, name=bolt.name) if is_async else ThreadCalls(parallelism, name=bolt.name)
    return InFlightCalls(
        bolt,
        executor,
        parallelism=parallelism,
        max_in_flight=max_in_flight,
        ordering=options.ordering,
        key_of=options.key_of,
        is_async=is_async,
    )


def _is_async(handler: Callable[..., Any]) -> bool:
    """An ``async def`` handler (also a callable object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
