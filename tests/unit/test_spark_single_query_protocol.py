"""Why the single-query Spark spout's ordering is safe: a property test of its protocol, pure logic.

The model (``spark_single_query_model``) plays one source record's life under any interleaving:
task attempts that die after writing any subset of their records, retries, speculative and zombie
attempts writing after the commit, the acker folding r's ack partition with the real rule and
lagging, ownerless states dropped and owned ones timing out at any point, a downstream bolt that
acks (with grandchildren) or fails each written row in any order, even before any INIT, and a
driver that keeps the first outcome it hears, possibly before it registered r.

Safety, the strongest statement the model bears out (``violations``): whenever the driver accepts
COMPLETED for r, the tree the acker decided, i.e. the ack records it folded into that state since the
state began,

* holds the ack record (the INIT) of at least one task attempt, unless n = 0, and then it is the
  driver's INIT(r, 0), which lands only after the batch's commit; and
* for EVERY attempt with an entry in that tree: the attempt wrote all n rows (none was ``rk_fail``)
  and each was acked downstream, with all of its grandchildren, by entries folded into that tree.

So no COMPLETED is accepted while an output of any attempt that contributed an INIT to the tree is
unacked, nor while a row of theirs is missing; with n > 0, one attempt wrote and saw acked all of its
rows first; and r never completes through an attempt that had an ``rk_fail`` row (so never when
every attempt had one). The attempt need not be the one Spark committed, nor the COMPLETED come
after the commit: a dead or speculative attempt whose rows all reached Kafka and were all processed
completes r too (at-least-once: its rows exist downstream).

Liveness: when every attempt wrote all of its records or none, and nothing fails or expires, the
driver accepts COMPLETED for r once everything is written, acked, folded and heard.

What safety rests on, each shown by a mutant below that breaks it: a per-attempt random edge per
row; one INIT per attempt, after its rows; the driver's INIT(r, 0) only after the commit, and the
commit only once the succeeding attempt's ack record is durable in Kafka (the sink flushes before a
task commits; acks=all keeps the record through a leader change); no duplicated ack record (an
idempotent producer); an owner named by the tasks' entry (an INIT, not an ACK); and a driver that
keeps the first outcome, holds outcomes heard before r's registration, and hears them in the
acker's order. Against an ``rk_fail`` row completing r there are two guards, FAIL(r) in the INIT's
record and X over every edge drawn (the ``rk_fail`` rows' too): either suffices; without both, r
completes. Ownerless expiry never breaks safety, only liveness (the tree times out, redelivered).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from spark_single_query_model import (
    ACK,
    COMPLETED,
    ROOT,
    Attempt,
    Decision,
    Downstream,
    Run,
    Scenario,
    Variant,
    describe,
    run,
    violations,
)

from reliable_kafka.core.acker_table import AckerTable
from reliable_kafka.core.kinds import OutcomeKind


@st.composite
def scenarios(draw: st.DrawFn, *, clean: bool = False) -> Scenario:
    """Any scenario; ``clean``: every attempt writes all of its records or none, and nothing
    fails, expires or times out."""
    n = draw(st.sampled_from([0, 1, 2, 3, 2, 3]))
    count = draw(st.integers(1, 3))
    failures = not clean and draw(st.booleans())  # rk_fail rows and failing bolts
    attempts = []
    for _ in range(count):
        if clean:
            lands = (draw(st.booleans()),) * (2 * n + 1)
            attempts.append(Attempt((False,) * n, lands))
            continue
        rk_fail = tuple(failures and draw(st.integers(0, 3)) == 0 for _ in range(n))
        fate = draw(st.sampled_from(["all", "none", "some"]))  # a dead attempt's records in Kafka
        lands = tuple(fate == "all" or (fate == "some" and draw(st.booleans())) for _ in range(2 * n + 1))
        attempts.append(Attempt(rk_fail, lands, duplicate=draw(st.booleans())))
    downstream = tuple(
        tuple(Downstream(draw(st.integers(0, 2)), fails=failures and draw(st.integers(0, 5)) == 0) for _ in range(n))
        for _ in range(count)
    )
    return Scenario(
        n=n,
        attempts=tuple(attempts),
        succeeding=draw(st.integers(0, count - 1)),
        downstream=downstream,
        expiry=not clean and draw(st.booleans()),
        timeouts=not clean and draw(st.booleans()),
        choices=tuple(draw(st.lists(st.integers(0, 63), max_size=150))),
        seed=draw(st.integers(0, 2**32)),
    )


# The design, and the design with either of its two guards against an rk_fail row completing r
# removed: each guard alone suffices (both removed is a mutant below).
SAFE = {
    "as designed": Variant(),
    "FAIL(r) in a record of its own": Variant(fail_with_init=False),
    "X over the written rows only": Variant(x_covers_failed_rows=False),
}


@pytest.mark.parametrize("variant", SAFE.values(), ids=SAFE.keys())
@settings(max_examples=400, deadline=None)
@given(scenario=scenarios())
def test_no_completed_outcome_is_accepted_before_an_attempts_rows_are_all_acked(
    variant: Variant, scenario: Scenario
) -> None:
    state = run(scenario, variant)
    assert violations(state) == [], describe(state)


@settings(max_examples=300, deadline=None)
@given(scenarios(clean=True))
def test_every_record_completes_when_nothing_fails(scenario: Scenario) -> None:
    state = run(scenario)
    assert [d.kind for d in state.accepted] == [COMPLETED], describe(state)
    assert violations(state) == []


MUTANTS = {
    "deterministic edges (a retry's INIT cancels the first's)": Variant(random_edges=False),
    "one INIT per row instead of one after the rows": Variant(init_per_row=True),
    "the driver's INIT(r, 0) before the commit": Variant(driver_init_after_commit=False),
    "the tasks' entry as an ACK (no owner)": Variant(task_entry=ACK),
    "the driver keeps the last outcome": Variant(driver_keeps_first=False),
    "outcomes heard out of order": Variant(outcomes_in_order=False),
    "an ack record duplicated (producer not idempotent)": Variant(idempotent_ack_record=False),
    "the commit before the ack record is durable (acks=1)": Variant(ack_record_durable=False),
    "the driver loses outcomes heard before it registered r": Variant(driver_holds_early_outcomes=False),
    "FAIL(r) apart from the INIT and X over the written rows only": Variant(
        fail_with_init=False, x_covers_failed_rows=False
    ),
}
# Only whether one exists matters here (not shrinking it); derandomized: the same search every run.
FIND = settings(max_examples=3000, deadline=None, database=None, derandomize=True, phases=[Phase.generate])


@pytest.mark.parametrize("variant", MUTANTS.values(), ids=MUTANTS.keys())
def test_the_safety_check_catches_the_mutant(variant: Variant) -> None:
    # n > 0: a row is missing or unacked (with n = 0 an early INIT(r, 0) completes r too soon, harmlessly)
    counterexample = find(scenarios(), lambda s: s.n > 0 and bool(violations(run(s, variant))), settings=FIND)
    state = run(counterexample, variant)
    assert violations(state), describe(state)
    assert violations(run(counterexample)) == []  # the protocol as designed survives the same steps


def test_the_liveness_check_catches_a_driver_that_sends_no_init() -> None:
    """Without the driver's INIT(r, 0), a record the transform gave no rows never completes."""
    variant = Variant(driver_sends_init=False)
    counterexample = find(
        scenarios(clean=True), lambda s: [d.kind for d in run(s, variant).accepted] != [COMPLETED], settings=FIND
    )
    assert counterexample.n == 0


