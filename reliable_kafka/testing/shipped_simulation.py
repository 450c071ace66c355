"""A seeded simulation of the shipped Spout, BasicBolt and AckerWorker on the in-memory Kafka.

It runs the product: the very classes users deploy, with their Kafka clients from a
:class:`MemoryKafka` (``clients=``) and their time from a :class:`ManualClock` (``clock=``). A
seeded scheduler interleaves their polls (which reorders records across partitions and processes)
with clock jumps, broker faults (failed produces, lost deliveries, failed commits and
transactions, and outages: a burst of every kind at once, as a broker restart looks to its
clients), crashes with restarts at any step (redeliveries: the duplicates the contract allows),
and expired consumer sessions (rebalances). Plain bolts may be parallel (a parallelism and an
ordering chosen per seed): their handler calls wait in a :class:`SteppedCalls` until the scheduler
finishes them, in any order. After every step it checks docs/design.md section 8 from the
logs alone:

1. no loss: every source offset below the spouts' committed offset completed (an acker published
   COMPLETED for one of its roots) or was dead-lettered;
2. no premature completion: a root completed only once its tuple was written and a bolt acked it;
3. sound outcomes: every COMPLETED or FAILED an acker published is what the dict-based
   :class:`~reliable_kafka.testing.reference_acker.ReferenceAcker`, fed the ack log in order,
   decides for that root, for the same owner (the spout whose INIT it holds);
4. transactional mode: no source record is dead-lettered twice;

and at the end, liveness: with faults and crashes stopped, every source record gets settled within
a bound; and a quiet run (no faults, no failing handler) completes every record on its first
attempt. A failing seed raises :class:`SimulationFailed` naming the seed, the step, the invariant
and the command that replays it; the same seed replays the same run (the ids, the clock and the
scheduler are seeded). Many seeds: ``./rk sim --seeds 0:2000 [--transactional]``.

This module is the world and its scheduler; the checks live in
:mod:`~reliable_kafka.testing.simulation_checks`, the configuration and result in
:mod:`~reliable_kafka.testing.simulation_config`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import numpy as np

from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt import Parallel
from reliable_kafka.bolt.executors import SteppedCalls
from reliable_kafka.bolt.runner import BasicBolt, BoltCollector, Tuple
from reliable_kafka.config import Connection, Loop, Tracking
from reliable_kafka.core import ids
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.spout.spout import SourceRecord, Spout, SpoutCollector
from reliable_kafka.spout.transactional import TransactionalSpout
from reliable_kafka.testing.memory_broker import ManualClock, MemoryKafka
from reliable_kafka.testing.memory_clients import MemoryAdmin, MemoryProducer
from reliable_kafka.testing.memory_consumer import MemoryConsumer
from reliable_kafka.testing.simulation_checks import LogChecker
from reliable_kafka.testing.simulation_config import (
    BOLT_GROUP,
    MID,
    SOURCE,
    SPOUT_GROUP,
    TOPOLOGY,
    SimConfig,
    SimResult,
    SimulationFailed,
)

if TYPE_CHECKING:
    import argparse

__all__ = ["SimConfig", "SimResult", "SimulationFailed", "simulate", "run_seeds"]


@contextlib.contextmanager
def _seeded_ids(seed: int) -> Iterator[None]:
    """Seeded ids for the shipped code; restored after."""
    # ids has no seeding API: the simulation's own reach
    saved_ids = (ids._rng.getstate(), ids._np_rng, list(ids._pool))
    ids._rng.seed(seed)
    ids._np_rng = np.random.default_rng(seed)
    ids._pool.clear()  # ids drawn before the seed would make a run depend on what ran before it
    try:
        yield
    finally:
        ids._rng.setstate(saved_ids[0])
        ids._np_rng = saved_ids[1]
        ids._pool[:] = saved_ids[2]


Client = TypeVar("Client", MemoryProducer, MemoryConsumer)


class _Clients:
    """One process's Kafka clients, so that a crash can take all of them down at once."""

    def __init__(self, kafka: MemoryKafka) -> None:
        self.kafka = kafka
        self.made: list[MemoryProducer | MemoryConsumer] = []

    def _keep(self, client: Client) -> Client:
        self.made.append(client)
        return client

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        return self._keep(self.kafka.producer(config))

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        return self._keep(self.kafka.consumer(config))

    def admin(self, config: dict[str, Any]) -> MemoryAdmin:
        return self.kafka.admin(config)

    def crash(self) -> None:
        for client in self.made:
            with contextlib.suppress(RuntimeError):
                self.kafka.crash(client)

    def group_consumers(self) -> list[MemoryProducer | MemoryConsumer]:
        return [c for c in self.made if getattr(c, "memberid", lambda: None)() is not None]


