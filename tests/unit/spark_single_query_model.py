"""A model of the single-query Spark spout's protocol for one source record (one root), for tests.

The tracked job is one streaming query: Spark's Kafka source, the user's row-wise transform,
Spark's Kafka sink. For one source record (root ``r``, an id both the tasks and the driver
derive) in one micro-batch:

1. a task attempt runs the transform (n rows for r, the same n in every attempt; an ``rk_fail``
   row is not written), draws a random child edge per row, writes the rows, and after them ONE
   ack record to r's ack partition: INIT(r, X) with X the XOR of the edges it drew for r (the
   ``rk_fail`` rows' too), plus FAIL(r) in the same record if a row was ``rk_fail``; nothing at
   all when n = 0. Every INIT names the driver as the owner.
2. attempts die having written any subset of their records; one attempt succeeds, and Spark
   commits the batch only once all of its records are in Kafka; others (speculative, zombies)
   may write after the commit.
3. after the commit the driver registers r and, unless it already heard an outcome for r, sends
   INIT(r, 0): it lands after the succeeding attempt's ack record.
4. a downstream bolt processes each written row whenever it likes: ACK(r, c ^ g1 ^ ...) and
   ACK(r, g_j) for each grandchild it emitted, or FAIL(r).
5. the driver keeps the first outcome it hears for r, one heard before it registered r too.

Everything runs as one interleaving, chosen step by step by ``Scenario.choices`` and then by a
seeded random choice: records land
in Kafka in any order, the acker folds r's ack partition in log order with the real rule
(:func:`reliable_kafka.core.acker_rule.update` and ``decide``) and lags as it likes, an ownerless
state may be dropped at any point and an owned one may time out, and outcomes reach the driver in
the acker's order (one ack partition per root, one outcome partition per owner).

Edges are distinct powers of two: any set of them XORs to zero only when each appears an even
number of times, which is what random 64-bit edges give but for odds of about 2^-64 an event.

:class:`Variant` is the protocol as designed by default; each other setting is one deliberate
departure (a mutant) that the safety check must catch. :func:`violations` is the safety check.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from reliable_kafka.core import acker_rule as rule
from reliable_kafka.core.kinds import EventKind, OutcomeKind

INIT, ACK, FAIL = EventKind.INIT, EventKind.ACK, EventKind.FAIL
COMPLETED, FAILED, TIMED_OUT = OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.TIMED_OUT
DRIVER = 7  # the driver's task id: the owner every INIT names (tasks send it on the driver's behalf)
BOLT = 9  # the downstream bolt's task id (its records hold no INIT: never an owner)
ROOT = 12_345
_GRANDCHILD_BIT = 32  # grandchild edges from here up; row edges below (3 attempts x 3 rows at most)


@dataclass(frozen=True)
class Variant:
    """The protocol as designed (the defaults), or one departure from it."""

    random_edges: bool = True  # False: row i has the same edge in every attempt (ids from coordinates)
    init_per_row: bool = False  # True: INIT(r, c_i) sent with each row instead of one INIT after the rows
    driver_init_after_commit: bool = True  # False: the driver's INIT(r, 0) may land before the commit
    task_entry: EventKind = INIT  # ACK: the tasks' entry names no owner (ownerless until the driver's)
    driver_keeps_first: bool = True  # False: the driver keeps the last outcome it heard
    outcomes_in_order: bool = True  # False: outcomes reach the driver in any order
    idempotent_ack_record: bool = True  # False: a producer retry can append an ack record twice
    ack_record_durable: bool = True  # False: the commit can pass with the ack record lost (acks=1, failover)
    driver_sends_init: bool = True  # False: no INIT(r, 0) from the driver at all
    driver_holds_early_outcomes: bool = True  # False: an outcome heard before r's registration is lost
    fail_with_init: bool = True  # False: an rk_fail row's FAIL(r) goes in a record of its own
    x_covers_failed_rows: bool = True  # False: X is the XOR of the written rows' edges only


@dataclass(frozen=True)
class Attempt:
    """One task attempt's fate. ``lands[j]``: the attempt's j-th record reaches Kafka (ignored for
    the succeeding attempt, whose records all land); ``duplicate``: its ack record is appended a
    second time (only where the variant's producer is not idempotent)."""

    rk_fail: tuple[bool, ...]  # per row
    lands: tuple[bool, ...]  # per record: rows first, then its ack record(s)
    duplicate: bool = False


@dataclass(frozen=True)
class Downstream:
    """What the bolt does with one written row: ack it with this many grandchildren, or fail it."""

    grandchildren: int = 0
    fails: bool = False


@dataclass(frozen=True)
class Scenario:
    n: int  # rows the transform gives for r (the same in every attempt)
    attempts: tuple[Attempt, ...]
    succeeding: int  # the attempt whose records Spark's commit waited for
    downstream: tuple[tuple[Downstream, ...], ...]  # per attempt, per row
    expiry: bool  # the acker may drop an ownerless state
    timeouts: bool  # the acker may time out an owned state
    choices: tuple[int, ...]  # the interleaving: step k takes choices[k] % (actions enabled) ...
    seed: int = 0  # ... and after them, a random action (hypothesis draws short lists)


@dataclass(frozen=True)
class Entry:
    kind: EventKind
    val: int
    source: str  # "task", "driver", "ack", "grandchild" or "bolt fail", for the check
    attempt: int = -1
    row: int = -1
    grandchild: int = -1


@dataclass(frozen=True)
class Record:
    entries: tuple[Entry, ...]
    sender: int


@dataclass
class Decision:
    kind: OutcomeKind
    tree: list[int]  # the ack-log records folded into the decided state, from its start


@dataclass
class _Item:
    """A record an attempt produces: a row to the output topic or an ack record."""

    row: int  # -1 for an ack record
    record: Record | None  # the ack record
    lands: bool
    after: int = -1  # an item that must land first (a duplicate follows its original)
    landed: bool = False


class Acker:
    """The acker for r's one root: the real rule, one record at a time, and the table's expiry."""

    def __init__(self) -> None:
        self.state: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.tree: list[int] = []
        self.dropped_ownerless = 0

    def fold(self, index: int, record: Record) -> Decision | None:
        xor = reduce(int.__xor__, (e.val for e in record.entries if e.kind in (INIT, ACK)), 0)
        bits = np.array([reduce(int.__or__, (int(rule.KIND_BITS[e.kind]) for e in record.entries), 0)], np.uint8)
        if self.state is None:
            self.state = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, bool))
        val, owner, failed = rule.update(
            *self.state, np.array([xor], np.int64), bits, np.array([record.sender], np.int64)
        )
        self.tree.append(index)
        decision = rule.decide(val, owner, failed, bits)[0]
        if decision in (COMPLETED, FAILED):
            return self._end(OutcomeKind(int(decision)))
        self.state = (val, owner, failed)
        return None

    def owned(self) -> bool:
        return self.state is not None and int(self.state[1][0]) != 0

    def expire(self) -> Decision | None:
        """The table's expiry: an owned state times out, an ownerless one is dropped silently."""
        if self.owned():
            return self._end(TIMED_OUT)
        self.state, self.tree = None, []
        self.dropped_ownerless += 1
        return None

    def _end(self, kind: OutcomeKind) -> Decision:
        decision = Decision(kind, self.tree)
        self.state, self.tree = None, []
        return decision


