"""The shipped Spout, BasicBolt and AckerWorker on the in-memory Kafka, stepped in one thread."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from reliable_kafka import Connection, Loop, Tracking
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.kafka.clients import SENT_PER_POLL
from reliable_kafka.kafka.produce import SEND_WAIT_S
from reliable_kafka.spout.spout import Spout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink, step_until

LINES = ["the cat", "the dog and the cat", "a bird"]


def _spout(kafka: MemoryKafka, *, name: str = "wc", clock=time, kafka_config=None, **tracking) -> Spout:
    """A spout from ``lines`` to ``sentences`` in group ``<name>.spout`` (not started); ``tracking``
    are :class:`Tracking`'s fields."""
    return Spout(
        topology=name,
        connection=Connection("memory", kafka_config=kafka_config, clients=kafka),
        tracking=Tracking(**{"root_index": False, **tracking}),
        loop=Loop(commit_interval_ms=0, clock=clock),
        source_topics="lines",
        group_id=f"{name}.spout",
        emit_to="sentences",
    )


def _topology(kafka: MemoryKafka, *, split=None, count=None, max_retries: int = 5, name: str = "wc"):
    acker = AckerWorker(topology=name, connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0))
    acker.start()
    spout = _spout(kafka, name=name, backoff=Backoff(initial_ms=0), max_retries=max_retries)
    counts: Counter = Counter()

    def split_words(tuple_, collector):
        for word in tuple_.value.split():
            collector.emit("words", word, key=word)

    def count_words(tuple_, collector):
        counts[tuple_.value.decode()] += 1

    def bolt(stage: str, source: str, handler) -> BasicBolt:
        return BasicBolt(
            topology=name,
            connection=Connection("memory", clients=kafka),
            loop=Loop(commit_interval_ms=0),
            source_topics=source,
            group_id=f"{name}.{stage}",
            handler=handler,
        )

    splitter = bolt("split", "sentences", split or split_words)
    counter = bolt("count", "words", count or count_words)
    for component in (spout, splitter, counter):
        component.start()
    return acker, spout, splitter, counter, counts


@pytest.fixture
def kafka() -> MemoryKafka:
    kafka = MemoryKafka(clock=ManualClock())
    for topic in ("sentences", "words"):
        kafka.create_topic(topic, 2)
    return kafka


def test_word_count_completes_every_tree_and_commits_past_every_line(kafka):
    ListSource(kafka, "lines", [line.encode() for line in LINES], partitions=2)
    acker, spout, splitter, counter, counts = _topology(kafka)

    step_until(lambda: spout.stats.completed == len(LINES), spout, splitter, counter, acker)
    step_until(lambda: _committed(kafka, "wc.spout", "lines") == _ends(kafka, "lines"), spout)

    assert counts == Counter(" ".join(LINES).split())
    assert spout.stats.replayed == 0 and spout.stats.dead_lettered == 0
    assert acker.stats.completed == len(LINES) and acker.stats.failed == 0
    assert sorted(TopicSink(kafka, "sentences").values()) == sorted(line.encode() for line in LINES)


def test_each_poll_that_produced_sends_its_records_when_it_ends_and_an_idle_poll_sends_nothing(kafka):
    """A batch goes out whole when its poll ends, not in linger.ms pieces (measured: the git history
    of docs/performance.md)."""
    ListSource(kafka, "lines", [line.encode() for line in LINES], partitions=2)
    acker, spout, splitter, counter, _ = _topology(kafka)
    sends: dict[str, list] = {}
    for component in (spout, splitter, counter):
        producer = component._producer
        assert producer.config["linger.ms"] == SENT_PER_POLL["linger.ms"]
        waits = sends[component.name] = []

        def flush(timeout=None, original=producer.flush, waits=waits):
            waits.append(timeout)
            return original(timeout)

        producer.flush = flush
    step_until(lambda: spout.stats.completed == len(LINES), spout, splitter, counter, acker)
    assert all(SEND_WAIT_S in waits for waits in sends.values()), sends  # spout, split and count
    before = {name: waits.count(SEND_WAIT_S) for name, waits in sends.items()}
    for component in (spout, splitter, counter):
        component.poll_once(0)  # nothing to read, nothing produced
    assert {name: waits.count(SEND_WAIT_S) for name, waits in sends.items()} == before


