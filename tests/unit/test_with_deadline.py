"""with_deadline: the guard around client calls that may ignore their own timeout."""

import threading

import pytest

from reliable_kafka.kafka.deadline import StuckCall, with_deadline


def test_returns_the_value_and_raises_the_error_of_the_call():
    assert with_deadline(lambda a, b: a + b, 2, 3, seconds=5) == 5
    with pytest.raises(KeyError):
        with_deadline({}.__getitem__, "missing", seconds=5)


def test_a_call_past_its_deadline_is_reported_stuck_and_left_behind():
    release = threading.Event()
    with pytest.raises(StuckCall, match="did not return within"):
        with_deadline(release.wait, 30, seconds=0.2)
    release.set()
