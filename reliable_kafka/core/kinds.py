"""Event and outcome kinds: small integers, the same on the wire and in the acker's arrays."""

from __future__ import annotations

import enum

__all__ = ["EventKind", "OutcomeKind"]


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