@dataclass
class _Process:
    kind: str
    make: Callable[[_Clients], Any]
    name: str = ""
    component: Any = None
    clients: Any = None  # a _Clients once started


class _Simulation:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.clock = ManualClock()
        self.kafka = MemoryKafka(clock=self.clock, idle_waits_advance_clock=True)
        self.acked_roots: set[int] = set()
        self.trace: list[str] = []
        self.step = 0
        self.crashes = 0
        self.faults = 0
        self.events: Counter[str] = Counter()
        self.calls: dict[str, SteppedCalls] = {}  # a parallel bolt's handler calls, by process name
        self.checker = LogChecker(config, self.kafka, acked_roots=self.acked_roots, fail=self.fail)

    # --- the world ------------------------------------------------------------------------------

    def setup(self) -> None:
        config = self.config
        self.kafka.create_topic(SOURCE, config.source_partitions)
        self.kafka.create_topic(MID, 2)
        producer = self.kafka.producer({})
        for i in range(config.records):
            # each value names its own coordinates (offsets count from 0 per partition): a spout that
            # forwards records unchanged (emit_to) writes what _forward_coordinates writes
            partition = i % config.source_partitions
            producer.produce(SOURCE, f"{partition}:{i // config.source_partitions}".encode(), partition=partition)
        producer.flush()
        on: dict[str, Any] = {"topology": TOPOLOGY, "loop": Loop(commit_interval_ms=0, clock=self.clock)}
        tracking = Tracking(max_retries=config.max_retries, backoff=Backoff(initial_ms=200))
        spout_options = dict(on, source_topics=SOURCE, group_id=SPOUT_GROUP)
        bolt_options = dict(on, source_topics=MID, group_id=BOLT_GROUP, handler=self._bolt_handler)

        def acker(c: _Clients) -> AckerWorker:
            return AckerWorker(
                **on, connection=Connection("memory", clients=c), tracking=Tracking(ackers=config.ack_partitions)
            )

        # a restarted process keeps its name: its transactional.id, so that the restart fences the old one
        def spout(c: _Clients, name: str) -> Spout | TransactionalSpout:
            if config.transactional:
                return Spout(
                    **spout_options,
                    handler=_forward_coordinates,
                    connection=Connection("memory", clients=c),
                    tracking=tracking,
                    transactional=True,
                    name=name,
                )
            # the default handler: the spout forwards a consumed batch at a time (Spout._forward_tracked)
            return Spout(
                **spout_options,
                emit_to=MID,
                connection=Connection("memory", clients=c),
                tracking=dataclasses.replace(tracking, root_index=False),
            )

        # each plain bolt's parallelism and ordering, from the seed (a restart keeps them)
        choices = random.Random(config.seed ^ 0x5EED)
        parallel = {
            f"bolt-{i}": (choices.choice((1, 2, 4)), choices.choice(("key", "partition", "none")))
            for i in range(config.bolts)
        }

        def bolt(c: _Clients, name: str) -> BasicBolt:
            if config.transactional:
                return BasicBolt(
                    **bolt_options, connection=Connection("memory", clients=c), transactional=True, name=name
                )
            parallelism, ordering = parallel[name] if config.parallel_bolts else (1, "key")
            if parallelism == 1:
                return BasicBolt(**bolt_options, connection=Connection("memory", clients=c))
            executor = self.calls[name] = SteppedCalls()  # the restarted process's, from now on
            return BasicBolt(
                **bolt_options,
                connection=Connection("memory", clients=c),
                parallel=Parallel(
                    parallelism, ordering=ordering, max_in_flight=2 * parallelism, revoke_wait_s=0, executor=executor
                ),
            )

        self.processes = [_Process("acker", acker) for _ in range(config.acker_workers)]
        self.processes += [_Process("spout", functools.partial(spout, name=f"spout-{i}")) for i in range(config.spouts)]
        self.processes += [
            _Process("bolt", functools.partial(bolt, name=f"bolt-{i}"), name=f"bolt-{i}") for i in range(config.bolts)
        ]
        for process in self.processes:  # ackers first: they create the topology's topics
            self._start(process)

    def _start(self, process: _Process) -> None:
        process.clients = _Clients(self.kafka)
        process.component = process.make(process.clients)
        process.component.start()

    def _bolt_handler(self, tuple_: Tuple, collector: BoltCollector) -> None:
        if self.rng.random() < self.config.bolt_failure:
            raise RuntimeError("simulated handler failure")
        self.acked_roots.update(tuple_.roots)  # acked when the handler returns (a basic bolt)

    # --- the scheduler --------------------------------------------------------------------------

    def run_step(self) -> None:
        roll = self.rng.random()
        process = self.rng.choice(self.processes)
        if roll < 0.80 or not self.config.faults:
            self._poll(process)
        elif roll < 0.87:
            jump = self.rng.choice((10, 100, 1000, 5000, 20000))
            self.clock.advance(jump)
            self._event("clock", f"clock +{jump} ms")
        elif roll < 0.92:
            operation = self.rng.choice(self._operations())
            self.kafka.fail_next(operation)
            self.faults += 1
            self._event(f"fault.{operation}", f"fault {operation}")
        elif roll < 0.93:  # a broker restart, as clients see it: every operation fails for a while
            count = self.rng.randint(2, 6)
            for operation in self._operations():
                self.kafka.fail_next(operation, count)
            self.faults += 1
            self._event("outage", f"broker outage: the next {count} calls of every operation fail")
        elif roll < 0.97:
            self._crash(process, "crash")
        else:
            consumers = process.clients.group_consumers()
            if consumers:
                self.kafka.expire(consumers[0])
                self._event(f"expire.{process.kind}", f"session of a {process.kind} expired")

    def _operations(self) -> tuple[str, ...]:
        return ("produce", "delivery", "commit") + (
            ("send_offsets", "commit_transaction") if self.config.transactional else ()
        )

    def _event(self, kind: str, what: str) -> None:
        self.events[kind] += 1
        self.trace.append(f"{self.step}: {what}")

    def _poll(self, process: _Process) -> None:
        try:
            self._finish_calls(process)
            process.component.poll_once(0)
        except Exception as exc:  # the process dies of it; its supervisor restarts it
            self._crash(process, f"died of {type(exc).__name__}: {exc}", kind="died")

    def _finish_calls(self, process: _Process) -> None:
        """A parallel bolt's waiting handler calls: some of them end now, in any order."""
        executor = self.calls.get(process.name)
        if executor is None or not executor.waiting:
            return
        for _ in range(self.rng.randint(0, executor.running_slots())):
            if not executor.running_slots():
                break
            index = self.rng.randrange(executor.running_slots())  # one of the calls that have begun
            if index:
                self.events["call.out_of_order"] += 1
            executor.run_one(index)

    def _crash(self, process: _Process, why: str, *, kind: str = "crash") -> None:
        self.crashes += 1
        self._event(f"{kind}.{process.kind}", f"{process.kind} {why}; restarted")
        process.clients.crash()
        self._start(process)

    def settle_round(self) -> None:
        for process in self.processes:
            self._poll(process)
        self.clock.advance(500)

    def settled(self) -> bool:
        for partition in range(self.config.source_partitions):
            committed = self.kafka.committed(SPOUT_GROUP, SOURCE, partition)
            if committed is None or committed[0] < self.kafka.topics[SOURCE].partitions[partition].end:
                return False
        return True

    def fail(self, invariant: str, detail: str) -> NoReturn:
        tail = "\n  ".join(self.trace[-15:])
        raise SimulationFailed(
            f"seed {self.config.seed}, step {self.step}: {invariant} broken: {detail}\n"
            f"last events:\n  {tail}\nreplay: {self.config.replay()}",
            seed=self.config.seed,
            step=self.step,
            invariant=invariant,
        )


