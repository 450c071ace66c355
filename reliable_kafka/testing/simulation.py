"""Deterministic simulation of the protocol's pure core, checked against the ground truth.

Kafka is a set of in-memory append-only partition logs. The spout, the bolts and the acker shards
are thin shells around the real core (:class:`InFlightTracker`, :class:`AckerTable`, the XOR edge
rule of ``core.anchors``, :class:`AckPacker`, the commit metadata codec). A scheduler seeded from
:attr:`SimConfig.seed` picks every step: a component processes a few records; a producer delivers
some buffered records or holds a partition back (per-partition order is kept, partitions interleave
freely); a bolt fails, silently drops or resets the timeout of a tuple; the spout's handler
raises; a spout, bolt or acker crashes (losing its memory and unsent records) and restarts from
its committed offsets; a spout partition is revoked and assigned again; time jumps. There are no
threads and no wall clock, so a seed replays exactly (``reliable_kafka.ids`` is seeded too). After ``fault_steps`` steps the faults stop and the run
continues, in rounds, until everything is quiet.

An independent checker knows the ground truth (every tuple each tree attempt holds, and which ack
record acked which tuple with which children) and checks DESIGN section 8 after every step:

1. **no loss**: every source offset below the spout's committed offset, or named done in its
   commit metadata, completed in some attempt, was dead-lettered, or emitted no tuple;
2. **no premature completion**: an acker decides COMPLETED for a root only when the ack records
   up to the one that decided it cover the whole tree; any outcome names the INIT's sender, and
   FAILED follows a FAIL;
3. **liveness**: once faults stop, every source record is final within
   :attr:`SimConfig.liveness_bound_ms` and the committed offsets reach the ends of the partitions;

and the acker's event sourcing: every table agrees, call by call, with :class:`ReferenceAcker`
(a plain-dict model of the table's documented semantics: decisions, pending count, low offset),
and a table rebuilt from its committed low point agrees with a never-crashed reference table over
the same log on every root whose events all lie at or above that point, while the reference
holds no pending root that began below it (with ``ack_timestamps="append"``; see
:class:`SimConfig`). Ack records are checked to go to partition ``root mod N``.

Ground truth follows Storm's rule that the acker learns a child only through its parent's ack: a
root is complete at ack offset ``k`` when its INIT, and recursively one ack of each tuple that an
ack taken names as a child, lie at or below ``k``. A child emitted by a processing whose ack never
went out (its bolt crashed) is not part of the tree: the replayed processing's children are.

Usage::

    result = run_simulation(SimConfig.for_seed(7))  # raises InvariantViolation with a trace
    print(result.summary())
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from reliable_kafka import ids
from reliable_kafka.core.ack_packer import AckPacker
from reliable_kafka.core.acker_table import AckerTable, Outcomes
from reliable_kafka.core.anchors import Anchored, ack_entries, anchor_child, fail_roots, spout_root
from reliable_kafka.core.commit_metadata import decode_done_above, encode_done_above
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.core.tracker import ActionKind, Backoff, InFlightTracker, OutcomeAction
from reliable_kafka.errors import ConfigError
from reliable_kafka.ids import new_id, partition_for_root
from reliable_kafka.testing.reference_acker import Decision, ReferenceAcker

__all__ = [
    "SimConfig",
    "SimResult",
    "InvariantViolation",
    "ReferenceAcker",
    "Simulation",
    "run_simulation",
]

TopicPartition = tuple[str, int]
StageKind = Literal["split", "pair", "sink"]

_SOURCE, _ACKS, _OUTCOMES, _DLQ = "source", "acks", "outcomes", "dlq"
_INIT, _ACK, _FAIL, _RESET = (int(k) for k in EventKind)
_COMPLETED, _FAILED, _TIMED_OUT = (int(OutcomeKind[k]) for k in ("COMPLETED", "FAILED",
                                                                  "TIMED_OUT"))
_SHAPES: tuple[tuple[StageKind, ...], ...] = (
    ("sink",),
    ("split", "sink"),
    ("split", "split", "sink"),
    ("pair", "sink"),
    ("split", "pair", "sink"),
)


def _stage_topic(stage: int) -> str:
    return f"stage{stage}"


# ------------------------------------------------------------------------------------ config


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One simulated run (all times in simulated milliseconds).

    Topology: ``source_partitions`` x ``records_per_partition`` source records; the spout emits
    each as 1 to ``spout_max_tuples`` tuples (none with ``empty_record_rate``) to the first data
    topic; ``stages`` are the bolts in order, each reading a data topic of ``data_partitions``
    partitions: "split" emits 0 to ``max_children`` children per input, "pair" anchors one child to
    two inputs (multi-anchoring; it may hold an input for a later step with ``hold_rate``),
    "sink" (the last stage, only there) acks and records the effect. ``ack_partitions`` acker
    shards, one table each.

    A component's step takes 1 to ``batch_max`` records and moves time by 0 to ``step_ms``.
    Faults, during the first ``fault_steps`` steps: per step, a crash with ``crash_rate`` (of
    the spout, a bolt or an acker, or a rebalance of one spout partition: revoke, then assign
    again from the committed offset and metadata; picked with ``crash_weights``), a time jump
    with ``jump_rate``, a held-back producer partition with ``stall_rate`` (up to
    ``stall_max_ms``); per processed tuple, a FAIL with ``fail_rate`` (at the spout: its
    handler raises after some of its emits, and the root fails locally), a silent drop with
    ``drop_rate``, a RESET_TIMEOUT before its ack with ``reset_rate``. Then rounds of
    ``quiet_round_ms`` run until all is quiet (at most ``max_quiet_rounds``).

    Protocol settings as the shells name them: ``message_timeout_ms`` and ``timeout_buckets``
    (ackers and spout backstop), ``backstop_grace_ms``, ``backoff_initial_ms`` /
    ``backoff_max_ms`` (x2 per attempt), ``max_retries``, ``max_pending``,
    ``metadata_max_bytes`` (the broker's ``offset.metadata.max.bytes``; small values force
    truncation), ``acker_initial_capacity`` (small values force table rebuilds).
    ``ack_timestamps``: "append" stamps ack records when they reach the log (LogAppendTime:
    monotone per partition), "create" when the producer made them (CreateTime: held-back records
    arrive with older stamps); the exact rebuild comparison needs "append" (with "create"
    differences are only counted, see :attr:`SimResult.rebuild_divergences`).

    Hooks for testing the checker itself: ``tracker_factory`` and ``acker_table_factory`` build
    the spout's tracker and the live acker tables (the never-crashed reference is always a plain
    :class:`AckerTable`); ``check_acker_model=False`` turns off the call-by-call comparison with
    :class:`ReferenceAcker`, leaving only the end-to-end invariants.
    """

    seed: int = 0
    source_partitions: int = 2
    records_per_partition: int = 10
    stages: tuple[StageKind, ...] = ("split", "sink")
    data_partitions: int = 2
    ack_partitions: int = 2
    spout_max_tuples: int = 2
    empty_record_rate: float = 0.05
    max_children: int = 2
    hold_rate: float = 0.3
    fault_steps: int = 400
    crash_rate: float = 0.03
    crash_weights: tuple[float, float, float, float] = (1, 2, 2, 1)
    jump_rate: float = 0.02
    stall_rate: float = 0.04
    stall_max_ms: int = 600
    fail_rate: float = 0.02
    drop_rate: float = 0.02
    reset_rate: float = 0.03
    batch_max: int = 4
    step_ms: int = 8
    quiet_round_ms: int = 10
    max_quiet_rounds: int = 3000
    message_timeout_ms: int = 1000
    timeout_buckets: int = 3
    backstop_grace_ms: int = 300
    backoff_initial_ms: int = 40
    backoff_max_ms: int = 320
    max_retries: int = 3
    max_pending: int = 8
    metadata_max_bytes: int = 4096
    ack_timestamps: Literal["append", "create"] = "append"
    acker_initial_capacity: int = 8
    trace_len: int = 40
    check_acker_model: bool = True
    tracker_factory: Callable[..., InFlightTracker] = InFlightTracker
    acker_table_factory: Callable[..., AckerTable] = AckerTable

    def __post_init__(self) -> None:
        where = "SimConfig"
        if not self.stages or self.stages[-1] != "sink" or "sink" in self.stages[:-1]:
            raise ConfigError(f"{where}: stages must end with the only 'sink', got {self.stages!r}")
        unknown = set(self.stages) - {"split", "pair", "sink"}
        if unknown:
            raise ConfigError(f"{where}: unknown stage kinds {sorted(unknown)}")
        for name in ("source_partitions", "records_per_partition", "data_partitions",
                     "ack_partitions", "spout_max_tuples", "quiet_round_ms", "max_pending",
                     "message_timeout_ms", "timeout_buckets"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{where}: {name} must be >= 1, got {getattr(self, name)}")
        if self.ack_timestamps not in ("append", "create"):
            raise ConfigError(f"{where}: ack_timestamps must be 'append' or 'create', "
                              f"got {self.ack_timestamps!r}")

    @classmethod
    def for_seed(cls, seed: int, **overrides) -> "SimConfig":
        """A configuration whose shape (topology, partitions, limits, fault rates) is drawn from
        ``seed`` too, so that a list of seeds covers many shapes; ``overrides`` win."""
        shape = random.Random(f"reliable-kafka-simulation-{seed}")
        fields = {
            "seed": seed,
            "source_partitions": shape.randint(1, 3),
            "records_per_partition": shape.randint(4, 12),
            "stages": shape.choice(_SHAPES),
            "data_partitions": shape.randint(1, 3),
            "ack_partitions": shape.randint(1, 3),
            "timeout_buckets": shape.randint(1, 4),
            "max_retries": shape.randint(0, 4),
            "max_pending": shape.randint(2, 12),
            "metadata_max_bytes": shape.choice((4096, 4096, 10, 14)),
            "ack_timestamps": shape.choice(("append", "append", "create")),
            "acker_initial_capacity": shape.choice((1, 8, 256)),
            "crash_rate": shape.choice((0.01, 0.03, 0.06)),
            "stall_rate": shape.choice((0.0, 0.04, 0.1)),
            "fail_rate": shape.choice((0.0, 0.02, 0.05)),
            "drop_rate": shape.choice((0.0, 0.02, 0.05)),
        }
        fields.update(overrides)
        return cls(**fields)

    @property
    def bucket_width_ms(self) -> int:
        return -(-self.message_timeout_ms // self.timeout_buckets)

    @property
    def total_records(self) -> int:
        return self.source_partitions * self.records_per_partition

    @property
    def liveness_bound_ms(self) -> int:
        """How long after the faults stop every record must be final: a doomed attempt's outcome
        (acker expiry, or the spout's backstop), the longest backoff, then clean processing of
        the remaining records ``max_pending`` at a time, a few rounds per stage each."""
        doomed = self.message_timeout_ms + max(self.bucket_width_ms, self.backstop_grace_ms)
        rounds_per_tree = len(self.stages) + 6
        batches = math.ceil(self.total_records / self.max_pending) + 2
        return doomed + self.backoff_max_ms + self.quiet_round_ms * rounds_per_tree * batches

    def replay_hint(self) -> str:
        """Python that rebuilds this configuration (fields that differ from the defaults)."""
        defaults = SimConfig()
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(defaults, f.name):
                text = getattr(value, "__qualname__", None) if callable(value) else repr(value)
                parts.append(f"{f.name}={text}")
        return f"run_simulation(SimConfig({', '.join(parts)}))"


# ------------------------------------------------------------------------------------ results


class InvariantViolation(AssertionError):
    """An invariant did not hold; the message names the seed, the step and the last steps."""

    def __init__(self, *, seed: int, step: int, time_ms: int, invariant: str, detail: str,
                 trace: list[str], replay: str) -> None:
        self.seed = seed
        self.step = step
        self.time_ms = time_ms
        self.invariant = invariant
        self.detail = detail
        self.trace = trace
        self.replay = replay
        lines = [f"simulation seed={seed}, step {step}, t={time_ms} ms: "
                 f"invariant '{invariant}' violated", f"  {detail}",
                 f"  replay: {replay}", f"  last {len(trace)} steps:"]
        lines += [f"    {entry}" for entry in trace]
        super().__init__("\n".join(lines))


@dataclass
class SimResult:
    """Figures of one run (counts over all incarnations)."""

    seed: int
    config: SimConfig
    steps: int = 0                    # fault steps + quiet rounds
    quiet_rounds: int = 0
    time_ms: int = 0                  # simulated time at the end
    faults_stopped_ms: int = 0
    final_ms: int | None = None       # when every record was final and committed
    crashes: Counter = field(default_factory=Counter)  # spout / bolt / acker
    lost_records: int = 0             # unsent producer records lost in crashes
    failed_tuples: int = 0
    dropped_tuples: int = 0
    spout_handler_errors: int = 0     # handler raised: root failed locally, no INIT
    stalls: int = 0
    time_jumps: int = 0
    roots: int = 0                    # tree attempts (spout emits with tuples)
    tuples: int = 0                   # tuples emitted by spout and bolts
    multi_anchored: int = 0           # children of two inputs
    records_completed: int = 0        # source records with a complete attempt
    records_dead_lettered: int = 0
    records_without_tuples: int = 0
    redeliveries: int = 0
    backstop_expiries: int = 0
    ignored_outcomes: int = 0
    outcomes: Counter = field(default_factory=Counter)  # COMPLETED / FAILED / TIMED_OUT
    completions_judged: int = 0       # COMPLETED decisions checked against the ground truth
    effects: int = 0                  # sink deliveries (duplicates included)
    duplicate_effects: int = 0
    metadata_truncated: int = 0
    acker_commits: int = 0
    rebuild_checks: int = 0           # rebuilt acker tables compared with the reference
    rebuild_roots_compared: int = 0
    rebuild_fragments: int = 0        # roots with events below the replay point (not compared)
    rebuild_divergences: int = 0      # differing roots under CreateTime (not a violation)

    @property
    def faults(self) -> int:
        return (sum(self.crashes.values()) + self.failed_tuples + self.dropped_tuples
                + self.spout_handler_errors + self.stalls + self.time_jumps)

    @property
    def liveness_ms(self) -> int | None:
        """Time from the end of the faults until every record was final and committed."""
        return None if self.final_ms is None else self.final_ms - self.faults_stopped_ms

    def summary(self) -> str:
        c = self.config
        return (f"seed {self.seed}: {'>'.join(c.stages)} src {c.source_partitions}x"
                f"{c.records_per_partition} acks {c.ack_partitions}; {self.steps} steps, "
                f"{self.faults} faults (crashes {dict(self.crashes)}, fail {self.failed_tuples}, "
                f"drop {self.dropped_tuples}, stall {self.stalls}, jump {self.time_jumps}); "
                f"{self.roots} roots, {self.tuples} tuples, {self.redeliveries} redelivered, "
                f"{self.backstop_expiries} backstop; completed "
                f"{self.records_completed}, dlq {self.records_dead_lettered}; liveness "
                f"{self.liveness_ms}/{c.liveness_bound_ms} ms; rebuilds {self.rebuild_checks}")


# ------------------------------------------------------------------------------------ the model


# ------------------------------------------------------------------------------------ Kafka


@dataclass(frozen=True, slots=True)
class _Record:
    offset: int
    timestamp_ms: int
    value: object


class _Log:
    """One partition: an append-only list of records."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[_Record] = []

    @property
    def end(self) -> int:
        return len(self.records)

    def append(self, value: object, timestamp_ms: int) -> int:
        self.records.append(_Record(len(self.records), timestamp_ms, value))
        return len(self.records) - 1


@dataclass(frozen=True, slots=True)
class _DataTuple:
    uid: int                      # ground-truth identity (components never read it)
    anchors: dict[int, int]       # the rk-anchors header
    source: tuple[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class _AckRecord:
    sender: int
    kinds: np.ndarray
    roots: np.ndarray
    vals: np.ndarray
    truth: tuple[tuple[int, int, int, tuple[int, ...]], ...]  # (node, root, kind, children)


@dataclass(frozen=True, slots=True)
class _OutcomeRecord:
    owner: int
    roots: tuple[int, ...]
    kinds: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _DeadLetter:
    tp: TopicPartition
    offset: int
    attempt: int
    reason: str


class _Outbox:
    """A producer's unsent records per (topic, partition), in send order; lost in a crash.
    ``stalled`` holds a partition's records back until a time (a delayed delivery)."""

    __slots__ = ("queues", "stalled")

    def __init__(self) -> None:
        self.queues: dict[TopicPartition, deque] = {}
        self.stalled: dict[TopicPartition, int] = {}

    def send(self, topic: str, partition: int, value: object, created_ms: int,
             on_append: Callable[[int], None] | None = None) -> None:
        self.queues.setdefault((topic, partition), deque()).append((value, created_ms, on_append))

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def ready(self, now: int) -> list[TopicPartition]:
        return [k for k, q in self.queues.items() if q and self.stalled.get(k, -1) <= now]

    def waiting(self) -> list[TopicPartition]:
        return [k for k, q in self.queues.items() if q]


class _AckBuffer:
    """An AckPacker plus the ground truth of each entry, drained into one record per partition."""

    def __init__(self, ack_partitions: int) -> None:
        self.partitions = ack_partitions
        self.packer = AckPacker(ack_partitions=ack_partitions)
        self.truth: dict[int, list] = {}

    def add(self, kind: EventKind, root: int, val: int, node: int,
            children: tuple[int, ...]) -> None:
        self.packer.add(kind, root, val)
        self.truth.setdefault(partition_for_root(root, self.partitions), []).append(
            (node, root, int(kind), children))

    def drain(self, sender: int) -> list[tuple[int, _AckRecord]]:
        records = [(p, _AckRecord(sender, kinds, roots, vals, tuple(self.truth.pop(p, ()))))
                   for p, (kinds, roots, vals) in self.packer.drain().items()]
        self.truth.clear()
        return records


# ------------------------------------------------------------------------------------ truth


@dataclass(slots=True)
class _TupleInfo:
    topic: str
    made_by: str


class _Truth:
    """What really happened: tuples, tree attempts, and which ack record acked what."""

    def __init__(self) -> None:
        self._uids = 0
        self.tuples: dict[int, _TupleInfo] = {}
        self.root_node: dict[int, int] = {}                     # root -> its spout node
        self.root_record: dict[int, tuple[TopicPartition, int, int]] = {}  # root -> tp, off, try
        self.attempts: dict[tuple[TopicPartition, int], list[int]] = {}
        self.acks: dict[tuple[int, int], list[tuple[int, tuple[int, ...]]]] = {}
        self.inits: dict[int, list[tuple[int, int]]] = {}       # root -> (offset, sender)
        self.fails: dict[int, list[int]] = {}
        self.first_event: dict[int, int] = {}                   # root -> first ack offset
        self.dead_letters: set[tuple[TopicPartition, int]] = set()
        self.without_tuples: set[tuple[TopicPartition, int]] = set()
        self.complete: set[int] = set()
        self.effects: Counter = Counter()

    def _uid(self, topic: str, made_by: str) -> int:
        self._uids += 1
        self.tuples[self._uids] = _TupleInfo(topic, made_by)
        return self._uids

    def new_tuple(self, topic: str, made_by: str) -> int:
        return self._uid(topic, made_by)

    def new_root(self, root: int, tp: TopicPartition, offset: int, attempt: int) -> int:
        node = self._uid("-", f"spout root {root} of {tp[0]}[{tp[1]}]@{offset} try {attempt}")
        self.root_node[root] = node
        self.root_record[root] = (tp, offset, attempt)
        self.attempts.setdefault((tp, offset), []).append(root)
        return node

    def on_ack_record(self, partition: int, offset: int, record: _AckRecord,
                      partitions: int) -> str | None:
        """Index an appended ack record; returns a problem when an entry is misrouted."""
        kinds, roots = record.kinds.tolist(), record.roots.tolist()
        if [(t[2], t[1]) for t in record.truth] != list(zip(kinds, roots)):
            return f"ack[{partition}]@{offset}: packed columns do not match the entries added"
        for node, root, kind, children in record.truth:
            if partition_for_root(root, partitions) != partition:
                return (f"ack[{partition}]@{offset}: root {root} belongs to partition "
                        f"{partition_for_root(root, partitions)} (root mod {partitions})")
            self.first_event.setdefault(root, offset)
            if kind == _INIT:
                self.inits.setdefault(root, []).append((offset, record.sender))
            if kind in (_INIT, _ACK):
                self.acks.setdefault((node, root), []).append((offset, children))
            elif kind == _FAIL:
                self.fails.setdefault(root, []).append(offset)
        return None

    def _done(self, node: int, root: int, upto: int | None, memo: dict[int, bool]) -> bool:
        known = memo.get(node)
        if known is not None:
            return known
        memo[node] = False
        for offset, children in self.acks.get((node, root), ()):
            if upto is not None and offset > upto:
                break  # appended in offset order
            if all(self._done(child, root, upto, memo) for child in children):
                memo[node] = True
                return True
        return False

    def tree_done(self, root: int, upto: int | None = None) -> bool:
        """True when the acks at or below ack offset ``upto`` (all: None) cover root's tree."""
        if upto is None and root in self.complete:  # complete by all acks, not by a prefix
            return True
        node = self.root_node.get(root)
        done = node is not None and self._done(node, root, upto, {})
        if done and upto is None:
            self.complete.add(root)
        return done

    def missing(self, root: int, upto: int | None, limit: int = 6) -> list[str]:
        """Tuples of root's tree (as far as acks up to ``upto`` tell) that were never acked."""
        node = self.root_node.get(root)
        if node is None:
            return [f"root {root} was never emitted by a spout"]
        out, seen, todo = [], {node}, [node]
        while todo and len(out) < limit:
            current = todo.pop()
            acks = [a for a in self.acks.get((current, root), ()) if upto is None or a[0] <= upto]
            if not acks:
                info = self.tuples[current]
                what = "INIT" if current == node else f"tuple #{current} on {info.topic}"
                out.append(f"{what} ({info.made_by}) not acked")
            for _, children in acks:
                for child in children:
                    if child not in seen:
                        seen.add(child)
                        todo.append(child)
        return out

    def record_final(self, tp: TopicPartition, offset: int) -> bool:
        key = (tp, offset)
        return (key in self.dead_letters or key in self.without_tuples
                or any(self.tree_done(root) for root in self.attempts.get(key, ())))

    def describe_record(self, tp: TopicPartition, offset: int) -> str:
        roots = self.attempts.get((tp, offset), [])
        parts = []
        for root in roots:
            _, _, attempt = self.root_record[root]
            parts.append(f"try {attempt} root {root}: " + "; ".join(self.missing(root, None, 3)))
        return " | ".join(parts) if parts else "never emitted"

    def judge(self, upto: int, root: int, owner: int, kind: int) -> tuple[str, str] | None:
        """(invariant, problem) when an acker's decision is not backed by the acks up to
        ``upto`` in root's ack partition; None when it is."""
        senders = {s for o, s in self.inits.get(root, ()) if o <= upto}
        name = OutcomeKind(kind).name
        if not senders:
            invariant = "no premature completion" if kind == _COMPLETED else "sound outcomes"
            return invariant, (f"{name} for root {root} (owner {owner}) but no INIT for it up "
                               f"to ack offset {upto}: " + "; ".join(self.missing(root, upto)))
        if owner not in senders:
            return "sound outcomes", f"{name} for root {root} names owner {owner}, INIT came " \
                                     f"from {sorted(senders)}"
        if kind == _COMPLETED and not self.tree_done(root, upto):
            return "no premature completion", (
                f"COMPLETED for root {root} at ack offset {upto}, but tuples of its tree were "
                "not acked: " + "; ".join(self.missing(root, upto)))
        if kind == _FAILED and not any(o <= upto for o in self.fails.get(root, ())):
            return "sound outcomes", f"FAILED for root {root} without a FAIL up to offset {upto}"
        return None


# ------------------------------------------------------------------------------------ components


class _Spout:
    """The spout shell: InFlightTracker, tuples to the first data topic, packed INITs."""

    def __init__(self, sim: "Simulation") -> None:
        cfg = sim.config
        self.sim = sim
        self.task_id = new_id()
        self.tracker = cfg.tracker_factory(
            max_pending=cfg.max_pending, max_retries=cfg.max_retries,
            backoff=Backoff(initial_ms=cfg.backoff_initial_ms, multiplier=2.0,
                            max_ms=cfg.backoff_max_ms),
            message_timeout_ms=cfg.message_timeout_ms, backstop_grace_ms=cfg.backstop_grace_ms,
            clock=sim.clock)
        self.outbox = _Outbox()
        self.acks = _AckBuffer(cfg.ack_partitions)
        self.confirmed: list[tuple[TopicPartition, int]] = []  # dead letters the broker took
        self.parked = 0  # dead letters sent
        self.positions: dict[TopicPartition, int] = {}
        for tp in sim.source_tps:
            committed, metadata = sim.spout_commits.get(tp, (None, ""))
            done_above = decode_done_above(committed, metadata) if committed is not None else []
            self.tracker.assign(tp, committed=committed, done_above=done_above)
            self.positions[tp] = committed or 0
        self.outcome_position = sim.log(_OUTCOMES, 0).end  # as OutcomeListener: from the end

    def step(self, budget: int | None) -> str:
        sim, tracker, result = self.sim, self.tracker, self.sim.result
        notes = []
        parked_before = self.parked
        for tp, offset in self.confirmed:
            tracker.dead_lettered(tp, offset)
        self.confirmed.clear()
        log = sim.log(_OUTCOMES, 0)
        stop = log.end if budget is None else min(log.end, self.outcome_position + budget)
        taken = ignored = 0
        for record in log.records[self.outcome_position:stop]:
            for root, kind in zip(record.value.roots, record.value.kinds):
                action = tracker.on_outcome(root, kind)  # every owner's: foreign roots ignored
                taken += 1
                ignored += action is None
                self._act(action)
        self.outcome_position = stop
        if taken:
            notes.append(f"outcomes {taken} (ignored {ignored})")
            result.ignored_outcomes += ignored
        expired = tracker.expire_backstop()
        for action in expired:
            self._act(action)
        if expired:
            notes.append(f"backstop {len(expired)}")
            result.backstop_expiries += len(expired)
        for redelivery in tracker.due_redeliveries():
            notes.append(f"redeliver {redelivery.tp[1]}@{redelivery.offset}#{redelivery.attempt}")
            result.redeliveries += 1
            self._emit(redelivery.tp, redelivery.offset, redelivery.attempt)
        readable = [tp for tp in sim.source_tps if self.positions[tp] < sim.log(*tp).end]
        if budget is not None and readable:
            readable = [sim.rng.choice(readable)]
        for tp in readable:
            end = sim.log(*tp).end
            left = budget
            read = []
            while self.positions[tp] < end and not tracker.over_max_pending() and left != 0:
                offset = self.positions[tp]
                self.positions[tp] += 1
                left = None if left is None else left - 1
                if tracker.should_skip(tp, offset):
                    read.append(f"skip {offset}")
                    continue
                read.append(str(offset))
                self._emit(tp, offset, 1)
            if read:
                notes.append(f"read {tp[1]}@" + ",".join(read))
        if self.parked > parked_before:
            notes.append(f"dead-letter {self.parked - parked_before}")
        for partition, record in self.acks.drain(self.task_id):
            self.outbox.send(_ACKS, partition, record, sim.now)
        if budget is None or sim.rng.random() < 0.3:
            notes.append(self._commit())
        return "spout: " + ("; ".join(n for n in notes if n) or "idle")

    def _emit(self, tp: TopicPartition, offset: int, attempt: int) -> None:
        sim, cfg = self.sim, self.sim.config
        count = (0 if sim.rng.random() < cfg.empty_record_rate
                 else sim.rng.randint(1, cfg.spout_max_tuples))
        if count == 0:
            self.tracker.done_immediately(tp, offset)
            sim.truth.without_tuples.add((tp, offset))
            return
        root = new_id()
        parent = spout_root(root)
        node = sim.truth.new_root(root, tp, offset, attempt)
        sim.result.roots += 1
        raises = sim.faults_on and sim.rng.random() < cfg.fail_rate
        if raises:  # the handler raises after some of its emits: no INIT, failed at once
            count = sim.rng.randint(0, count - 1)
        children = []
        for _ in range(count):
            anchors = anchor_child([parent])
            uid = sim.truth.new_tuple(_stage_topic(0), f"spout tuple of root {root}")
            children.append(uid)
            sim.result.tuples += 1
            self.outbox.send(_stage_topic(0), sim.rng.randrange(cfg.data_partitions),
                             _DataTuple(uid, anchors, (tp, offset)), sim.now)
        self.tracker.emitted(tp, offset, root=root, attempt=attempt)
        if raises:
            sim.result.spout_handler_errors += 1
            self._act(self.tracker.on_outcome(root, OutcomeKind.FAILED))
            return
        for r, val in ack_entries(parent):
            self.acks.add(EventKind.INIT, r, val, node, tuple(children))

    def _act(self, action: OutcomeAction | None) -> None:
        if action is None or action.kind is not ActionKind.DEAD_LETTER:
            return
        tp, offset = action.tp, action.offset
        self.parked += 1

        def confirmed(_offset: int) -> None:
            self.confirmed.append((tp, offset))

        self.outbox.send(_DLQ, 0, _DeadLetter(tp, offset, action.attempt, action.reason),
                         self.sim.now, on_append=confirmed)

    def rebalance(self, tp: TopicPartition) -> str:
        """Revoke ``tp`` (commit what is done, forget the rest) and get it assigned again."""
        note = self._commit(only=tp)
        self.tracker.revoke(tp)
        committed, metadata = self.sim.spout_commits.get(tp, (None, ""))
        done_above = decode_done_above(committed, metadata) if committed is not None else []
        self.tracker.assign(tp, committed=committed, done_above=done_above)
        self.positions[tp] = committed or 0
        return f"REBALANCE spout {tp[0]}[{tp[1]}]: {note}, resume at {committed}"

    def _commit(self, only: TopicPartition | None = None) -> str:
        sim = self.sim
        points = self.tracker.commit_points()
        if only is not None:
            points = {tp: p for tp, p in points.items() if tp == only}
        for tp, point in points.items():
            metadata, truncated = encode_done_above(point, self.tracker.done_above(tp),
                                                    max_bytes=sim.config.metadata_max_bytes)
            sim.result.metadata_truncated += truncated
            sim.spout_commits[tp] = (point, metadata)
        return "commit " + ",".join(f"{tp[1]}:{p}" for tp, p in points.items())


class _Bolt:
    """A bolt task of one stage: consumes its data topic, emits, acks / fails / drops."""

    def __init__(self, sim: "Simulation", stage: int) -> None:
        cfg = sim.config
        self.sim = sim
        self.stage = stage
        self.kind = cfg.stages[stage]
        self.in_topic = _stage_topic(stage)
        self.out_topic = None if self.kind == "sink" else _stage_topic(stage + 1)
        self.task_id = new_id()
        self.outbox = _Outbox()
        self.acks = _AckBuffer(cfg.ack_partitions)
        committed = sim.bolt_commits[stage]
        self.positions = {p: committed.get(p, 0) for p in range(cfg.data_partitions)}
        self.held: tuple[Anchored, int, tuple[TopicPartition, int]] | None = None

    def step(self, budget: int | None, faults: bool) -> str:
        sim = self.sim
        notes = []
        readable = [p for p, pos in self.positions.items() if pos < sim.log(self.in_topic, p).end]
        if budget is not None and readable:
            readable = [sim.rng.choice(readable)]
        for p in readable:
            log = sim.log(self.in_topic, p)
            start = self.positions[p]
            end = log.end if budget is None else min(log.end, start + budget)
            fates = [self._handle(record.value, faults) for record in log.records[start:end]]
            self.positions[p] = end
            notes.append(f"{p}@{start}..{end - 1} {''.join(fates)}")
        if self.held is not None and (not faults or sim.rng.random() < 0.5):
            anchored, node, source = self.held
            self.held = None
            child = self._emit([anchored], source)
            self._ack(anchored, node, (child,))
            notes.append("release")
        for partition, record in self.acks.drain(self.task_id):
            self.outbox.send(_ACKS, partition, record, sim.now)
        if budget is None or sim.rng.random() < 0.3:
            flush_first = budget is None or sim.rng.random() < 0.5
            if not flush_first or sim.flush(self.outbox):
                sim.bolt_commits[self.stage].update(self.positions)
                notes.append("commit" if flush_first else "commit before flush")
        return f"{self.kind}{self.stage}: " + ("; ".join(notes) or "idle")

    def _handle(self, tuple_: _DataTuple, faults: bool) -> str:
        """Process one input; returns a letter for the trace (a=ack f=fail d=drop h=hold)."""
        sim, cfg = self.sim, self.sim.config
        anchored = Anchored(dict(tuple_.anchors))
        node = tuple_.uid
        fate = "a"
        if faults:
            draw = sim.rng.random()
            fate = ("f" if draw < cfg.fail_rate
                    else "d" if draw < cfg.fail_rate + cfg.drop_rate else "a")
        if faults and sim.rng.random() < cfg.reset_rate:  # long work: push the acker deadline
            for root in anchored.anchors:
                self.acks.add(EventKind.RESET_TIMEOUT, root, 0, node, ())
        children: tuple[int, ...] = ()
        if self.kind == "split":
            count = sim.rng.randint(0, cfg.max_children)
            children = tuple(self._emit([anchored], tuple_.source) for _ in range(count))
        elif self.kind == "sink":
            sim.truth.effects[tuple_.source] += 1
        elif fate == "a" and self.held is not None:  # pair: one child of two inputs
            other, other_node, _ = self.held
            self.held = None
            child = self._emit([other, anchored], tuple_.source)
            sim.result.multi_anchored += 1
            self._ack(other, other_node, (child,))
            children = (child,)
        elif fate == "a" and faults and sim.rng.random() < cfg.hold_rate:
            self.held = (anchored, node, tuple_.source)
            return "h"
        elif fate == "a":
            children = (self._emit([anchored], tuple_.source),)
        if fate == "f":
            sim.result.failed_tuples += 1
            for root in fail_roots(anchored):
                self.acks.add(EventKind.FAIL, root, 0, node, ())
        elif fate == "d":
            sim.result.dropped_tuples += 1  # never acked: its tree can only time out
        else:
            self._ack(anchored, node, children)
        return fate

    def _emit(self, parents: list[Anchored], source: tuple[TopicPartition, int]) -> int:
        sim = self.sim
        anchors = anchor_child(parents)
        uid = sim.truth.new_tuple(self.out_topic, f"{self.kind}{self.stage} child")
        sim.result.tuples += 1
        self.outbox.send(self.out_topic, sim.rng.randrange(sim.config.data_partitions),
                         _DataTuple(uid, anchors, source), sim.now)
        return uid

    def _ack(self, anchored: Anchored, node: int, children: tuple[int, ...]) -> None:
        for root, val in ack_entries(anchored):
            self.acks.add(EventKind.ACK, root, val, node, children)


class _AckerShard:
    """One ack partition: the live acker incarnation, and a never-crashed reference table fed
    the same records at the same clock (it only waits while a restarted acker replays)."""

    def __init__(self, sim: "Simulation", partition: int) -> None:
        self.sim = sim
        self.partition = partition
        self.reference = self._table(AckerTable)
        self.reference_model = self._model()
        self.reference_position = 0
        self.committed: int | None = None
        self.committed_by: int | None = None  # replay start of the incarnation that committed
        self._start(restart=False)

    def _table(self, factory: Callable[..., AckerTable]) -> AckerTable:
        cfg = self.sim.config
        return factory(timeout_ms=cfg.message_timeout_ms, buckets=cfg.timeout_buckets,
                       initial_capacity=cfg.acker_initial_capacity)

    def _model(self) -> ReferenceAcker:
        cfg = self.sim.config
        return ReferenceAcker(timeout_ms=cfg.message_timeout_ms, buckets=cfg.timeout_buckets)

    def _start(self, *, restart: bool) -> None:
        self.table = self._table(self.sim.config.acker_table_factory)
        self.model = self._model()
        self.position = self.committed or 0
        self.outbox = _Outbox()
        self.replayed_from = self.position if restart else None  # None: never crashed
        self.replay_from = self.replayed_from  # cleared once compared with the reference
        self.restarted_after = self.committed_by

    def crash(self) -> int:
        lost = len(self.outbox)
        self._start(restart=True)
        return lost

    def step(self, budget: int | None) -> str:
        sim = self.sim
        log = sim.log(_ACKS, self.partition)
        start = self.position
        end = log.end if budget is None else min(log.end, start + budget)
        decided = 0
        for record in log.records[start:end]:
            value = record.value

            def fold(table, value=value, record=record):
                return table.fold(value.kinds, value.roots, value.vals, sender=value.sender,
                                  event_time_ms=record.timestamp_ms, offset=record.offset)

            decisions = fold(self.table)
            decided += len(decisions)
            self._check(decisions, fold(self.model), self.table, self.model, record.offset)
            if record.offset == self.reference_position:
                self._check(fold(self.reference), fold(self.reference_model), self.reference,
                            self.reference_model, record.offset)
                self.reference_position += 1
            self._publish(decisions)
            self.position = record.offset + 1
        notes = [f"fold {start}..{end - 1}, decided {decided}"] if end > start else []
        if self.position == log.end:  # idle: the clock follows the simulated wall clock
            decisions = self.table.advance(sim.now)
            self._check(decisions, self.model.advance(sim.now), self.table, self.model,
                        self.position - 1)
            if self.reference_position == self.position:
                self._check(self.reference.advance(sim.now),
                            self.reference_model.advance(sim.now), self.reference,
                            self.reference_model, self.position - 1)
            self._publish(decisions)
            if decisions:
                notes.append(f"expired {len(decisions)}")
            if self.replay_from is not None:
                notes.append(self._compare_rebuilt())
        if budget is None or sim.rng.random() < 0.3:
            notes.append(self.commit())
        return f"acker{self.partition}: " + ("; ".join(n for n in notes if n) or "idle")

    def _check(self, decisions: Outcomes, modeled: list[Decision], table: AckerTable,
               model: ReferenceAcker, upto: int) -> None:
        sim = self.sim
        got = sorted(zip(decisions.roots.tolist(), decisions.owners.tolist(),
                         decisions.kinds.tolist()))
        for root, owner, kind in got:
            if kind == _COMPLETED:
                sim.result.completions_judged += 1
            problem = sim.truth.judge(upto, root, owner, kind)
            if problem is not None:
                sim.violation(problem[0], f"acker[{self.partition}]: {problem[1]}")
        if not sim.config.check_acker_model:
            return
        if got != sorted(modeled) or table.pending != model.pending:
            sim.violation("acker table = reference model", (
                f"acker[{self.partition}] at ack offset {upto}: table decided "
                f"{_decisions(got)} with {table.pending} pending, the model "
                f"{_decisions(sorted(modeled))} with {model.pending} pending"))

    def _publish(self, decisions: Outcomes) -> None:
        sim = self.sim
        for kind in decisions.kinds.tolist():
            sim.result.outcomes[OutcomeKind(kind).name] += 1
        for owner, (roots, kinds) in decisions.by_owner().items():
            self.outbox.send(_OUTCOMES, 0, _OutcomeRecord(owner, tuple(roots.tolist()),
                                                          tuple(kinds.tolist())), sim.now)

    def commit(self) -> str:
        """Flush the outcomes, then commit the low point (or the next offset when empty)."""
        sim = self.sim
        if not sim.flush(self.outbox):
            return "commit postponed (outcomes held back)"
        low = self.table.low_offset()
        if sim.config.check_acker_model:
            bound = self.model.low_bound()
            if (low is None) != (bound is None) or (low is not None and low > bound):
                sim.violation("acker low point", (
                    f"acker[{self.partition}]: low_offset() is {low}, but a pending root's entry "
                    f"began at ack offset {bound}: a replay from {low} would miss its events"))
            audit = getattr(self.table, "_audit", None)
            problems = audit() if audit is not None else []
            if problems:
                sim.violation("acker table = reference model",
                              f"acker[{self.partition}] table audit: {problems}")
        self.committed = low if low is not None else self.position
        self.committed_by = self.replayed_from
        sim.result.acker_commits += 1
        return f"commit {self.committed}"

    def _compare_rebuilt(self) -> str:
        """A rebuilt table, caught up, against the never-crashed reference.

        Exact with LogAppendTime stamps: (1) the two agree on every root whose events all lie
        at or above the replay point (others may hold fragments of trees decided below it);
        (2) no reference entry began below the replay point, except for roots that the
        committing incarnation could not know whole either (it was itself rebuilt from a later
        point than their first event): else the replay missed events of a pending root.
        """
        sim, start = self.sim, self.replay_from
        self.replay_from = None
        first = sim.truth.first_event
        roots = sorted(set(self.model.entries) | set(self.reference_model.entries))
        clean = [r for r in roots if first[r] >= start]
        prior = self.restarted_after
        differ = [f"root {r}: the reference holds it pending since ack offset {e.first_offset}, "
                  f"below the replay point"
                  for r, e in self.reference_model.entries.items()
                  if e.first_offset < start and (prior is None or first[r] >= prior)]
        for root in clean:
            mine, ref = self.model.entries.get(root), self.reference_model.entries.get(root)
            if (mine and mine.state()) != (ref and ref.state()):
                differ.append(f"root {root}: rebuilt {mine and mine.state()} vs reference "
                              f"{ref and ref.state()} (val, owner, failed, deadline bucket)")
                continue
            state_of = getattr(self.table, "_state_of", None)
            if state_of is not None:
                a, b = state_of(root), self.reference._state_of(root)
                strip = lambda s: s and (s["val"], s["owner"], s["failed"])  # noqa: E731
                if strip(a) != strip(b):
                    differ.append(f"root {root}: rebuilt table {a} vs reference table {b}")
        result = sim.result
        result.rebuild_checks += 1
        result.rebuild_roots_compared += len(clean)
        result.rebuild_fragments += len(roots) - len(clean)
        if differ and sim.config.ack_timestamps == "append":
            sim.violation("acker event sourcing", (
                f"acker[{self.partition}] rebuilt from ack offset {start} differs from the "
                f"never-crashed reference: " + "; ".join(differ[:4])))
        result.rebuild_divergences += len(differ)
        return f"rebuilt from {start}: {len(clean)} roots as the reference"


def _decisions(decisions: list[Decision]) -> str:
    return "[" + ", ".join(f"{OutcomeKind(k).name} {r} owner {o}" for r, o, k in decisions) + "]"


# ------------------------------------------------------------------------------------ scheduler


@contextmanager
def _seeded_ids(seed: int) -> Iterator[None]:
    """Make ``reliable_kafka.ids`` (roots, edges, task ids) draw a sequence fixed by ``seed``;
    the previous generator state comes back afterwards."""
    state = ids._rng.getstate()
    ids._rng.seed(f"reliable-kafka-simulation-ids-{seed}")
    try:
        yield
    finally:
        ids._rng.setstate(state)


class Simulation:
    """One seeded run; :meth:`run` returns the figures or raises :class:`InvariantViolation`."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.now = 0
        self.step_no = 0
        self.faults_on = True
        self.result = SimResult(seed=config.seed, config=config)
        self.truth = _Truth()
        self._trace: deque[str] = deque(maxlen=config.trace_len)
        self.topics: dict[str, list[_Log]] = {}
        self.source_tps = [(_SOURCE, p) for p in range(config.source_partitions)]
        self.spout_commits: dict[TopicPartition, tuple[int, str]] = {}
        self.bolt_commits: list[dict[int, int]] = [{} for _ in config.stages]
        self._verified: dict[TopicPartition, int] = {}
        self._checked: dict[TopicPartition, tuple[int, str]] = {}
        self._produced = 0

    def clock(self) -> int:
        """The simulated time (the trackers' injected clock)."""
        return self.now

    def log(self, topic: str, partition: int) -> _Log:
        return self.topics[topic][partition]

    def violation(self, invariant: str, detail: str) -> None:
        raise InvariantViolation(seed=self.config.seed, step=self.step_no, time_ms=self.now,
                                 invariant=invariant, detail=detail, trace=list(self._trace),
                                 replay=self.config.replay_hint())

    # --- running -----------------------------------------------------------------------------

    def run(self) -> SimResult:
        with _seeded_ids(self.config.seed):
            try:
                self._setup()
                for _ in range(self.config.fault_steps):
                    self.step_no += 1
                    self._trace.append(f"#{self.step_no} t={self.now} {self._fault_step()}")
                    self._check_commits()
                self._quiet()
            except InvariantViolation:
                raise
            except Exception as exc:  # a core call raised: that is a finding too
                self.violation("no exception", f"{type(exc).__name__}: {exc}")
        self._finish()
        return self.result

    def _setup(self) -> None:
        cfg = self.config
        self.topics[_SOURCE] = [_Log() for _ in range(cfg.source_partitions)]
        for stage in range(len(cfg.stages)):
            self.topics[_stage_topic(stage)] = [_Log() for _ in range(cfg.data_partitions)]
        self.topics[_ACKS] = [_Log() for _ in range(cfg.ack_partitions)]
        self.topics[_OUTCOMES] = [_Log()]
        self.topics[_DLQ] = [_Log()]
        self.spout = _Spout(self)
        self.bolts = [_Bolt(self, stage) for stage in range(len(cfg.stages))]
        self.ackers = [_AckerShard(self, p) for p in range(cfg.ack_partitions)]

    def _outboxes(self) -> list[_Outbox]:
        return [self.spout.outbox, *(b.outbox for b in self.bolts),
                *(a.outbox for a in self.ackers)]

    def _fault_step(self) -> str:
        cfg, rng = self.config, self.rng
        self.now += rng.randint(0, cfg.step_ms)
        # Source records arrive over the first 90% of the fault steps.
        due = min(cfg.total_records, cfg.total_records * self.step_no * 10 // (cfg.fault_steps * 9))
        while self._produced < due:
            self._produce_source()
        draw = rng.random()
        if draw < cfg.crash_rate:
            return self._crash()
        draw -= cfg.crash_rate
        if draw < cfg.jump_rate:
            jump = rng.randint(cfg.message_timeout_ms // 4, cfg.message_timeout_ms)
            self.now += jump
            self.result.time_jumps += 1
            return f"time jumps {jump} ms"
        draw -= cfg.jump_rate
        if draw < cfg.stall_rate:
            waiting = [(box, key) for box in self._outboxes() for key in box.waiting()]
            if waiting:
                box, key = rng.choice(waiting)
                box.stalled[key] = self.now + rng.randint(50, cfg.stall_max_ms)
                self.result.stalls += 1
                return f"hold back {key[0]}[{key[1]}] until {box.stalled[key]}"
        ready = [(box, key) for box in self._outboxes() for key in box.ready(self.now)]
        actions = ["spout"] + [f"bolt{i}" for i in range(len(self.bolts))] + \
                  [f"acker{p}" for p in range(len(self.ackers))] + (["deliver"] if ready else [])
        weights = [2] + [2] * len(self.bolts) + [1.5] * len(self.ackers) + ([5] if ready else [])
        action = rng.choices(actions, weights)[0]
        budget = rng.randint(1, cfg.batch_max)
        if action == "spout":
            return self.spout.step(budget)
        if action.startswith("bolt"):
            return self.bolts[int(action[4:])].step(budget, faults=True)
        if action.startswith("acker"):
            return self.ackers[int(action[5:])].step(budget)
        box, key = rng.choice(ready)
        count = self._deliver(box, key, rng.randint(1, cfg.batch_max))
        return f"deliver {count} to {key[0]}[{key[1]}]"

    def _produce_source(self) -> None:
        open_ = [log for log in self.topics[_SOURCE] if log.end < self.config.records_per_partition]
        log = self.rng.choice(open_)
        log.append(log.end, self.now)
        self._produced += 1

    def _crash(self) -> str:
        rng, result = self.rng, self.result
        target = rng.choices(["spout", "bolt", "acker", "rebalance"], self.config.crash_weights)[0]
        result.crashes[target] += 1
        if target == "rebalance":
            return self.spout.rebalance(rng.choice(self.source_tps))
        if target == "spout":
            old = self.spout
            result.lost_records += len(old.outbox)
            self.spout = _Spout(self)
            return (f"CRASH spout (lost {len(old.outbox)} unsent, pending "
                    f"{old.tracker.pending_roots()}); restart from "
                    f"{ {tp[1]: c for tp, (c, _) in self.spout_commits.items()} }")
        if target == "bolt":
            stage = rng.randrange(len(self.bolts))
            old = self.bolts[stage]
            result.lost_records += len(old.outbox)
            self.bolts[stage] = _Bolt(self, stage)
            return (f"CRASH {old.kind}{stage} (lost {len(old.outbox)} unsent"
                    f"{', a held input' if old.held else ''}); restart from "
                    f"{self.bolt_commits[stage]}")
        shard = self.ackers[rng.randrange(len(self.ackers))]
        lost = shard.crash()
        result.lost_records += lost
        return (f"CRASH acker{shard.partition} (lost {lost} unsent outcomes); replay from "
                f"{shard.position}")

    def _deliver(self, box: _Outbox, key: TopicPartition, count: int | None = None) -> int:
        """Append up to ``count`` (None: all) of a producer's records for one partition."""
        queue = box.queues[key]
        n = len(queue) if count is None else min(count, len(queue))
        topic, partition = key
        for _ in range(n):
            value, created_ms, on_append = queue.popleft()
            stamp = created_ms if topic == _ACKS and self.config.ack_timestamps == "create" \
                else self.now
            offset = self.topics[topic][partition].append(value, stamp)
            if topic == _ACKS:
                problem = self.truth.on_ack_record(partition, offset, value,
                                                   self.config.ack_partitions)
                if problem:
                    self.violation("ack routing", problem)
            elif topic == _DLQ:
                self.truth.dead_letters.add((value.tp, value.offset))
            if on_append is not None:
                on_append(offset)
        return n

    def flush(self, box: _Outbox) -> bool:
        """A producer flush: deliver everything; False when a held-back partition blocks it."""
        for key in box.ready(self.now):
            self._deliver(box, key)
        return not box.waiting()

    def _quiet(self) -> None:
        """Faults stop; rounds in which every component catches up, until all is quiet."""
        cfg, result = self.config, self.result
        self.faults_on = False
        while self._produced < cfg.total_records:
            self._produce_source()
        result.faults_stopped_ms = self.now
        for box in self._outboxes():
            box.stalled.clear()
        self._trace.append(f"t={self.now} faults stop")
        for _ in range(cfg.max_quiet_rounds):
            self.step_no += 1
            result.quiet_rounds += 1
            self.now += cfg.quiet_round_ms
            components = [self.spout, *self.bolts, *self.ackers]
            self.rng.shuffle(components)
            notes = []
            for component in components:
                note = (component.step(None, faults=False) if isinstance(component, _Bolt)
                        else component.step(None))
                notes.append(note)
                for box in self._outboxes():
                    self.flush(box)
            self._trace.append(f"#{self.step_no} t={self.now} round: " + " | ".join(
                n for n in notes if not n.endswith("idle")))
            self._check_commits()
            if result.final_ms is None and self._all_committed():
                result.final_ms = self.now
            if self._quiescent():
                return
        self.violation("liveness", f"not quiet after {cfg.max_quiet_rounds} rounds without "
                                   f"faults: {self._stuck()}")

    # --- checks ------------------------------------------------------------------------------

    def _check_commits(self) -> None:
        """Invariant 1, after every step: the spout's commits only cover final records."""
        for tp, (point, metadata) in self.spout_commits.items():
            if self._checked.get(tp) == (point, metadata):
                continue  # finality only grows: what passed once stays passed
            for offset in range(self._verified.get(tp, 0), point):
                if not self.truth.record_final(tp, offset):
                    self.violation("no loss", (
                        f"spout committed {tp[0]}[{tp[1]}] at {point}, but offset {offset} "
                        f"below the committed offset neither completed nor was dead-lettered: "
                        f"{self.truth.describe_record(tp, offset)}"))
            self._verified[tp] = max(self._verified.get(tp, 0), point)
            for offset in decode_done_above(point, metadata):
                if not self.truth.record_final(tp, offset):
                    self.violation("no loss", (
                        f"spout's commit metadata at {point} names {tp[0]}[{tp[1]}]@{offset} "
                        f"done, but it neither completed nor was dead-lettered: "
                        f"{self.truth.describe_record(tp, offset)}"))
            self._checked[tp] = (point, metadata)

    def _all_committed(self) -> bool:
        return all(self.spout_commits.get(tp, (None,))[0] == self.log(*tp).end
                   for tp in self.source_tps)

    def _quiescent(self) -> bool:
        spout = self.spout
        return (self._all_committed()
                and not any(len(box) for box in self._outboxes())
                and spout.tracker.pending_roots() == 0 and not spout.confirmed
                and spout.outcome_position == self.log(_OUTCOMES, 0).end
                and all(spout.positions[tp] == self.log(*tp).end for tp in self.source_tps)
                and all(b.held is None and all(pos == self.log(b.in_topic, p).end
                                               for p, pos in b.positions.items())
                        for b in self.bolts)
                and all(a.table.pending == 0 and a.position == self.log(_ACKS, a.partition).end
                        and a.committed == a.position for a in self.ackers))

    def _stuck(self) -> str:
        spout = self.spout
        parts = [f"commits {dict((tp[1], c) for tp, (c, _) in self.spout_commits.items())} of "
                 f"{[self.log(*tp).end for tp in self.source_tps]}",
                 f"spout pending roots {spout.tracker.pending_roots()}"]
        for tp in self.source_tps:
            pending = spout.tracker.pending_offsets(tp)[:5]
            if pending:
                parts.append(f"pending {tp[1]}@{pending}: " + "; ".join(
                    self.truth.describe_record(tp, o) for o in pending[:2]))
        parts += [f"acker{a.partition} pending {a.table.pending} committed {a.committed}"
                  for a in self.ackers if a.table.pending]
        return ", ".join(parts)

    def _finish(self) -> None:
        """Invariant 3 and the final figures."""
        cfg, result, truth = self.config, self.result, self.truth
        result.steps = self.step_no
        result.time_ms = self.now
        if result.liveness_ms is None or result.liveness_ms > cfg.liveness_bound_ms:
            self.violation("liveness", (
                f"records became final {result.liveness_ms} ms after the faults stopped, "
                f"more than the bound of {cfg.liveness_bound_ms} ms"))
        for tp in self.source_tps:
            for offset in range(self.log(*tp).end):
                key = (tp, offset)
                if any(truth.tree_done(root) for root in truth.attempts.get(key, ())):
                    result.records_completed += 1
                elif key in truth.dead_letters:
                    result.records_dead_lettered += 1
                elif key in truth.without_tuples:
                    result.records_without_tuples += 1
        result.effects = sum(truth.effects.values())
        result.duplicate_effects = sum(n - 1 for n in truth.effects.values() if n > 1)


def run_simulation(config: SimConfig) -> SimResult:
    """Run one simulation; raises :class:`InvariantViolation` (seed, trace) when one fails."""
    return Simulation(config).run()