def test_a_failed_tuple_is_replayed_and_the_source_committed_only_after_its_tree_completed(kafka):
    ListSource(kafka, "lines", [b"ok", b"flaky"])
    failures = {"flaky": 1}

    def split_or_fail(tuple_, collector):
        word = tuple_.value.decode()
        if failures.get(word):
            failures[word] -= 1
            raise RuntimeError("a transient failure")
        collector.emit("words", tuple_.value, key=tuple_.value)

    acker, spout, splitter, counter, counts = _topology(kafka, split=split_or_fail)
    # until the replayed tree completes, the commit point stays at the failed line (offset 1)
    step_until(lambda: spout.stats.replayed == 1, spout, splitter, counter, acker)
    assert _committed(kafka, "wc.spout", "lines") == {0: 1}
    step_until(lambda: spout.stats.completed == 2, spout, splitter, counter, acker)
    step_until(lambda: _committed(kafka, "wc.spout", "lines") == {0: 2}, spout)
    assert counts == Counter({"ok": 1, "flaky": 1})
    assert splitter.stats.failed == 1 and acker.stats.failed == 1


def test_a_line_failing_every_attempt_is_dead_lettered_then_committed(kafka):
    ListSource(kafka, "lines", [b"poison"])

    def always_fail(tuple_, collector):
        raise ValueError("bad line")

    acker, spout, splitter, counter, _ = _topology(kafka, split=always_fail, max_retries=2)
    step_until(lambda: spout.stats.dead_lettered == 1, spout, splitter, counter, acker)
    step_until(lambda: _committed(kafka, "wc.spout", "lines") == {0: 1}, spout)
    assert [m.value() for m in TopicSink(kafka, "wc.dlq").messages()] == [b"poison"]
    assert spout.stats.replayed == 2


def test_nothing_is_committed_while_the_tree_is_open(kafka):
    ListSource(kafka, "lines", [b"one line"])
    acker, spout, splitter, counter, _ = _topology(kafka)
    for _ in range(5):  # the tree cannot complete: the counting bolt is never polled
        for component in (spout, splitter, acker):
            component.poll_once(0)
    assert spout.stats.emitted == 1 and spout.stats.completed == 0
    assert _committed(kafka, "wc.spout", "lines") in ({}, {0: 0})  # the commit point stays below the line
    step_until(lambda: spout.stats.completed == 1, spout, splitter, counter, acker)
    step_until(lambda: _committed(kafka, "wc.spout", "lines") == {0: 1}, spout)


def test_a_spout_joining_the_group_takes_partitions_over_without_losing_a_line(kafka):
    ListSource(kafka, "lines", [f"line {i}".encode() for i in range(20)], partitions=2)
    acker, first, splitter, counter, counts = _topology(kafka)
    step_until(lambda: first.stats.read >= 1, first)
    second = _spout(kafka, backoff=Backoff(initial_ms=0))
    second.start()
    step_until(
        lambda: _committed(kafka, "wc.spout", "lines") == _ends(kafka, "lines"), first, second, splitter, counter, acker
    )
    assert {tp.partition for tp in first._consumer.assignment()} | {
        tp.partition for tp in second._consumer.assignment()
    } == {0, 1}
    assert first._consumer.assignment() and second._consumer.assignment()
    assert all(counts[f"{i}"] >= 1 for i in range(20))  # every line counted (replays may repeat some)


def test_an_acker_that_crashes_is_replaced_and_the_trees_still_complete(kafka):
    ListSource(kafka, "lines", [b"a b", b"c d"])
    acker, spout, splitter, counter, counts = _topology(kafka)
    step_until(lambda: acker.stats.entries_folded > 0, spout, splitter, counter, acker)
    kafka.crash(acker._consumer)  # dies without committing or publishing more
    kafka.crash(acker._producer)
    replacement = AckerWorker(
        topology="wc", connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0)
    )
    replacement.start()
    step_until(lambda: spout.stats.completed == 2, spout, splitter, counter, replacement)
    assert counts == Counter("abcd".replace("", " ").split())


