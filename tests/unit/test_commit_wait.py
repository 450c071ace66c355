"""``commit_wait``: a due commit with records in flight waits for later rounds, goes on the first
round with nothing in flight, and goes anyway (with a flush) after one more interval."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.kafka.commit_wait import commit_wait


def test_nothing_in_flight_commits_at_once():
    assert commit_wait(None, 5.0, in_flight=False, interval_ms=1000) == (True, None)


def test_in_flight_waits_from_its_first_round_for_one_interval():
    go, since = commit_wait(None, 10.0, in_flight=True, interval_ms=1000)
    assert (go, since) == (False, 10.0)
    go, since = commit_wait(since, 10.999, in_flight=True, interval_ms=1000)
    assert (go, since) == (False, 10.0)  # the wait is timed from its first round, not the last
    assert commit_wait(since, 11.0, in_flight=True, interval_ms=1000) == (True, None)  # flushed then


def test_a_round_with_nothing_in_flight_ends_the_wait():
    _, since = commit_wait(None, 10.0, in_flight=True, interval_ms=1000)
    assert commit_wait(since, 10.2, in_flight=False, interval_ms=1000) == (True, None)
    # the next wait starts afresh
    assert commit_wait(None, 10.5, in_flight=True, interval_ms=1000) == (False, 10.5)


def _reference(rounds, interval_ms):
    """The inline code the bolt and the acker had before the helper (their ``_commit_waits_since``)."""
    since, decisions = None, []
    for now, force, in_flight in rounds:
        if not force and in_flight:
            if since is None:
                since = now
            if (now - since) * 1000 < interval_ms:
                decisions.append(False)
                continue
        since = None
        decisions.append(True)
    return decisions


@given(
    rounds=st.lists(st.tuples(st.floats(0, 5, allow_nan=False), st.booleans(), st.booleans()), max_size=40).map(
        lambda rs: [(sum(r[0] for r in rs[: i + 1]), r[1], r[2]) for i, r in enumerate(rs)]
    ),
    interval_ms=st.sampled_from([0, 1, 250, 1000, 3000]),
)
def test_same_decisions_as_the_inline_code_it_replaced(rounds, interval_ms):
    since, decisions = None, []
    for now, force, in_flight in rounds:
        go, since = commit_wait(since, now, in_flight=not force and in_flight, interval_ms=interval_ms)
        decisions.append(go)
    assert decisions == _reference(rounds, interval_ms)
