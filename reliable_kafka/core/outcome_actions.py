"""What the in-flight tracker tells its spout to do: an outcome's action, or a redelivery."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["TopicPartition", "ActionKind", "OutcomeAction", "Redelivery"]

TopicPartition = tuple[str, int]
"""A source partition: ``(topic, partition)``."""


class ActionKind(enum.Enum):
    """What the shell must do after an outcome."""

    DONE = "DONE"  # the offset is done; nothing to do
    REDELIVER = "REDELIVER"  # due_redeliveries() will hand it out after the backoff
    DEAD_LETTER = "DEAD_LETTER"  # write it to the DLQ, then call dead_lettered(tp, offset)


@dataclass(frozen=True, slots=True)
class OutcomeAction:
    """The tracker's decision about one root's outcome.

    ``attempt`` is the attempt the outcome was about (1 = first delivery), so for DEAD_LETTER it is
    the number of attempts made. ``due_ms`` is set for REDELIVER: when the redelivery becomes due.
    """

    kind: ActionKind
    tp: TopicPartition
    offset: int
    attempt: int
    reason: str
    due_ms: int | None = None
    # the root the outcome was about, to look up why it failed (reliable_kafka.ops.failures);
    # informational, so not part of equality
    root: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Redelivery:
    """A record to re-read and emit again, with a new root, as attempt ``attempt`` (>= 2)."""

    tp: TopicPartition
    offset: int
    attempt: int
    reason: str
