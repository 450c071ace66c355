"""What a bolt's snapshot says about its handler calls in flight, and how lag is summed."""

from reliable_kafka.ops.snapshot import ComponentView, _calls, _lag, _partition_lag


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


def test_a_partition_without_commit_counts_from_the_log_start_where_the_consumer_begins_there():
    # the view adds "start" only for a consumer that begins at the log's start (auto.offset.reset
    # earliest): records read but not committed are not done, as `reliable-kafka lag` counts them
    read_not_done = {"topic": "t", "partition": 1, "position": 150, "committed": None, "start": 0, "end": 200}
    not_fetched = {"topic": "t", "partition": 2, "position": None, "committed": None, "start": 10, "end": 200}
    assert _partition_lag(read_not_done) == 200
    assert _partition_lag(not_fetched) == 190
    assert _lag([read_not_done, not_fetched]) == 200 + 190
    assert _lag([read_not_done, not_fetched], "position") == 50 + 190
    # a consumer that begins at the end (latest) has no "start": its position is where it began
    assert _partition_lag({"topic": "t", "partition": 0, "position": 150, "committed": None, "end": 200}) == 50
    assert _partition_lag({"topic": "t", "partition": 0, "position": None, "committed": None, "end": 200}) is None


class _Worker:
    def __init__(self, kafka_config):
        self.kafka_config = kafka_config


def test_the_log_start_counts_only_for_a_consumer_that_begins_there():
    assert ComponentView(_Worker({})).reads_from_start
    assert ComponentView(_Worker({"auto.offset.reset": "EARLIEST"})).reads_from_start
    assert not ComponentView(_Worker({"auto.offset.reset": "latest"})).reads_from_start
