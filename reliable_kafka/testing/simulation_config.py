"""What a run of the shipped simulation is given and what it returns: its configuration, its result,
its failure, and the topology's names (:mod:`reliable_kafka.testing.shipped_simulation`)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from reliable_kafka.errors import ConfigError, ReliableKafkaError

__all__ = ["SimConfig", "SimResult", "SimulationFailed", "TOPOLOGY", "SOURCE", "MID", "SPOUT_GROUP", "BOLT_GROUP"]

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
    # plain bolts pick a parallelism (1, 2 or 4) and an ordering per seed; their calls end out of order
    parallel_bolts: bool = True

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
    events: Counter[str] = field(
        default_factory=Counter
    )  # what the scheduler did, by kind (crash.spout, fault.commit, ...)
    log_digest: str = ""  # of every record in every topic: equal digests, equal runs


class SimulationFailed(ReliableKafkaError, AssertionError):
    """An invariant broke; the message names the seed, the step, the invariant and the replay command."""

    def __init__(self, message: str, *, seed: int, step: int, invariant: str) -> None:
        super().__init__(message)
        self.seed, self.step, self.invariant = seed, step, invariant
