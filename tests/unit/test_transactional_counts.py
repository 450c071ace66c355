"""A transactional spout counts a round's work (records read and replayed, tuples emitted, handler
errors, outcomes taken) once the round's transaction commits: an aborted round's work is done again
by a later round. Its counters, in status and metrics too, only go up (in-memory Kafka)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliable_kafka import Connection, Loop, Tracking
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.ops.metrics import ComponentCollector
from reliable_kafka.ops.reporter import ComponentReporter
from reliable_kafka.ops.snapshot import view_of
from reliable_kafka.spout import Spout, TransactionalSpout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink, step_until

ON = {"topology": "tx", "loop": Loop(commit_interval_ms=0)}
LINES = [b"a", b"b", b"c", b"d"]


class Run:
    """A source of ``lines``, a transactional spout forwarding each to ``sentences`` (or running
    ``handler``), a bolt that fails the first sight of each value in ``fail_downstream``, an acker.

    ``aborts(spout)`` is asked as each round begins its transaction: True makes that round's commit
    fail, so the spout aborts it. The spout's counters, status counters and Prometheus counter
    samples are recorded in ``samples`` after every round of the three components, and inside the
    spout's round as its transaction begins and as it commits (where a scrape may land too).
    """

    def __init__(
        self,
        lines: list[bytes],
        *,
        aborts: Callable[[TransactionalSpout], bool],
        handler=None,
        fail_downstream: frozenset[bytes] = frozenset(),
    ) -> None:
        self.lines = lines
        kafka = self.kafka = MemoryKafka(clock=ManualClock())
        kafka.create_topic("sentences", 1)
        ListSource(kafka, "lines", lines)
        seen: list[bytes] = []

        def fail_first_sight(tuple_, collector) -> None:
            seen.append(tuple_.value)
            if tuple_.value in fail_downstream and seen.count(tuple_.value) == 1:
                raise ValueError(f"{tuple_.value!r} fails its first sight downstream")

        self.acker = AckerWorker(**ON, connection=Connection("memory", clients=kafka))
        self.sink = BasicBolt(
            **ON,
            connection=Connection("memory", clients=kafka),
            source_topics="sentences",
            group_id="tx.sink",
            handler=fail_first_sight,
        )
        spout = self.spout = Spout(
            **ON,
            connection=Connection("memory", clients=kafka),
            transactional=True,
            tracking=Tracking(backoff=Backoff(initial_ms=0)),
            source_topics="lines",
            group_id="tx.spout",
            **({"emit_to": "sentences"} if handler is None else {"handler": handler}),
            name="spout-1",
        )
        for component in (self.acker, self.sink, spout):
            component.start()
        self.collector = ComponentCollector(ComponentReporter(view_of(spout), publish=False))
        transactions = spout._transactions
        self.aborted = 0
        begin, commit = transactions.begin, transactions.commit

        def begin_then_maybe_abort() -> None:
            begin()
            self.sample()
            if aborts(spout):
                kafka.fail_next("commit_transaction")  # this round's commit fails: the spout aborts it
                self.aborted += 1

        def sample_then_commit(*args) -> None:
            self.sample()
            commit(*args)

        transactions.begin = begin_then_maybe_abort  # type: ignore[method-assign]
        transactions.commit = sample_then_commit  # type: ignore[method-assign]
        self.samples: list[dict[str, float]] = []

    def until_committed(self) -> Run:
        def all_committed() -> bool:
            return (self.kafka.committed("tx.spout", "lines", 0) or (None,))[0] == len(self.lines)

        step_until(all_committed, self.spout, self.sink, self.acker, between=lambda _: self.sample())
        assert self.spout._transactions.aborted == self.aborted
        return self

    def sample(self) -> None:
        """Every counter a user sees: the spout's stats, its status counters and its metrics."""
        spout = self.spout
        counters = {f"stats.{k}": v for k, v in vars(spout.stats).items() if type(v) is int}
        counters.update({f"status.{k}": v for k, v in view_of(spout).sample()["counters"].items()})
        for family in self.collector.collect():
            if family.type in ("counter", "histogram"):
                for s in family.samples:
                    if not s.name.endswith("_created"):
                        counters[f"{s.name}{sorted(s.labels.items())}"] = s.value
        self.samples.append(counters)

    def assert_counters_only_went_up(self) -> None:
        for before, after in zip(self.samples, self.samples[1:]):
            down = {k: (before[k], after.get(k)) for k in before if after.get(k, before[k]) < before[k]}
            assert not down, f"counters stepped down (a reset to rate()): {down}"


def _aborting_first(predicate: Callable[[TransactionalSpout], bool]) -> Callable[[TransactionalSpout], bool]:
    """Abort the first round for which ``predicate`` holds, then none."""
    done: list[bool] = []

    def aborts(spout: TransactionalSpout) -> bool:
        if done or not predicate(spout):
            return False
        done.append(True)
        return True

    return aborts


def _fail_downstream_b(**kwargs) -> Run:
    return Run(LINES, fail_downstream=frozenset({b"b"}), **kwargs).until_committed()


