"""Event and outcome kinds: small integers, the same on the wire and in the acker's arrays."""

from __future__ import annotations

import enum

__all__ = ["EventKind", "OutcomeKind", "INIT", "ACK", "COMPLETED", "FAILED", "RESET_TIMEOUT"]


class EventKind(enum.IntEnum):
    """Kinds of ack-topic entries (one byte each in the packed ``kinds`` column)."""

    INIT = 0  # spout emitted root ``root``; ``val`` = XOR of the edges it sent
    ACK = 1  # a tuple of ``root`` was acked; ``val`` = its id XOR its children's edges
    FAIL = 2  # a tuple of ``root`` failed; ``val`` unused (0)
    RESET_TIMEOUT = 3  # push the deadline of ``root``; ``val`` unused (0)


class OutcomeKind(enum.IntEnum):
    """What an acker tells a root's owner; names match the Avro enum symbols."""

    COMPLETED = 0
    FAILED = 1
    TIMED_OUT = 2
    RESET_TIMEOUT = 3  # not a decision: a bolt pushed the deadline, push the backstop too


# HOT_KINDS: the members the per-root and per-tuple loops read (spout/shell.py, spout/forward.py,
# spout/roots.py, bolt/collector.py, bolt/ack_packing.py, core/tracker.py) as module globals: an
# enum member read through its class costs about 0.17 us more on Python 3.11, once or more per
# root or tuple (bench/bench_bolt_overhead.py and bench/bench_spout_phases.py measure those loops).
INIT = EventKind.INIT
ACK = EventKind.ACK
COMPLETED = OutcomeKind.COMPLETED
FAILED = OutcomeKind.FAILED
RESET_TIMEOUT = OutcomeKind.RESET_TIMEOUT
