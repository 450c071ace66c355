"""A parallel bolt on an I/O-bound stage, tracked, against a hand-written confluent-kafka loop.

Each point of the grid is one stage whose handler waits ``--delays`` ms a record (``time.sleep``
in a plain handler, ``asyncio.sleep`` in an ``async def`` one) and raises on a share ``--errors``
of its calls (a transient error: the next call of the same record succeeds as often as any).
Records (``--records`` at most; fewer where the stage is slow, about ``--seconds`` of work) are
prefilled into a source topic of 8 partitions with 10,000 keys; two configurations read it, one
after the other, their order alternating from round to round:

* ``hand-written``: one confluent-kafka consumer process with a pool of ``parallelism`` threads kept
  busy (up to 4 x parallelism records held), a failed call retried in place on its thread, the
  contiguous done offsets of each partition committed every 200 ms. Nothing is tracked, nothing is
  dead-lettered: it is the yardstick, what a careful engineer writes by hand;
* ``tracked``: a Spout (source -> stage topic), an AckerWorker and the BasicBolt with
  ``parallelism=N, ordering="key"`` on the stage topic, each its own OS process; a raising call
  fails its tuple, the spout replays the record (default retries, then the dead-letter topic).

Figures: records/s from the first handler call until the source's committed offsets reach its end
(the spout commits every 200 ms as the hand-written loop does), the median of ``--rounds``; the
ratio tracked / hand-written, the ratio to ``parallelism=1`` of the same handler, and the records
dead-lettered. A CPU-bound handler (about 0.2 ms of Python a record) at ``--cpu-parallelism``
shows what parallelism costs where it cannot help. Prints the issue's targets beside the figures,
asserts nothing.

Usage: ``./rk bench parallel_bolt [--quick] [--delays 1,5,20] [--parallelism 1,8,64,256]
[--kinds sleep,async] [--errors 0,0.01] [--rounds N] [--seconds S] [--bootstrap-servers H:P]``.
Sized for a 2-core machine: ``--quick`` (5 ms, parallelism 1 and 64) takes a few minutes.
``RK_BENCH_MAX_IN_FLIGHT=N`` gives the parallel bolts ``max_in_flight=N`` (default: the bolt's own).
``RK_BENCH_SWITCH_INTERVAL=S`` sets the GIL's switch interval in the tracked processes.
``RK_BENCH_PROFILE=DIR`` runs the tracked bolt process under cProfile (``DIR/<point>.prof``; the
bolt's loop thread only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from reliable_kafka import Loop, Parallel, Tracking

PARTITIONS = 8
KEYS = 10_000
COMMIT_INTERVAL_MS = 200
CPU_WORK = 2_000  # iterations of the CPU-bound handler's loop (about 0.2 ms of Python)
STARTUP_TIMEOUT = 120.0
TARGET_DELAY_MS, TARGET_PARALLELISM = 5.0, 64


@dataclass(frozen=True)
class Point:
    kind: str  # "sleep" (a plain handler), "async" (an async def handler) or "cpu"
    delay_ms: float
    errors: float
    parallelism: int

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.delay_ms:g}ms-{self.errors:g}-p{self.parallelism}"


class TransientError(Exception):
    """A handler call that failed this time (a timeout of the fake service)."""


def _cpu_work() -> int:
    total = 0
    for i in range(CPU_WORK):
        total += i * i
    return total


# --- the tracked configuration: each component its own process ----------------------------------


def tracked_component(role, topology, bootstrap, source, stage, point, first_call, ready, stop) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    for handler in logging.getLogger().handlers:  # the injected failures' tracebacks would flood the output
        handler.addFilter(_not_injected)
    if os.environ.get("RK_BENCH_SWITCH_INTERVAL"):  # the GIL's switch interval (Python's default: 0.005 s)
        import sys

        sys.setswitchinterval(float(os.environ["RK_BENCH_SWITCH_INTERVAL"]))
    component = _tracked(role, topology, bootstrap, source, stage, point, first_call)
    component.start()
    ready.set()
    profile_dir = os.environ.get("RK_BENCH_PROFILE") if role == "bolt" else None
    with _profiled(profile_dir, point):
        while not stop.is_set():
            component.poll_once()
    component.close()


def _not_injected(record) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], TransientError))


@contextlib.contextmanager
def _profiled(profile_dir: str | None, point: Point) -> Iterator[None]:
    if not profile_dir:
        yield
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(Path(profile_dir) / f"{point.label}.prof")


def _tracked(role, topology, bootstrap, source, stage, point: Point, first_call):
    from reliable_kafka import AckerWorker, BasicBolt, Spout

    on = {"topology": topology, "connection": bootstrap, "name": f"bench-{role}"}
    if role == "acker":
        return AckerWorker(**on, tracking=Tracking(ackers=1))
    if role == "spout":
        return Spout(
            **on,
            source_topics=source,
            group_id=f"{topology}-spout",
            emit_to=stage,
            loop=Loop(commit_interval_ms=COMMIT_INTERVAL_MS),
        )
    delay, errors = point.delay_ms / 1000.0, point.errors

    def started() -> None:
        if first_call.value == 0.0:
            first_call.value = time.time()

    def wait(tuple_, collector) -> None:
        started()
        time.sleep(delay)
        if errors and random.random() < errors:
            raise TransientError("the service timed out")

    async def wait_async(tuple_, collector) -> None:
        started()
        await asyncio.sleep(delay)
        if errors and random.random() < errors:
            raise TransientError("the service timed out")

    def compute(tuple_, collector) -> None:
        started()
        _cpu_work()

    handler: Any = {"sleep": wait, "async": wait_async, "cpu": compute}[point.kind]
    # parallelism=1 with a plain handler is the serial bolt (Parallel(1) picks the inline loop)
    max_in_flight = None
    if os.environ.get("RK_BENCH_MAX_IN_FLIGHT"):  # what backpressure costs: a larger bound
        max_in_flight = max(point.parallelism, int(os.environ["RK_BENCH_MAX_IN_FLIGHT"]))
    parallel = Parallel(point.parallelism, ordering="key", max_in_flight=max_in_flight)
    return BasicBolt(**on, source_topics=stage, group_id=f"{topology}-bolt", handler=handler, parallel=parallel)


# --- the hand-written loop -------------------------------------------------------------------------


def handwritten(bootstrap, source, group, point: Point, first_call, ready, stop) -> None:
    """confluent-kafka, a pool of ``parallelism`` threads, retry in place, contiguous commits."""
    from concurrent.futures import ThreadPoolExecutor

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([source])
    delay, errors = point.delay_ms / 1000.0, point.errors
    finished: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def handle(partition: int, offset: int) -> None:
        if first_call.value == 0.0:
            first_call.value = time.time()
        while True:  # retry in place until the call succeeds
            if point.kind == "cpu":
                _cpu_work()
            else:
                time.sleep(delay)
            if not errors or random.random() >= errors:
                break
        finished.put((partition, offset))

    pool = ThreadPoolExecutor(point.parallelism)
    limit = 4 * point.parallelism
    held = 0
    next_offset: dict[int, int] = {}  # partition -> lowest offset not yet done (what to commit)
    done: dict[int, set[int]] = defaultdict(set)
    last_commit = time.monotonic()
    committed: dict[int, int] = {}
    ready.set()

    def settle(block: bool) -> None:
        nonlocal held
        try:
            partition, offset = finished.get(timeout=0.05) if block else finished.get_nowait()
            while True:
                held -= 1
                done[partition].add(offset)
                partition, offset = finished.get_nowait()
        except queue.Empty:
            pass
        for partition, lowest in next_offset.items():
            marks = done[partition]
            while lowest in marks:
                marks.discard(lowest)
                lowest += 1
            next_offset[partition] = lowest

    while not stop.is_set():
        if held < limit:
            for message in consumer.consume(min(500, limit - held), timeout=0.05):
                if message.error():
                    continue
                partition, offset = cast(int, message.partition()), cast(int, message.offset())
                next_offset.setdefault(partition, offset)
                held += 1
                pool.submit(handle, partition, offset)
            settle(block=False)
        else:
            settle(block=True)
        if time.monotonic() - last_commit >= COMMIT_INTERVAL_MS / 1000.0:
            last_commit = time.monotonic()
            due = {p: o for p, o in next_offset.items() if committed.get(p) != o}
            if due:
                consumer.commit(offsets=[TopicPartition(source, p, o) for p, o in due.items()], asynchronous=False)
                committed.update(due)
    pool.shutdown(wait=False, cancel_futures=True)
    consumer.close()


# --- the parent: topics, one run of a configuration, the table ------------------------------------


class Committed:
    """The committed offsets of a group on the source topic (one consumer, asked again and again)."""

    def __init__(self, bootstrap: str, group: str, source: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self.partitions = [TopicPartition(source, p) for p in range(PARTITIONS)]

    def reached(self, ends: dict[int, int]) -> bool:
        offsets = self.consumer.committed(self.partitions, timeout=10)
        return all(max(tp.offset, 0) >= ends[tp.partition] for tp in offsets)  # -1001: none yet

    def close(self) -> None:
        self.consumer.close()


def _records_for(point: Point, seconds: float, most: int) -> int:
    if point.kind == "cpu":
        per_second = 5_000.0
    else:
        per_second = point.parallelism / (point.delay_ms / 1000.0)
    return max(200, min(most, int(per_second * seconds)))


def _prefill(bootstrap: str, records: int) -> tuple[str, dict[int, int]]:
    from reliable_kafka.offsets import end_offsets
    from reliable_kafka.testing.records import produce_values
    from reliable_kafka.testing.topics import create_topics, unique_name

    source = unique_name("pbolt-source")
    create_topics(bootstrap, {source: PARTITIONS})
    rng = random.Random(records)
    keys = [b"k%d" % rng.randrange(KEYS) for _ in range(records)]
    produce_values(bootstrap, source, [str(i).encode() for i in range(records)], keys=keys, timeout=120)
    return source, end_offsets(bootstrap, source)


@dataclass
class Run:
    rate: float  # source records per second
    dead_lettered: int


def _measure(ctx, bootstrap, config: str, point: Point, source: str, ends: dict[int, int], timeout: float) -> Run:
    from reliable_kafka.kafka.admin import admin_client, ensure_topics
    from reliable_kafka.testing.topics import create_topics, unique_name
    from reliable_kafka.topology import TopologyTopics

    records = sum(ends.values())
    first_call = ctx.Value("d", 0.0, lock=False)
    stop = ctx.Event()
    processes, readies = [], []
    if config == "hand-written":
        group = unique_name("pbolt-hand")
        ready = ctx.Event()
        processes.append(
            ctx.Process(target=handwritten, args=(bootstrap, source, group, point, first_call, ready, stop))
        )
        readies.append(ready)
        topology = None
    else:
        topology = unique_name("pbolt")
        group = f"{topology}-spout"
        stage = f"{topology}.stage"
        create_topics(bootstrap, {stage: PARTITIONS})
        ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=1))
        for role in ("acker", "bolt", "spout"):
            ready = ctx.Event()
            processes.append(
                ctx.Process(
                    target=tracked_component,
                    args=(role, topology, bootstrap, source, stage, point, first_call, ready, stop),
                    name=f"bench-{role}",
                )
            )
            readies.append(ready)
    committed = Committed(bootstrap, group, source)
    try:
        for process in processes:
            process.start()
        for ready, process in zip(readies, processes):
            if not ready.wait(STARTUP_TIMEOUT):
                raise RuntimeError(f"{process.name} did not start within {STARTUP_TIMEOUT:.0f} s")
        deadline = time.monotonic() + timeout
        while not committed.reached(ends):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{config} {point.label}: not done within {timeout:.0f} s")
            dead = [p.name for p in processes if not p.is_alive()]
            if dead:
                raise RuntimeError(f"{config} {point.label}: {', '.join(dead)} died")
            time.sleep(0.05)
        finished = time.time()
    finally:
        stop.set()
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()
        committed.close()
    rate = records / max(1e-6, finished - first_call.value)
    return Run(rate=rate, dead_lettered=_dead_lettered(bootstrap, topology) if topology else 0)


def _dead_lettered(bootstrap: str, topology: str) -> int:
    from reliable_kafka.offsets import end_offsets
    from reliable_kafka.topology import TopologyTopics

    return sum(end_offsets(bootstrap, TopologyTopics(topology).dlq).values())


@contextlib.contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from reliable_kafka.broker import EmbeddedKafka

    with EmbeddedKafka() as broker:
        print(f"embedded broker at {broker.bootstrap_servers}", flush=True)
        yield broker.bootstrap_servers


def _grid(args) -> list[Point]:
    points = [
        Point(kind, delay, errors, parallelism)
        for delay in args.delays
        for errors in args.errors
        for kind in args.kinds
        for parallelism in args.parallelism
    ]
    points += [Point("cpu", 0.0, 0.0, parallelism) for parallelism in args.cpu_parallelism]
    return points


def _same_work(point: Point) -> tuple:
    """The hand-written loop does the same for sleep and async (threads waiting): one run serves both."""
    return ("cpu" if point.kind == "cpu" else "wait", point.delay_ms, point.errors, point.parallelism)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])

    def numbers(kind):
        return lambda text: [kind(part) for part in text.split(",") if part]

    parser.add_argument("--quick", action="store_true", help="5 ms, parallelism 1 and 64, one round")
    parser.add_argument("--delays", type=numbers(float), default=None, help="ms a record (default 1,5,20)")
    parser.add_argument("--parallelism", type=numbers(int), default=None, help="default 1,8,64,256")
    parser.add_argument("--kinds", type=lambda t: t.split(","), default=None, help="of sleep,async")
    parser.add_argument("--errors", type=numbers(float), default=None, help="shares of raising calls (0,0.01)")
    parser.add_argument("--cpu-parallelism", type=numbers(int), default=None, help="CPU-bound handler (1,8)")
    parser.add_argument("--rounds", type=int, default=None, help="default 2 (--quick: 1)")
    parser.add_argument("--seconds", type=float, default=None, help="about this much work a run (default 6)")
    parser.add_argument("--records", type=int, default=None, help="at most this many a run (default 60000)")
    parser.add_argument("--bootstrap-servers", default=None, help="a running broker instead of an embedded one")
    args = parser.parse_args()
    quick = args.quick
    args.delays = args.delays or ([5.0] if quick else [1.0, 5.0, 20.0])
    args.parallelism = args.parallelism or ([1, 64] if quick else [1, 8, 64, 256])
    args.kinds = args.kinds or ["sleep", "async"]
    args.errors = args.errors if args.errors is not None else [0.0, 0.01]
    args.cpu_parallelism = args.cpu_parallelism if args.cpu_parallelism is not None else [1, 8]
    args.rounds = args.rounds or (1 if quick else 2)
    args.seconds = args.seconds or (4.0 if quick else 6.0)
    args.records = args.records or (30_000 if quick else 60_000)
    points = _grid(args)
    ctx = mp.get_context("spawn")
    tracked: dict[Point, list[Run]] = defaultdict(list)
    hand: dict[tuple, list[Run]] = defaultdict(list)
    began = time.monotonic()
    with kafka(args.bootstrap_servers) as bootstrap:
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} of {args.rounds}", flush=True)
            for index, point in enumerate(points):
                records = _records_for(point, args.seconds, args.records)
                source, ends = _prefill(bootstrap, records)
                timeout = 60.0 + 20 * args.seconds
                configs = ["hand-written", "tracked"]
                if _same_work(point) in hand and len(hand[_same_work(point)]) > round_:
                    configs = ["tracked"]  # this round's hand-written run of the same work is done
                if (round_ + index) % 2:
                    configs.reverse()
                for config in configs:
                    run = _measure(ctx, bootstrap, config, point, source, ends, timeout)
                    (hand[_same_work(point)] if config == "hand-written" else tracked[point]).append(run)
                    print(
                        f"  {point.label:<24} {config:<13} {records:>6} records {run.rate:>9,.0f} /s"
                        + (f"  dead-lettered {run.dead_lettered}" if config == "tracked" else ""),
                        flush=True,
                    )
    print(f"\n{_table(points, tracked, hand)}")
    print(f"\n(run took {time.monotonic() - began:.0f} s; medians of {args.rounds} round(s))")


def _median(runs: list[Run]) -> float:
    return statistics.median(run.rate for run in runs) if runs else float("nan")


def _table(points: list[Point], tracked, hand) -> str:
    lines = [
        "| handler | ms a record | errors | parallelism | hand-written records/s | tracked records/s "
        "| tracked / hand-written | tracked / parallelism=1 | dead-lettered |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    target_lines = []
    for point in points:
        rate = _median(tracked[point])
        baseline = _median(hand[_same_work(point)])
        serial = _median(tracked.get(Point(point.kind, point.delay_ms, point.errors, 1), []))
        dead = sum(run.dead_lettered for run in tracked[point])
        handler = {"sleep": "time.sleep", "async": "asyncio.sleep", "cpu": "CPU (~0.2 ms of Python)"}[point.kind]
        ms = "-" if point.kind == "cpu" else f"{point.delay_ms:g}"
        versus_serial = f"{rate / serial:.1f}x" if serial == serial else "-"  # nan: no parallelism=1 run
        lines.append(
            f"| {handler} | {ms} | {point.errors:.0%} | {point.parallelism} | {baseline:,.0f} "
            f"| {rate:,.0f} | {rate / baseline:.2f}x | {versus_serial} | {dead} |"
        )
        if point.kind != "cpu" and point.delay_ms == TARGET_DELAY_MS and point.parallelism == TARGET_PARALLELISM:
            serial_verdict = "no parallelism=1 run" if serial != serial else "met" if rate / serial >= 25 else "MISSED"
            target_lines.append(
                f"  {handler}, {point.errors:.0%} errors: tracked/hand-written {rate / baseline:.2f}x "
                f"(target >= 0.8x: {'met' if rate / baseline >= 0.8 else 'MISSED'}), "
                f"/ parallelism=1 {versus_serial} (target >= 25x: {serial_verdict})"
                + (f", dead-lettered {dead} (target 0: {'met' if dead == 0 else 'MISSED'})" if point.errors else "")
            )
    if target_lines:
        lines += ["", f"targets at {TARGET_DELAY_MS:g} ms and {TARGET_PARALLELISM} in flight:", *target_lines]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