def test_an_aborted_rounds_records_are_counted_once_when_read_again():
    run = _fail_downstream_b(aborts=_aborting_first(lambda spout: True))  # the first round reads every line
    assert run.aborted == 1
    stats = run.spout.stats
    assert stats.read == len(LINES)
    assert stats.replayed == 1  # b's redelivery
    assert stats.emitted == len(LINES) + 1  # each line, and b again (was 9)
    assert stats.completed == len(LINES)
    assert sorted(TopicSink(run.kafka, "sentences").values()) == sorted([*LINES, b"b"])  # read_committed
    run.assert_counters_only_went_up()


def test_an_aborted_rounds_redeliveries_and_outcomes_are_counted_once():
    # the round that redelivers b: b's FAILED outcome, and the others' COMPLETED, were taken just
    # before it began; the abort reads them again from the last commit's outcome position
    run = _fail_downstream_b(aborts=_aborting_first(lambda spout: spout.tracker.stats.redelivered > 0))
    assert run.aborted == 1
    stats = run.spout.stats
    assert stats.replayed == 1
    assert stats.read == len(LINES)
    assert stats.emitted == len(LINES) + 1  # was 6
    assert stats.completed == len(LINES)  # was 7
    counters = run.samples[-1]
    assert counters["status.failed"] == 1 and counters["status.redelivered"] == 1
    assert counters["rk_trees_total[('component', 'spout-1'), ('outcome', 'completed'), ('topology', 'tx')]"] == 4
    assert counters["rk_complete_latency_seconds_count[('component', 'spout-1'), ('topology', 'tx')]"] == 4
    # the tracker registered each attempt once: not again for the records it re-adopted after the abort
    assert run.spout.committed_tracker_stats.emitted == len(LINES) + 1
    assert run.spout.tracker.stats.emitted == len(LINES) + 1
    assert sorted(TopicSink(run.kafka, "sentences").values()) == sorted([*LINES, b"b"])
    run.assert_counters_only_went_up()


def _fail_c_first_attempt(record, collector) -> None:  # in every round that processes c's first attempt
    if record.value == b"c" and record.attempt == 1:
        raise ValueError("c fails its first attempt in the spout")
    collector.emit("sentences", record.value)


def test_an_aborted_rounds_handler_errors_are_counted_once():
    run = _fail_downstream_b(aborts=_aborting_first(lambda spout: True), handler=_fail_c_first_attempt)
    stats = run.spout.stats
    assert stats.handler_errors == 1  # the aborted round's error is not counted (was 2)
    assert stats.read == len(LINES) and stats.replayed == 2  # b and c again
    assert stats.emitted == len(LINES) + 1  # a, b, d; then b and c again
    assert stats.completed == len(LINES)
    assert sorted(TopicSink(run.kafka, "sentences").values()) == sorted([*LINES, b"b"])
    run.assert_counters_only_went_up()


def test_counters_move_only_when_a_round_commits():
    """Between commits the stats hold still: a sample never shows work a later abort takes back."""
    run = Run(LINES, aborts=lambda spout: True)  # every round aborts: nothing is ever committed
    for _ in range(5):
        for component in (run.spout, run.sink, run.acker):
            component.poll_once(0)
        run.sample()
    assert run.aborted >= 5
    assert TopicSink(run.kafka, "sentences").values() == []
    assert all(value == 0 for key, value in run.samples[-1].items() if key.startswith("stats."))
    run.assert_counters_only_went_up()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_lines=st.integers(min_value=1, max_value=6),
    schedule=st.lists(st.booleans(), max_size=12),
    handler_fails=st.sets(st.integers(min_value=0, max_value=5)),
    downstream_fails=st.sets(st.integers(min_value=0, max_value=5)),
)
def test_counters_are_monotonic_and_equal_the_committed_work(n_lines, schedule, handler_fails, downstream_fails):
    """Rounds commit or abort as ``schedule`` says (then all commit). Line i fails its first attempt in
    the spout's handler if i is in ``handler_fails``, and its first tuple seen downstream if i is in
    ``downstream_fails``: each such failure is one redelivery."""
    lines = [f"line-{i}".encode() for i in range(n_lines)]
    in_handler = {lines[i] for i in handler_fails if i < n_lines}
    downstream = frozenset(lines[i] for i in downstream_fails if i < n_lines)
    plan: Iterator[bool] = iter(schedule)

    def handler(record, collector) -> None:
        if record.value in in_handler and record.attempt == 1:
            raise ValueError("fails its first attempt in the spout")
        collector.emit("sentences", record.value)

    run = Run(lines, aborts=lambda spout: next(plan, False), handler=handler, fail_downstream=downstream)
    run.until_committed()
    run.assert_counters_only_went_up()
    stats, status = run.spout.stats, run.samples[-1]
    retried = len(in_handler) + len(downstream)
    committed_tuples = TopicSink(run.kafka, "sentences").values()  # read_committed: committed rounds' emits
    assert stats.read == status["status.read"] == n_lines
    assert stats.handler_errors == len(in_handler)
    assert stats.replayed == retried == status["status.redelivered"] == status["status.failed"]
    assert stats.emitted == status["status.emitted"] == len(committed_tuples) == n_lines + len(downstream)
    assert stats.completed == status["status.completed"] == n_lines
    assert run.spout.tracker.stats.emitted == n_lines + retried  # each attempt registered once
    assert (stats.dead_lettered, stats.skipped_done, status["status.timed_out"]) == (0, 0, 0)
