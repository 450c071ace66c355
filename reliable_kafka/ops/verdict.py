"""OK / WARN / STALL / DOWN, judged over a window of samples (Burrow's rules, nothing to tune).

A window is the last few samples a component took of itself (about a minute): each sample has a
``progress`` count that only grows when work gets done (trees settled, tuples handled, ack records
folded, a commit point) and a ``backlog`` (work waiting: lag, trees in flight; None when unknown).
The rules, in order, as Burrow applies them to a consumer group's commits and lag:

1. DOWN: the component said it stopped, or its last sample is older than three of its own
   publishing intervals plus a fixed grace for delivery (it was killed, or it hangs so hard that
   it cannot even report);
2. fewer than ``MIN_SAMPLES`` samples: OK (not enough evidence to blame anything);
3. OK if the backlog was zero in any sample of the window (it caught up at least once);
4. STALL if progress did not move across the window while every sample had a backlog;
5. WARN if the backlog grew at every step of the window (progress too slow to keep up);
6. OK otherwise.

Pure: plain data in, a verdict and its reason out; time is passed in.
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


_RANK = {Verdict.OK: 0, Verdict.WARN: 1, Verdict.STALL: 2, Verdict.DOWN: 3}


@dataclass(frozen=True)
class Sample:
    t: float  # seconds (wall clock of the component)
    progress: int  # only grows while work gets done
    backlog: int | None  # work waiting; None: unknown


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str


def judge_window(samples: Sequence[Sample]) -> Judgement:
    """Rules 2 to 6 over ``samples`` (oldest first)."""
    if len(samples) < MIN_SAMPLES:
        return Judgement(Verdict.OK, f"{len(samples)} samples so far; judging needs {MIN_SAMPLES}")
    span = samples[-1].t - samples[0].t
    backlogs = [s.backlog for s in samples]
    if any(b == 0 for b in backlogs):
        return Judgement(Verdict.OK, "caught up within the window")
    known = [b for b in backlogs if b is not None]
    if len(known) < len(backlogs):
        return Judgement(Verdict.OK, "backlog unknown; progress only")
    if samples[-1].progress <= samples[0].progress:
        return Judgement(Verdict.STALL, f"no progress for {span:.0f} s with {known[-1]} waiting")
    if all(later > earlier for earlier, later in zip(known, known[1:])):
        return Judgement(Verdict.WARN, f"backlog grew at every sample for {span:.0f} s ({known[0]} -> {known[-1]})")
    return Judgement(Verdict.OK, "making progress")


def judge_component(samples: Sequence[Sample], *, now: float, interval_s: float, stopped: bool) -> Judgement:
    """Rule 1, then :func:`judge_window`."""
    if stopped:
        return Judgement(Verdict.DOWN, "stopped")
    if not samples:
        return Judgement(Verdict.DOWN, "no samples")
    silent = now - samples[-1].t
    if silent > STALE_INTERVALS * interval_s + STALE_GRACE_S:
        return Judgement(Verdict.DOWN, f"silent for {silent:.0f} s (reports every {interval_s:g} s)")
    return judge_window(samples)


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The most severe verdict (OK for none)."""
    return max(verdicts, key=_RANK.__getitem__, default=Verdict.OK)