@dataclass
class Run:
    """One interleaving of a scenario under a variant, run to its end (see :func:`run`)."""

    scenario: Scenario
    variant: Variant
    log: list[Record] = field(default_factory=list)  # r's ack partition
    edges: list[list[int]] = field(default_factory=list)  # per attempt, per row
    grandchild_edges: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    items: list[list[_Item]] = field(default_factory=list)  # per attempt
    written: set[tuple[int, int]] = field(default_factory=set)  # (attempt, row) in the output topic
    processed: set[tuple[int, int]] = field(default_factory=set)
    ready: list[Entry] = field(default_factory=list)  # the bolt's entries not yet sent
    committed_at: int | None = None  # the ack log's length when Spark committed the batch
    driver_init: str = "not sent"  # "pending", "landed"
    acker: Acker = field(default_factory=Acker)
    folded: int = 0
    decisions: list[Decision] = field(default_factory=list)
    heard: list[int] = field(default_factory=list)  # indices into decisions, in the order heard
    accepted: list[Decision] = field(default_factory=list)  # each outcome the driver kept for r
    acker_events: list[tuple[str, int]] = field(default_factory=list)  # ("fold", record) / ("expire", -1)
    trace: list[str] = field(default_factory=list)


def run(scenario: Scenario, variant: Variant = Variant()) -> Run:
    """Play the scenario's interleaving until nothing is left to do; then the check can read it."""
    state = Run(scenario, variant)
    _plan_attempts(state)
    if not variant.driver_init_after_commit and variant.driver_sends_init:
        state.driver_init = "pending"  # sent at the batch's start, before any outcome
    rng = random.Random(scenario.seed)
    step = 0
    while actions := _enabled(state):
        if step < len(scenario.choices):
            pick = scenario.choices[step]
        else:
            pick = rng.randrange(64)
            if rng.random() < 0.9:  # an expiry now and then, not at every other step
                actions = [a for a in actions if a[0] != "expire"]
                if not actions:
                    break
        _apply(state, actions[pick % len(actions)])
        step += 1
    return state