def _forward_coordinates(record: SourceRecord, collector: SpoutCollector) -> None:
    """The spout's handler: one tuple per record, naming its source (the checker maps roots by it)."""
    collector.emit(MID, f"{record.partition}:{record.offset}".encode())


def simulate(config: SimConfig) -> SimResult:
    """Run one seeded simulation; raises :class:`SimulationFailed` when an invariant breaks."""
    sim = _Simulation(config)
    with _seeded_ids(config.seed):
        sim.setup()
        for sim.step in range(config.steps):
            sim.run_step()
            sim.checker.check()
        rounds = 0
        while not sim.settled():
            if rounds >= config.settle_rounds:
                sim.fail(
                    "liveness",
                    f"not every source record settled within {config.settle_rounds} rounds "
                    f"after the faults stopped; committed: "
                    f"{[sim.kafka.committed(SPOUT_GROUP, SOURCE, p) for p in range(config.source_partitions)]}",
                )
            sim.step += 1
            rounds += 1
            sim.settle_round()
            sim.checker.check()
        if config.quiet:
            sim.checker.check_quiet()
    done = sum(len(s) for s in sim.checker.completed.values())
    return SimResult(
        config.seed,
        config.steps,
        rounds,
        done,
        sum(len(s) for s in sim.checker.dead.values()),
        sim.crashes,
        sim.faults,
        sim.trace,
        sim.events,
        _digest(sim.kafka),
    )