def _completed_first(state: Run) -> Decision | None:
    kept = state.accepted[0] if state.accepted else None
    return kept if kept is not None and kept.kind == COMPLETED else None


def _attempts_in(state: Run, decision: Decision) -> set[int]:
    return {e.attempt for i in decision.tree for e in state.log[i].entries if e.source == "task"}


def _by_another_attempt(s: Scenario) -> bool:
    state = run(s)
    kept = _completed_first(state)
    return kept is not None and s.n > 0 and s.succeeding not in _attempts_in(state, kept)


def _before_the_commit(s: Scenario) -> bool:
    state = run(s)
    kept = _completed_first(state)
    return kept is not None and s.n > 0 and (state.committed_at is None or max(kept.tree) < state.committed_at)


def _a_late_driver_init_completes_a_new_tree(s: Scenario) -> bool:
    state = run(s)
    return s.n > 0 and any(d.kind == COMPLETED and not _attempts_in(state, d) for d in state.decisions)


REACHED = {
    "COMPLETED by a dead attempt whose rows all reached Kafka": _by_another_attempt,
    "COMPLETED before the commit": _before_the_commit,
    "the driver's INIT(r, 0) after an unheard decision starts a new tree": _a_late_driver_init_completes_a_new_tree,
}


@pytest.mark.parametrize("case", REACHED.values(), ids=REACHED.keys())
def test_the_interleavings_that_matter_are_reached_and_safe(case: Callable[[Scenario], bool]) -> None:
    """The safety property is not vacuous: the search reaches the cases where the argument is
    subtle, and they pass (the late INIT(r, 0)'s COMPLETED comes second: the driver ignores it)."""
    found = find(scenarios(), case, settings=FIND)
    assert violations(run(found)) == []


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_models_acker_decides_as_the_acker_table(scenario: Scenario) -> None:
    """The model folds with the rule alone; the real table (store, buckets, expiry) fed the same
    ack log and the same expiry points decides the same, and drops as many ownerless states."""
    state = run(scenario)
    table = AckerTable()
    clock, decided = 0, []
    for event, index in state.acker_events:
        if event == "fold":
            entries = state.log[index].entries
            outcomes = table.fold(
                np.array([e.kind for e in entries], np.uint8),
                np.full(len(entries), ROOT, np.int64),
                np.array([e.val for e in entries], np.int64),
                sender=state.log[index].sender,
                event_time_ms=clock,
                offset=index,
            )
        else:  # past every pending root's deadline: the table expires them all
            clock += table.message_timeout_ms + table.bucket_width_ms
            outcomes = table.advance(clock)
        decided += [OutcomeKind(int(k)) for k in outcomes.kinds]
    assert decided == [d.kind for d in state.decisions], describe(state)
    assert table.expired_ownerless == state.acker.dropped_ownerless