def _committed(kafka: MemoryKafka, group: str, topic: str) -> dict[int, int]:
    found = {}
    for partition in range(len(kafka.topics[topic].partitions)):
        committed = kafka.committed(group, topic, partition)
        if committed is not None:
            found[partition] = committed[0]
    return found


def _ends(kafka: MemoryKafka, topic: str) -> dict[int, int]:
    return {p: log.end for p, log in enumerate(kafka.topics[topic].partitions) if log.end}


def test_transactional_spout_and_bolts_emit_each_word_once_though_a_bolt_is_fenced_mid_run(kafka):

    ListSource(kafka, "lines", [f"w{i} x{i}".encode() for i in range(10)])
    acker = AckerWorker(topology="tx", connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0))
    acker.start()
    spout = Spout(
        topology="tx",
        connection=Connection("memory", clients=kafka),
        transactional=True,
        tracking=Tracking(backoff=Backoff(initial_ms=0)),
        loop=Loop(batch_size=3),
        source_topics="lines",
        group_id="tx.spout",
        emit_to="sentences",
        name="spout-1",
    )

    def split_words(tuple_, collector):
        for word in tuple_.value.split():
            collector.emit("words", word, key=word)

    splitter = BasicBolt(
        topology="tx",
        connection=Connection("memory", clients=kafka),
        loop=Loop(batch_size=2),
        source_topics="sentences",
        group_id="tx.split",
        handler=split_words,
        transactional=True,
        name="split-1",
    )
    for component in (spout, splitter):
        component.start()
    rounds = {"n": 0}

    def fence_once(round_):
        rounds["n"] += 1
        if rounds["n"] == 3:  # a newer incarnation appeared: the open and next transaction abort
            kafka.fence("tx.split.split-1")

    step_until(
        lambda: spout.stats.completed == 10 and len(TopicSink(kafka, "words")) == 20,
        spout,
        splitter,
        _AckEverything(kafka, "words", "tx"),
        acker,
        between=fence_once,
    )
    assert sorted(TopicSink(kafka, "words").values()) == sorted(f"{c}{i}".encode() for i in range(10) for c in "wx")
    assert splitter.stats.aborted_transactions >= 1
    assert spout.stats.replayed == 0


class _AckEverything:
    """A plain (not transactional) bolt that acks what it reads: completes the trees."""

    def __init__(self, kafka, topic, topology):
        self.bolt = BasicBolt(
            topology=topology,
            connection=Connection("memory", clients=kafka),
            loop=Loop(commit_interval_ms=0),
            source_topics=topic,
            group_id=f"{topology}.sink",
            handler=lambda t, c: None,
        )
        self.bolt.start()
        self.name, self.stats = "sink", self.bolt.stats

    def poll_once(self, timeout):
        self.bolt.poll_once(timeout)