def _digest(kafka: MemoryKafka) -> str:
    digest = hashlib.sha256()
    for name in sorted(kafka.topics):
        for partition, log in enumerate(kafka.topics[name].partitions):
            for record in log.records:
                digest.update(
                    repr(
                        (
                            name,
                            partition,
                            record.offset,
                            record.key,
                            record.value,
                            record.headers,
                            record.timestamp,
                            record.control,
                        )
                    ).encode()
                )
    return digest.hexdigest()


def run_seeds(seeds: range, *, out: Callable[[str], object] = print, **options: Any) -> list[SimulationFailed]:
    """Simulate each seed with ``SimConfig(seed=..., **options)``; prints each failure (with its
    replay command) and a summary with the rate; returns the failures."""
    import logging

    failures = []
    logging.disable(logging.CRITICAL)  # the components log every injected fault
    started, cpu = time.perf_counter(), time.process_time()
    try:
        for seed in seeds:
            try:
                simulate(SimConfig(seed=seed, **options))
            except SimulationFailed as failure:
                failures.append(failure)
                out(str(failure))
    finally:
        logging.disable(logging.NOTSET)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    out(
        f"{len(seeds) - len(failures)} of {len(seeds)} seeds passed ({len(seeds) / max(wall, 1e-9):.1f} seeds/s, "
        f"{len(seeds) / max(cpu, 1e-9):.1f} per CPU second)"
    )
    return failures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``reliable-kafka sim`` (and of ``python -m`` this module)."""
    parser.add_argument("--seeds", default="0:100", help="first:end (end excluded), or one seed [0:100]")
    parser.add_argument(
        "--steps", type=int, default=SimConfig.steps, help=f"scheduler steps a seed [{SimConfig.steps}]"
    )
    parser.add_argument(
        "--records", type=int, default=SimConfig.records, help=f"source records a seed [{SimConfig.records}]"
    )
    parser.add_argument("--transactional", action="store_true", help="TransactionalSpout and transactional bolts")
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no faults, crashes or failing handlers: every record must complete at once",
    )


def run(args: argparse.Namespace) -> int:
    first, _, end = args.seeds.partition(":")
    seeds = range(int(first), int(end) if end else int(first) + 1)
    options = dict(steps=args.steps, records=args.records, transactional=args.transactional)
    if args.quiet:
        options.update(faults=False, bolt_failure=0.0)
    return 1 if run_seeds(seeds, **options) else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m reliable_kafka.testing.shipped_simulation --seeds 0:1000``: run many seeds."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
