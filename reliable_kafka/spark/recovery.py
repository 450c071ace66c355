"""Where a Spark spout starts: its consumer group's commit, Spark's checkpoint, and what lies between.

Only the group's commit says what is done; Spark's checkpoint says where Spark resumes reading.
Records between the two that the commit metadata does not list as done were handed to an earlier
incarnation and may not have completed: the spout processes them again first (docs/design.md section 7.1, Restart).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from reliable_kafka.errors import WaitTimeoutError
from reliable_kafka.spark.checkpoint import ResumePoint
from reliable_kafka.spark.job import offsets_json
from reliable_kafka.spout.roots import RootOwner

__all__ = ["committed_offsets", "plan_recovery", "RETRIABLE_GROUP_ERRORS"]

log = logging.getLogger(__name__)

TP = tuple[str, int]

# A fresh broker creates __consumer_offsets on the first group request and answers with these until
# its coordinator is loaded; so does a broker whose coordinator moved. Waiting is the fix.
RETRIABLE_GROUP_ERRORS = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


def committed_offsets(
    consumer: Consumer,
    partitions: list[TP],
    *,
    component: str,
    group_id: str,
    timeout: float = 120.0,
    request_timeout: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TopicPartition]:
    """``consumer.committed`` for ``partitions``, retried on the transient errors of a group
    coordinator that is not ready (:data:`RETRIABLE_GROUP_ERRORS`, or any error Kafka marks
    retriable) for up to ``timeout`` seconds; then a :class:`WaitTimeoutError` that says what to check.
    Any other error is raised at once."""
    deadline = time.monotonic() + timeout
    delay = 0.1
    while True:
        remaining = deadline - time.monotonic()
        try:
            return consumer.committed(
                [TopicPartition(t, p) for t, p in partitions], timeout=max(0.1, min(request_timeout, remaining))
            )
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or not (error.code() in RETRIABLE_GROUP_ERRORS or error.retriable()):
                raise
            if time.monotonic() + delay > deadline:
                raise WaitTimeoutError(
                    f"{component}: the committed offsets of group {group_id!r} could not be read within "
                    f"{timeout:.0f} s; the group coordinator kept answering {error.name()} ({error.str()}). "
                    f"Check that the brokers are up and __consumer_offsets is online, then start the job again"
                ) from exc
            log.info("%s: reading group %s's commit: %s; retrying", component, group_id, error.name())
            sleep(delay)
            delay = min(2 * delay, 2.0)


def plan_recovery(
    owner: RootOwner, committed: list[TopicPartition], resume: ResumePoint, partitions: list[TP]
) -> tuple[dict[TP, tuple[int, int]], str | None]:
    """Track every partition from the group's commit (or, never committed, from where the query
    began); returns (the ranges to process again: group commit .. Spark's resume point, and
    Spark's ``startingOffsets`` for a new checkpoint, None: earliest)."""
    ranges: dict[TP, tuple[int, int]] = {}
    starting: dict[TP, int] = {}
    for tp in committed:
        key = (tp.topic, tp.partition)
        start = tp.offset if tp.offset >= 0 else None
        if start is not None:
            owner.restore(key, start, tp.metadata)
        elif resume.exists:
            start = resume.initial.get(key)  # never committed: from where the query began
            if start is not None:
                owner.restore(key, start, None, recorded=False)
        if start is None:
            continue
        starting[key] = start
        end = resume.offsets.get(key) if resume.exists else None
        if end is not None and end > start:
            ranges[key] = (start, end)
    starting_json = None
    if not resume.exists and starting:
        starting_json = offsets_json({tp: starting.get(tp, -2) for tp in partitions})  # -2: earliest
    return ranges, starting_json
