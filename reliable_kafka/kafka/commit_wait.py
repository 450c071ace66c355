"""A due commit that waits for its records' delivery on later rounds instead of blocking in a flush.

A bolt commits its inputs, and an acker its ack partitions, only once the records those offsets
depend on (outputs and acks; outcomes) are delivered. Flushing for that on every due commit costs
the loop a round trip each interval, for every record behind it. So a due commit with records in
flight is tried again on later rounds, and goes on the first one with nothing in flight (it then
needs no flush); a producer that never drains is flushed and committed after one more interval.
"""

from __future__ import annotations

__all__ = ["commit_wait"]


def commit_wait(
    waiting_since: float | None, now: float, *, in_flight: bool, interval_ms: float
) -> tuple[bool, float | None]:
    """Whether a due commit goes now, and the new ``waiting_since`` (the caller keeps it, None at first).

    ``in_flight``: records the commit depends on are not delivered yet (pass False for a forced
    commit: it goes now). Returns ``(True, None)``: commit now (flushing first, as always); ``(False,
    since)``: try again on a later round, ``since`` being when this wait began (``now`` on its first
    round). A wait of one ``interval_ms`` or more ends it: the commit goes, flushing what is left.
    """
    if in_flight:
        if waiting_since is None:
            waiting_since = now
        if (now - waiting_since) * 1000 < interval_ms:
            return False, waiting_since
    return True, None