def violations(state: Run) -> list[str]:
    """The safety check, on every outcome the driver kept as r's:

    a COMPLETED's tree (the ack records folded into the state it decided) holds the ack record of
    at least one attempt, unless n = 0, and then it is the driver's INIT that landed after the
    commit; and every attempt with an entry in that tree wrote every one of its n rows (none
    ``rk_fail``) and each was acked, with all its grandchildren, by entries in that same tree.
    """
    found = []
    for decision in state.accepted:
        if decision.kind != COMPLETED:
            continue
        entries = [e for i in decision.tree for e in state.log[i].entries]
        attempts = sorted({e.attempt for e in entries if e.source == "task"})
        if not attempts:
            driver_after_commit = state.committed_at is not None and any(
                e.source == "driver" and i >= state.committed_at for i in decision.tree for e in state.log[i].entries
            )
            if state.scenario.n or not driver_after_commit:
                found.append(f"COMPLETED with no attempt's ack record in its tree (n={state.scenario.n})")
        for a in attempts:
            found += _unacked(state, a, entries)
    return found


def describe(state: Run) -> str:
    """The scenario, the steps taken and what the driver kept: a counterexample to read."""
    s = state.scenario
    lines = [
        f"n={s.n}, succeeding attempt {s.succeeding}, expiry={s.expiry}, timeouts={s.timeouts}",
        *(f"attempt {a}: {att}" for a, att in enumerate(s.attempts)),
        *state.trace,
        f"driver kept: {[d.kind.name for d in state.accepted]}",
    ]
    return "\n".join(lines)


def _unacked(state: Run, attempt: int, entries: list[Entry]) -> list[str]:
    plan = state.scenario.attempts[attempt]
    acked = {(e.row, e.grandchild) for e in entries if e.attempt == attempt and e.source in ("ack", "grandchild")}
    found = []
    for row in range(state.scenario.n):
        if plan.rk_fail[row]:
            found.append(f"COMPLETED though attempt {attempt}'s row {row} was rk_fail (never written)")
        elif (row, -1) not in acked:
            written = "written" if (attempt, row) in state.written else "never written"
            found.append(f"COMPLETED before attempt {attempt}'s row {row} ({written}) was acked")
        else:
            for g in range(len(state.grandchild_edges.get((attempt, row), []))):
                if (row, g) not in acked:
                    found.append(f"COMPLETED before grandchild {g} of attempt {attempt}'s row {row} was acked")
    return found


def _plan_attempts(state: Run) -> None:
    s, v = state.scenario, state.variant
    for a, plan in enumerate(s.attempts):
        bits = range(s.n) if not v.random_edges else range(a * s.n, (a + 1) * s.n)
        state.edges.append([1 << b for b in bits])
        succeeds = a == s.succeeding
        records = [_Item(i, None, True) for i in range(s.n) if not plan.rk_fail[i]]
        if v.init_per_row:
            for i in range(s.n):
                fail = (Entry(FAIL, 0, "task", a, i),) if plan.rk_fail[i] else ()
                entry = Entry(v.task_entry, state.edges[a][i], "task", a, i)
                records.append(_Item(-1, Record((entry, *fail), DRIVER), True))
        elif s.n:
            drawn = [i for i in range(s.n) if v.x_covers_failed_rows or not plan.rk_fail[i]]
            x = reduce(int.__xor__, (state.edges[a][i] for i in drawn), 0)
            fail = (Entry(FAIL, 0, "task", a),) if any(plan.rk_fail) else ()
            init = Entry(v.task_entry, x, "task", a)
            if v.fail_with_init:
                records.append(_Item(-1, Record((init, *fail), DRIVER), True))
            else:
                records += [_Item(-1, Record((e,), DRIVER), True) for e in (init, *fail)]
        for j, item in enumerate(records):
            lost_ack = item.record is not None and not v.ack_record_durable
            item.lands = plan.lands[j] if not succeeds or lost_ack else True
        if plan.duplicate and not v.idempotent_ack_record:
            first = next((j for j, item in enumerate(records) if item.record is not None and item.lands), None)
            if first is not None:
                records.append(_Item(-1, records[first].record, True, after=first))
        state.items.append(records)


