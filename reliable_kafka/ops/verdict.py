"""OK / WARN / STALL / DOWN / STOPPED, judged over a window of samples (Burrow's rules, nothing to tune).

A window is the last few samples a component took of itself (about a minute): each sample has a
``progress`` count that only grows when work gets done (trees settled, tuples handled, ack records
folded, a commit point), a ``backlog`` (work waiting: lag, trees in flight; None when unknown),
the records it settled and, of those, the ones it gave up on (dead-lettered by a spout, failed by
a bolt), both counted since it started, and the age of its oldest handler call still running
(None: not reported). The rules, in order:

1. STOPPED: the component said it stopped (a clean shutdown publishes a last snapshot saying so);
2. DOWN: its last sample is older than three of its own publishing intervals plus a fixed grace
   for delivery (it was killed, or it hangs so hard that it cannot even report);
3. STALL if a handler call has been running for longer than the window;
4. fewer than ``MIN_SAMPLES`` samples: OK (not enough evidence to blame anything);
5. STALL if progress did not move across the window while every sample had a backlog;
6. WARN if it gave up on any record it settled in the window: progress made by dead-lettering or
   failing is not health (the reason gives the share);
7. OK if the backlog was zero in any sample of the window (it caught up at least once);
8. WARN if the backlog grew at every step of the window (progress too slow to keep up);
9. OK otherwise.

:func:`judge_replaced` softens rule 2 for a member whose work live members took over, and
:func:`roll_up` judges a whole topology from its rows. Pure: plain data in, a verdict and its
reason out; time is passed in.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Verdict",
    "Sample",
    "Judgement",
    "judge_window",
    "judge_component",
    "judge_replaced",
    "roll_up",
    "worst",
    "STALE_INTERVALS",
    "STALE_GRACE_S",
    "MIN_SAMPLES",
]

STALE_INTERVALS = 3  # a component silent for three of its own intervals is DOWN...
STALE_GRACE_S = 5.0  # ...plus the time a snapshot may take to be produced and read on a busy host
MIN_SAMPLES = 3  # two steps at least before STALL or WARN


class Verdict(str, enum.Enum):
    OK = "OK"
    WARN = "WARN"
    STALL = "STALL"
    DOWN = "DOWN"
    STOPPED = "STOPPED"  # stopped on purpose: shown, but left out of the topology's verdict


_RANK = {Verdict.STOPPED: -1, Verdict.OK: 0, Verdict.WARN: 1, Verdict.STALL: 2, Verdict.DOWN: 3}


@dataclass(frozen=True)
class Sample:
    t: float  # seconds (wall clock of the component)
    progress: int  # only grows while work gets done
    backlog: int | None  # work waiting; None: unknown
    settled: int = 0  # records (trees, tuples) given a final result since the start
    given_up: int = 0  # of ``settled``: dead-lettered (spouts) or failed (bolts)
    oldest_call_s: float | None = None  # age of the oldest handler call in flight; None: none or unknown


GAVE_UP = "gave up on"  # how a reason says it: ``judge_window(..., gave_up="dead-lettered")``


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str


def judge_window(samples: Sequence[Sample], *, window_s: float | None = None, gave_up: str = GAVE_UP) -> Judgement:
    """Rules 3 to 9 over ``samples`` (oldest first); ``window_s``: how long the window is meant to
    be (default: the samples' span), the age past which a running call is stuck; ``gave_up``: the
    words for rule 6 (``"dead-lettered"``, ``"failed"``)."""
    span = samples[-1].t - samples[0].t if samples else 0.0
    window = span if window_s is None else window_s
    oldest = samples[-1].oldest_call_s if samples else None
    if oldest is not None and window > 0 and oldest > window:
        return Judgement(Verdict.STALL, f"a handler call has been running for {oldest:.0f} s")
    if len(samples) < MIN_SAMPLES:
        return Judgement(Verdict.OK, f"{len(samples)} samples so far; judging needs {MIN_SAMPLES}")
    backlogs = [s.backlog for s in samples]
    known = [b for b in backlogs if b is not None]
    waiting = len(known) == len(backlogs) and all(b > 0 for b in known)
    if waiting and samples[-1].progress <= samples[0].progress:
        return Judgement(Verdict.STALL, f"no progress for {span:.0f} s with {known[-1]} waiting")
    settled = samples[-1].settled - samples[0].settled
    given_up = samples[-1].given_up - samples[0].given_up
    if given_up > 0 and settled > 0:
        return Judgement(
            Verdict.WARN,
            f"{gave_up} {given_up} of {settled} settled in {span:.0f} s ({100 * given_up / settled:.0f}%)",
        )
    if any(b == 0 for b in backlogs):
        return Judgement(Verdict.OK, "caught up within the window")
    if len(known) < len(backlogs):
        return Judgement(Verdict.OK, "backlog unknown; progress only")
    if all(later > earlier for earlier, later in zip(known, known[1:])):
        return Judgement(Verdict.WARN, f"backlog grew at every sample for {span:.0f} s ({known[0]} -> {known[-1]})")
    return Judgement(Verdict.OK, "making progress")


def judge_component(
    samples: Sequence[Sample],
    *,
    now: float,
    interval_s: float,
    stopped: bool,
    window_s: float | None = None,
    gave_up: str = GAVE_UP,
) -> Judgement:
    """Rules 1 and 2, then :func:`judge_window`."""
    if stopped:
        return Judgement(Verdict.STOPPED, "stopped cleanly")
    if not samples:
        return Judgement(Verdict.DOWN, "no samples")
    silent = now - samples[-1].t
    if silent > STALE_INTERVALS * interval_s + STALE_GRACE_S:
        return Judgement(Verdict.DOWN, f"silent for {silent:.0f} s (reports every {interval_s:g} s)")
    return judge_window(samples, window_s=window_s, gave_up=gave_up)


def judge_replaced(judgement: Judgement, taken_over_by: Sequence[str]) -> Judgement:
    """A silent (DOWN) member whose partitions live members of its group now own is a warning,
    not an outage: its work goes on (a killed worker replaced, or scaled down)."""
    if judgement.verdict is not Verdict.DOWN or not taken_over_by:
        return judgement
    return Judgement(Verdict.WARN, f"{judgement.reason}; its partitions moved to {', '.join(sorted(taken_over_by))}")


def roll_up(rows: Sequence[tuple[str, Judgement]]) -> Judgement:
    """The topology's verdict from its (name, judgement) rows: the worst of those not STOPPED,
    naming the rows that make it (STOPPED when every row is; OK for none)."""
    counted = [(name, j) for name, j in rows if j.verdict is not Verdict.STOPPED]
    if not counted:
        return Judgement(Verdict.STOPPED, "every component stopped") if rows else Judgement(Verdict.OK, "")
    verdict = worst([j.verdict for _, j in counted])
    if verdict is Verdict.OK:
        return Judgement(Verdict.OK, "")
    blamed = [f"{name} {j.verdict.value}: {j.reason}" for name, j in counted if j.verdict is verdict]
    return Judgement(verdict, "; ".join(blamed))


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The most severe verdict (OK for none)."""
    return max(verdicts, key=_RANK.__getitem__, default=Verdict.OK)
