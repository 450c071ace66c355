"""What a bolt's snapshot says about its handler calls in flight, and how lag is summed."""

from reliable_kafka.ops.snapshot import _calls, _lag


class ParallelBolt:
    parallelism = 4

    def calls_in_flight(self) -> int:
        return 2

    def oldest_call_age(self, now_monotonic: float) -> float | None:
        return 75.5


class IdleParallelBolt(ParallelBolt):
    def oldest_call_age(self, now_monotonic: float) -> float | None:
        return None


def test_calls_in_flight_are_reported_where_the_bolt_tells_them_and_absent_otherwise():
    assert _calls(ParallelBolt()) == {"calls_in_flight": 2, "oldest_call_s": 75.5, "parallelism": 4}
    assert _calls(IdleParallelBolt())["oldest_call_s"] is None
    assert _calls(object()) == {}


def test_lag_counts_from_the_committed_offset_or_the_position_when_there_is_none():
    partitions = [
        {"topic": "t", "partition": 0, "position": 90, "committed": 80, "end": 100},
        {"topic": "t", "partition": 1, "position": 5, "committed": None, "end": 7},
    ]
    assert _lag(partitions) == 20 + 2
    assert _lag(partitions, "position") == 10 + 2
    assert _lag([{"topic": "t", "partition": 0, "position": None, "end": None}]) is None
    assert _lag([]) == 0