def _enabled(state: Run) -> list[tuple[str, int, int]]:
    s, v = state.scenario, state.variant
    actions = []
    for a, items in enumerate(state.items):
        for j, item in enumerate(items):
            if item.lands and not item.landed and (item.after < 0 or items[item.after].landed):
                actions.append(("land", a, j))
    if state.committed_at is None and all(
        item.landed or (item.record is not None and not v.ack_record_durable)
        for item in state.items[s.succeeding]
        if item.lands and item.after < 0
    ):
        actions.append(("commit", -1, -1))
    if state.driver_init == "pending":
        actions.append(("driver INIT lands", -1, -1))
    actions += [("process", a, i) for a, i in sorted(state.written - state.processed)]
    actions += [("send", k, -1) for k in range(len(state.ready))]
    if len(state.ready) > 1:
        actions.append(("send all", -1, -1))
    if state.folded < len(state.log):
        actions.append(("fold", -1, -1))
    if len(state.heard) < len(state.decisions):
        if v.outcomes_in_order:
            actions.append(("hear", len(state.heard), -1))
        else:
            actions += [("hear", d, -1) for d in range(len(state.decisions)) if d not in state.heard]
    if state.acker.state is not None and (s.timeouts if state.acker.owned() else s.expiry):
        actions.append(("expire", -1, -1))
    return actions


def _apply(state: Run, action: tuple[str, int, int]) -> None:
    kind, a, i = action
    if kind == "land":
        item = state.items[a][i]
        item.landed = True
        if item.record is None:
            state.written.add((a, item.row))
            state.trace.append(f"attempt {a} writes row {item.row}")
        else:
            _append(state, item.record, f"attempt {a}'s ack record")
    elif kind == "commit":
        state.committed_at = len(state.log)
        state.trace.append("Spark commits the batch; the driver registers r")
        if state.variant.driver_init_after_commit and state.variant.driver_sends_init and not state.accepted:
            state.driver_init = "pending"
    elif kind == "driver INIT lands":
        state.driver_init = "landed"
        _append(state, Record((Entry(INIT, 0, "driver"),), DRIVER), "the driver's INIT(r, 0)")
    elif kind == "process":
        _process(state, a, i)
    elif kind in ("send", "send all"):
        sent = state.ready if kind == "send all" else [state.ready[a]]
        state.ready = [e for e in state.ready if e not in sent]
        _append(state, Record(tuple(sent), BOLT), "a bolt's ack record")
    elif kind == "fold":
        index = state.folded
        state.folded += 1
        state.acker_events.append(("fold", index))
        _decided(state, state.acker.fold(index, state.log[index]), f"acker folds #{index}")
    elif kind == "expire":
        state.acker_events.append(("expire", -1))
        _decided(state, state.acker.expire(), "acker expires r's state")
    elif kind == "hear":
        state.heard.append(a)
        decision = state.decisions[a]
        if state.committed_at is None and not state.variant.driver_holds_early_outcomes:
            state.trace.append(f"driver hears {decision.kind.name} (decision {a}) before registering r: lost")
            return
        if not state.accepted or not state.variant.driver_keeps_first:
            state.accepted.append(decision)
        state.trace.append(f"driver hears {decision.kind.name} (decision {a})")


def _process(state: Run, a: int, row: int) -> None:
    state.processed.add((a, row))
    plan = state.scenario.downstream[a][row]
    if plan.fails:
        state.ready.append(Entry(FAIL, 0, "bolt fail", a, row))
        state.trace.append(f"bolt fails attempt {a}'s row {row}")
        return
    base = _GRANDCHILD_BIT + 2 * (a * state.scenario.n + row)
    grandchildren = [1 << (base + g) for g in range(plan.grandchildren)]
    state.grandchild_edges[(a, row)] = grandchildren
    val = reduce(int.__xor__, grandchildren, state.edges[a][row])
    state.ready.append(Entry(ACK, val, "ack", a, row))
    state.ready += [Entry(ACK, g, "grandchild", a, row, k) for k, g in enumerate(grandchildren)]
    state.trace.append(f"bolt acks attempt {a}'s row {row} ({plan.grandchildren} grandchildren)")


def _append(state: Run, record: Record, what: str) -> None:
    entries = ", ".join(f"{e.kind.name}({e.val:#x})" for e in record.entries)
    state.trace.append(f"#{len(state.log)} {what}: {entries}")
    state.log.append(record)


def _decided(state: Run, decision: Decision | None, what: str) -> None:
    if decision is None:
        dropped = what.startswith("acker expires")
        state.trace.append(f"{what}: dropped (no INIT yet)" if dropped else f"{what}: pending")
        return
    state.decisions.append(decision)
    state.trace.append(f"{what}: {decision.kind.name}, tree {decision.tree}")