class _StopAfter:
    """A stop event that is set after ``rounds`` checks (run() checks it once per poll)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def is_set(self) -> bool:
        self.rounds -= 1
        return self.rounds < 0


def test_run_publishes_its_status_snapshots_to_the_same_in_memory_kafka(kafka):
    acker = AckerWorker(topology="wc", connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0))
    acker.run(_StopAfter(3))
    snapshots = TopicSink(kafka, "wc.status").messages()
    assert snapshots and snapshots[-1].key() == acker.name.encode()


def test_on_revoke_the_spout_commits_what_is_done_so_the_new_owner_replays_nothing(kafka):
    ListSource(kafka, "lines", [f"line {i}".encode() for i in range(6)], partitions=2)
    acker, first, splitter, counter, counts = _topology(kafka)
    first.commit_interval_ms = 10**12  # only the revoke commits (the interval never passes)
    step_until(lambda: first.stats.completed == 6, first, splitter, counter, acker)
    assert _committed(kafka, "wc.spout", "lines") == {}  # nothing committed yet: no interval passed
    second = _spout(kafka)
    second.start()
    step_until(
        lambda: len(first._consumer.assignment()) == 1 and len(second._consumer.assignment()) == 1,
        second,
        first,
        second,
    )
    assert _committed(kafka, "wc.spout", "lines") == {0: 3, 1: 3}  # committed by the revoke
    for _ in range(5):
        for component in (first, second, splitter, counter, acker):
            component.poll_once(0)
    assert second.stats.read == 0 and counts["line"] == 6  # nothing replayed


def test_a_spout_commit_that_failed_unseen_is_sent_again(kafka):
    """Periodic commits are asynchronous: the commit of the final points fails, a later poll reports
    it, and the spout sends it again although its points did not move since."""
    ListSource(kafka, "lines", [line.encode() for line in LINES], partitions=2)
    acker, spout, splitter, counter, _ = _topology(kafka)
    step_until(lambda: counter.stats.acked >= 8, spout, splitter, counter)  # every word; no outcome yet
    step_until(lambda: acker.stats.completed == len(LINES), acker)
    kafka.fail_next("commit")  # the spout's commit of its final points
    step_until(lambda: spout.stats.completed == len(LINES), spout)
    step_until(lambda: _committed(kafka, "wc.spout", "lines") == _ends(kafka, "lines"), spout)


def test_a_spout_paused_by_max_pending_reads_again_after_its_partitions_come_back(kafka):
    """librdkafka keeps a partition's pause across its revoke and re-assignment. A spout paused at
    max_pending whose partitions were lost (their roots, and so the pending count, went with them)
    must not leave them paused when they come back: it reads them again and completes every line."""
    lines = [f"line {i}".encode() for i in range(12)]
    ListSource(kafka, "lines", lines)
    acker, spout, splitter, counter, _ = _topology(kafka)
    spout.tracker.max_pending = 3
    step_until(lambda: spout.stats.paused, spout)  # no acker steps: nothing completes
    kafka.expire(spout._consumer)  # the session expires (a broker restart): on_lost, then rejoin
    step_until(lambda: spout.stats.completed == len(lines), spout, splitter, counter, acker)
    assert _committed(kafka, "wc.spout", "lines") == _ends(kafka, "lines")


def test_the_root_index_goes_about_once_a_second_and_what_it_held_goes_on_close(kafka):
    from reliable_kafka.codec.root_index import decode_root_index

    clock = kafka.clock
    acker = AckerWorker(
        topology="wc", connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0, clock=clock)
    )
    acker.start()  # creates <topology>.roots with the other topics
    source = ListSource(kafka, "lines", [b"first"])
    spout = _spout(kafka, clock=clock)
    spout.root_index = True  # _spout turns it off
    spout.start()

    def indexed() -> list[int]:
        return sorted(
            offset for m in TopicSink(kafka, "wc.roots").messages() for offset, _ in decode_root_index(m.value())[1]
        )

    step_until(lambda: spout.stats.read == 1, spout)
    assert indexed() == [0]  # the first round's pairs go at once
    source.send([b"second", b"third"])
    step_until(lambda: spout.stats.read == 3, spout)
    assert indexed() == [0]  # held: less than a second since the last send
    clock.advance(1000)
    spout.poll_once(0)
    assert indexed() == [0, 1, 2]
    source.send([b"fourth"])
    step_until(lambda: spout.stats.read == 4, spout)
    spout.close()  # what was held goes before the producer closes
    assert indexed() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "options, idempotent",
    [
        ({"guarantee": "none"}, False),  # promises nothing, sends no ack events
        ({"guarantee": "none", "kafka_config": {"enable.idempotence": True}}, True),  # the user's choice wins
        ({"guarantee": "at_most_once"}, True),  # a duplicate would break at-most-once
        ({"guarantee": "at_least_once", "ackers": 0}, True),
        ({}, True),  # tracked: it sends INITs (an ack sender must be idempotent)
    ],
)
def test_only_a_spout_that_promises_nothing_has_a_producer_that_is_not_idempotent(kafka, options, idempotent):
    AckerWorker(topology="wc", connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0)).start()
    ListSource(kafka, "lines", [line.encode() for line in LINES], partitions=2)
    spout = _spout(kafka, **options)
    spout.start()
    assert spout._producer.config["enable.idempotence"] is idempotent
    assert spout._producer.config["linger.ms"] == SENT_PER_POLL["linger.ms"]  # its round's records go when it ends
    step_until(lambda: len(TopicSink(kafka, "sentences").values()) == len(LINES), spout)
    assert sorted(TopicSink(kafka, "sentences").values()) == sorted(line.encode() for line in LINES)
