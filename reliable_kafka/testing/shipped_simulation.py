"""A seeded simulation of the shipped Spout, BasicBolt and AckerWorker on the in-memory Kafka.

It runs the product: the very classes users deploy, with their Kafka clients from a
:class:`MemoryKafka` (``clients=``) and their time from a :class:`ManualClock` (``clock=``). A
seeded scheduler interleaves their polls (which reorders records across partitions and processes)
with clock jumps, broker faults (failed produces, lost deliveries, failed commits and
transactions, and outages: a burst of every kind at once, as a broker restart looks to its
clients), crashes with restarts at any step (redeliveries: the duplicates the contract allows),
and expired consumer sessions (rebalances). After every step it checks DESIGN section 8 from the
logs alone:

1. no loss: every source offset below the spouts' committed offset completed (an acker published
   COMPLETED for one of its roots) or was dead-lettered;
2. no premature completion: a root completed only once its tuple was written and a bolt acked it;
3. sound outcomes: every COMPLETED or FAILED an acker published is what the dict-based
   :class:`~reliable_kafka.testing.reference_acker.ReferenceAcker`, fed the ack log in order,
   decides for that root, for the same owner (the spout whose INIT it holds);

and at the end, liveness: with faults and crashes stopped, every source record gets settled within
a bound; and a quiet run (no faults, no failing handler) completes every record on its first
attempt. A failing seed raises :class:`SimulationFailed` naming the seed, the step, the invariant
and the command that replays it; the same seed replays the same run (the ids, the clock and the
scheduler are seeded). Many seeds: ``./rk sim --seeds 0:2000 [--transactional]``.
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reliable_kafka import codec, ids
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import ConfigError, ReliableKafkaError
from reliable_kafka.ids import partitions_for_roots
from reliable_kafka.spout.spout import Spout
from reliable_kafka.spout.transactional import TransactionalSpout
from reliable_kafka.testing.memory_broker import ManualClock, MemoryKafka
from reliable_kafka.testing.reference_acker import ReferenceAcker

__all__ = ["SimConfig", "SimResult", "SimulationFailed", "simulate", "run_seeds"]

TOPOLOGY = "sim"
SOURCE, MID = "src", "mid"
SPOUT_GROUP, BOLT_GROUP = "sim.spouts", "sim.bolts"


@dataclass(frozen=True)
class SimConfig:
    seed: int
    records: int = 24
    source_partitions: int = 2
    ack_partitions: int = 2
    spouts: int = 2
    bolts: int = 2
    acker_workers: int = 1
    steps: int = 300
    bolt_failure: float = 0.1  # chance that a bolt's handler raises (the tuple fails)
    max_retries: int = 3
    settle_rounds: int = 3000
    faults: bool = True
    transactional: bool = False  # TransactionalSpout and transactional bolts (stable names: restarts fence)

    def __post_init__(self) -> None:
        small = [
            name
            for name in (
                "records",
                "source_partitions",
                "ack_partitions",
                "spouts",
                "bolts",
                "acker_workers",
                "settle_rounds",
            )
            if getattr(self, name) < 1
        ]
        if small or self.steps < 0 or not 0 <= self.bolt_failure <= 1:
            raise ConfigError(
                f"SimConfig: {', '.join(small) or 'steps or bolt_failure'} out of range "
                f"in {self}; counts are at least 1, steps at least 0, bolt_failure in [0, 1]"
            )

    @property
    def quiet(self) -> bool:
        """No faults, no crashes, no failing handler: every record must complete on its first attempt."""
        return not self.faults and self.bolt_failure == 0

    def replay(self) -> str:
        """The command that runs this very configuration again."""
        changed = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "seed" and getattr(self, f.name) != f.default
        }
        flags = {
            "steps": "--steps",
            "records": "--records",
            "transactional": "--transactional",
            "faults": "--quiet",
            "bolt_failure": "--quiet",
        }
        if set(changed) <= set(flags) and ("faults" in changed) == ("bolt_failure" in changed):
            options = "".join(
                f" {flags[k]} {v}" if k in ("steps", "records") else f" {flags[k]}"
                for k, v in changed.items()
                if k != "bolt_failure"
            )
            return f"./rk sim --seeds {self.seed}{options}"
        return f".venv/bin/python -c 'from reliable_kafka.testing.shipped_simulation import *; simulate({self!r})'"


@dataclass
class SimResult:
    seed: int
    steps: int
    settle_rounds: int
    completed: int
    dead_lettered: int
    crashes: int
    faults: int
    trace: list[str] = field(default_factory=list)
    events: Counter = field(default_factory=Counter)  # what the scheduler did, by kind (crash.spout, fault.commit, ...)
    log_digest: str = ""  # of every record in every topic: equal digests, equal runs


class SimulationFailed(ReliableKafkaError, AssertionError):
    """An invariant broke; the message names the seed, the step, the invariant and the replay command."""

    def __init__(self, message: str, *, seed: int, step: int, invariant: str) -> None:
        super().__init__(message)
        self.seed, self.step, self.invariant = seed, step, invariant


@contextlib.contextmanager
def _seeded_ids(seed: int) -> Iterator[None]:
    """Seeded ids for the shipped code; restored after."""
    saved_ids = (ids._rng.getstate(), ids._np_rng)  # ids has no seeding API: the simulation's own reach
    ids._rng.seed(seed)
    ids._np_rng = np.random.default_rng(seed)
    try:
        yield
    finally:
        ids._rng.setstate(saved_ids[0])
        ids._np_rng = saved_ids[1]


class _Clients:
    """One process's Kafka clients, so that a crash can take all of them down at once."""

    def __init__(self, kafka: MemoryKafka) -> None:
        self.kafka = kafka
        self.made: list = []

    def _keep(self, client):
        self.made.append(client)
        return client

    def producer(self, config: dict):
        return self._keep(self.kafka.producer(config))

    def consumer(self, config: dict):
        return self._keep(self.kafka.consumer(config))

    def admin(self, config: dict):
        return self.kafka.admin(config)

    def crash(self) -> None:
        for client in self.made:
            with contextlib.suppress(RuntimeError):
                self.kafka.crash(client)

    def group_consumers(self) -> list:
        return [c for c in self.made if getattr(c, "memberid", lambda: None)() is not None]


@dataclass
class _Process:
    kind: str
    make: Callable[[_Clients], Any]
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
        self.events: Counter = Counter()
        self._reference: dict[int, ReferenceAcker] = {}  # ack partition -> the model, fed its log
        self._decided: dict[int, tuple[int, int]] = {}  # root -> (OutcomeKind, owner) the model decided
        self._attempts: dict[tuple[int, int], int] = {}  # source (partition, offset) -> roots written
        self._read: dict[tuple[str, int], int] = {}
        self._mid_roots: dict[int, tuple[int, int]] = {}  # root -> source (partition, offset)
        self._completed: dict[int, set[int]] = {p: set() for p in range(config.source_partitions)}
        self._dead: dict[int, set[int]] = {p: set() for p in range(config.source_partitions)}

    # --- the world ------------------------------------------------------------------------------

    def setup(self) -> None:
        config = self.config
        self.kafka.create_topic(SOURCE, config.source_partitions)
        self.kafka.create_topic(MID, 2)
        producer = self.kafka.producer({})
        for i in range(config.records):
            producer.produce(SOURCE, f"record {i}".encode(), partition=i % config.source_partitions)
        producer.flush()
        on: dict[str, Any] = {
            "topology": TOPOLOGY,
            "bootstrap_servers": "memory",
            "commit_interval_ms": 0,
            "clock": self.clock,
        }
        spout_options = dict(
            on,
            source_topics=SOURCE,
            group_id=SPOUT_GROUP,
            handler=_forward_coordinates,
            max_retries=config.max_retries,
            backoff=Backoff(initial_ms=200),
        )
        bolt_options = dict(on, source_topics=MID, group_id=BOLT_GROUP, handler=self._bolt_handler)

        def acker(c: _Clients) -> AckerWorker:
            return AckerWorker(**on, clients=c, ackers=config.ack_partitions)

        # a restarted process keeps its name: its transactional.id, so that the restart fences the old one
        def spout(c: _Clients, name: str) -> Spout | TransactionalSpout:
            if config.transactional:
                return TransactionalSpout(**spout_options, clients=c, name=name)
            return Spout(**spout_options, clients=c, root_index=False)

        def bolt(c: _Clients, name: str) -> BasicBolt:
            if config.transactional:
                return BasicBolt(**bolt_options, clients=c, transactional=True, name=name)
            return BasicBolt(**bolt_options, clients=c)

        self.processes = [_Process("acker", acker) for _ in range(config.acker_workers)]
        self.processes += [_Process("spout", functools.partial(spout, name=f"spout-{i}")) for i in range(config.spouts)]
        self.processes += [_Process("bolt", functools.partial(bolt, name=f"bolt-{i}")) for i in range(config.bolts)]
        for process in self.processes:  # ackers first: they create the topology's topics
            self._start(process)

    def _start(self, process: _Process) -> None:
        process.clients = _Clients(self.kafka)
        process.component = process.make(process.clients)
        process.component.start()

    def _bolt_handler(self, tuple_, collector) -> None:
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
            process.component.poll_once(0)
        except Exception as exc:  # the process dies of it; its supervisor restarts it
            self._crash(process, f"died of {type(exc).__name__}: {exc}", kind="died")

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

    # --- the invariants, from the logs ----------------------------------------------------------

    def check(self) -> None:
        for message in self._new(MID):
            anchors = codec.decode_anchors(dict(message.headers() or []).get(codec.ANCHORS_HEADER))
            partition, offset = (int(x) for x in message.value().split(b":"))
            source = (partition, offset)
            for root in anchors:
                self._mid_roots[root] = source
                self._attempts[source] = self._attempts.get(source, 0) + 1
        # the acks before the outcomes: an acker decides only on acks already in the log
        for message in self._new(TOPOLOGY + ".acks"):
            self._model_fold(message)
        for message in self._new(TOPOLOGY + ".outcomes"):
            batch = codec.decode_outcomes(message.value())
            for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
                model = self._decided.get(root)
                if kind in (OutcomeKind.COMPLETED, OutcomeKind.FAILED) and model != (kind, batch.spout):
                    self.fail(
                        "sound outcomes",
                        f"an acker published {OutcomeKind(kind).name} for root {root} to "
                        f"owner {batch.spout}; the reference acker, fed the ack log, decided "
                        f"{'nothing' if model is None else f'{OutcomeKind(model[0]).name} for owner {model[1]}'}",
                    )
                if kind != OutcomeKind.COMPLETED:
                    continue
                if root not in self._mid_roots or root not in self.acked_roots:
                    self.fail(
                        "no premature completion",
                        f"root {root} COMPLETED but its tuple was "
                        f"{'never written' if root not in self._mid_roots else 'never acked'}",
                    )
                partition, offset = self._mid_roots[root]
                self._completed[partition].add(offset)
        for message in self._new(TOPOLOGY + ".dlq"):
            parked = codec.decode_parked(dict(message.headers())[codec.PARKED_HEADER])
            self._dead[parked.source_partition].add(parked.source_offset)
        for partition in range(self.config.source_partitions):
            committed = self.kafka.committed(SPOUT_GROUP, SOURCE, partition)
            if committed is None:
                continue
            for offset in range(committed[0]):
                if offset not in self._completed[partition] and offset not in self._dead[partition]:
                    self.fail(
                        "no loss",
                        f"{SOURCE}[{partition}] committed at {committed[0]}, but offset "
                        f"{offset} neither completed nor went to the DLQ",
                    )

    def _model_fold(self, message) -> None:
        """Feed one ack record to its partition's reference acker; keep each root's first decision.

        The model never times a root out (its timeout is out of reach): a TIMED_OUT depends on the
        worker's clock and is not judged; a COMPLETED or FAILED must be the model's.
        """
        model = self._reference.setdefault(message.partition(), ReferenceAcker(message_timeout_ms=1 << 60, buckets=1))
        batch = codec.decode_ack_batch(message.value())
        keep = partitions_for_roots(batch.roots, self.config.ack_partitions) == message.partition()
        for root, owner, kind in model.fold(
            batch.kinds[keep],
            batch.roots[keep],
            batch.vals[keep],
            sender=batch.sender,
            event_time_ms=message.timestamp()[1],
            offset=message.offset(),
        ):
            self._decided.setdefault(root, (kind, owner))

    def check_quiet(self) -> None:
        """A run without faults, crashes or failing handlers completes every record on its first attempt."""
        for partition in range(self.config.source_partitions):
            for offset in range(self.kafka.topics[SOURCE].partitions[partition].end):
                attempts = self._attempts.get((partition, offset), 0)
                if offset not in self._completed[partition] or attempts != 1 or offset in self._dead[partition]:
                    self.fail(
                        "quiet run completes on the first attempt",
                        f"{SOURCE}[{partition}]@{offset}: {attempts} tuple(s) written, "
                        f"{'completed' if offset in self._completed[partition] else 'never completed'}"
                        f"{', dead-lettered' if offset in self._dead[partition] else ''}",
                    )

    def _new(self, topic: str) -> list:
        """The records of ``topic`` a read_committed consumer sees now and this checker has not seen yet.

        Reads on from where it stopped, up to the first open transaction (``MemoryKafka.messages``
        would build every message of the log again on every step: the checker's cost grew with the
        square of the log).
        """
        if topic not in self.kafka.topics:
            return []
        fresh = []
        for partition, log in enumerate(self.kafka.topics[topic].partitions):
            at = self._read.get((topic, partition), 0)  # an index into log.records
            records = log.records
            while at < len(records):
                record = records[at]
                if record.transaction is not None and record.transaction.state == "open":
                    break  # the last stable offset: what follows may still be aborted
                if record.visible(True):
                    fresh.append(record.message(topic, partition))
                at += 1
            self._read[(topic, partition)] = at
        return fresh

    def fail(self, invariant: str, detail: str) -> None:
        tail = "\n  ".join(self.trace[-15:])
        raise SimulationFailed(
            f"seed {self.config.seed}, step {self.step}: {invariant} broken: {detail}\n"
            f"last events:\n  {tail}\nreplay: {self.config.replay()}",
            seed=self.config.seed,
            step=self.step,
            invariant=invariant,
        )


def _forward_coordinates(record, collector) -> None:
    """The spout's handler: one tuple per record, naming its source (the checker maps roots by it)."""
    collector.emit(MID, f"{record.partition}:{record.offset}".encode())


def simulate(config: SimConfig) -> SimResult:
    """Run one seeded simulation; raises :class:`SimulationFailed` when an invariant breaks."""
    sim = _Simulation(config)
    with _seeded_ids(config.seed):
        sim.setup()
        for sim.step in range(config.steps):
            sim.run_step()
            sim.check()
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
            sim.check()
        if config.quiet:
            sim.check_quiet()
    done = sum(len(s) for s in sim._completed.values())
    return SimResult(
        config.seed,
        config.steps,
        rounds,
        done,
        sum(len(s) for s in sim._dead.values()),
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


def run_seeds(seeds: range, *, out=print, **options) -> list[SimulationFailed]:
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


def add_arguments(parser) -> None:
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


def run(args) -> int:
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
