"""Tuple trees on a real broker: spout, bolts and acker workers (issue 3's acceptance tests)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaException

from examples.word_count import build
from reliable_kafka import (
    AckerWorker,
    BasicBolt,
    Bolt,
    Connection,
    LocalCluster,
    Loop,
    Spout,
    TopologyError,
    Tracking,
    codec,
)
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.demo import SENTENCES
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

FAST_RETRY = Backoff(initial_ms=20, multiplier=2.0, max_ms=200)


def _word_count_topics(bootstrap: str, prefix: str) -> tuple[str, str, str]:
    topology = unique_name(prefix)
    sentences, words = f"{topology}-sentences", f"{topology}-words"
    create_topics(bootstrap, {sentences: 2, words: 2, f"{topology}.sentences": 2})
    return topology, sentences, words


def _caught_up(bootstrap: str, group: str, topic: str) -> bool:
    # an empty partition (unkeyed records may all land in the other one) never gets a commit
    ends = end_offsets(bootstrap, topic)
    committed = committed_offsets(bootstrap, group, topic)
    return all(max(committed.get(p, -1), 0) == end for p, end in ends.items())


def _progress(bootstrap, group, topic, spout):
    return lambda: (
        f"committed {committed_offsets(bootstrap, group, topic)} end {end_offsets(bootstrap, topic)} "
        f"spout {spout.stats}"
    )


def _run_word_count(bootstrap: str, topology: str, sentences: str, components, *, timeout: float, what: str):
    """Run ``build``'s components until the spout (the second) committed to the end of ``sentences``."""
    spout = components[1]
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: _caught_up(bootstrap, f"{topology}-spout", sentences),
            timeout=timeout,
            what=what,
            progress=_progress(bootstrap, f"{topology}-spout", sentences, spout),
        )
    return spout


class _HoldAcks:
    """A bolt handler that keeps its tuples unacked until ``release`` is set; the first tuple it
    gets after that acks them all (an untracked record wakes it)."""

    def __init__(self) -> None:
        self.held: list = []
        self.release = threading.Event()

    def __call__(self, tuple_, collector) -> None:
        self.held.append(tuple_)
        if self.release.is_set():
            for t in self.held:
                collector.ack(t)
            self.held.clear()


def test_word_count_over_10000_sentences_completes_and_commits_to_the_end(kafka_bootstrap):
    topology, sentences, words = _word_count_topics(kafka_bootstrap, "wc")
    rng = random.Random(1)
    batch = [rng.choice(SENTENCES) for _ in range(10_000)]
    produce_values(kafka_bootstrap, sentences, [s.encode() for s in batch])
    # at-least-once: a busy machine may time trees out and replay them (counts then grow), so the
    # timeout is long enough to hold under load and the counts are checked for loss, not equality
    counts, components = build(
        kafka_bootstrap,
        topology=topology,
        sentences=sentences,
        words=words,
        tracking=Tracking(message_timeout_ms=120_000),
    )
    spout = _run_word_count(
        kafka_bootstrap,
        topology,
        sentences,
        components,
        timeout=240,
        what="spout committed to the end of the sentences topic",
    )
    print(f"replays: {spout.stats.replayed}")
    assert spout.stats.completed == 10_000  # each record's tree completes once, whatever was replayed
    assert spout.stats.dead_lettered == 0
    expected = Counter(word for s in batch for word in s.split())
    assert set(counts) == set(expected)
    assert all(counts[w] >= n for w, n in expected.items())  # no word of any sentence lost


def test_bolt_failing_ten_percent_still_completes_every_sentence_through_replays(kafka_bootstrap):
    topology, sentences, words = _word_count_topics(kafka_bootstrap, "wc-fail")
    rng = random.Random(2)
    batch = [rng.choice(SENTENCES) for _ in range(2_000)]
    produce_values(kafka_bootstrap, sentences, [s.encode() for s in batch])
    counts, components = build(
        kafka_bootstrap,
        topology=topology,
        sentences=sentences,
        words=words,
        tracking=Tracking(max_retries=30, backoff=FAST_RETRY),
    )
    coin = random.Random(3)
    flaky_counts = Counter()

    def flaky_count(word, collector):
        if coin.random() < 0.10:
            raise RuntimeError("simulated failure")
        flaky_counts[word.value.decode()] += 1

    components[3].handler = flaky_count
    spout = _run_word_count(
        kafka_bootstrap, topology, sentences, components, timeout=240, what="every sentence completed despite failures"
    )
    print(f"replays: {spout.stats.replayed}, failed tuples: {components[3].stats.failed}")
    assert spout.stats.completed == 2_000
    assert spout.stats.replayed > 0 and components[3].stats.failed > 0
    assert spout.stats.dead_lettered == 0
    expected = Counter(word for s in batch for word in s.split())
    assert set(flaky_counts) == set(expected)
    assert all(flaky_counts[w] >= n for w, n in expected.items())  # at-least-once: replays add duplicates


def test_dropped_tuples_time_out_replay_and_complete_without_early_commit(kafka_bootstrap):
    topology, sentences, words = _word_count_topics(kafka_bootstrap, "wc-drop")
    batch = [f"{SENTENCES[i % 5]} s{i}" for i in range(600)]
    placed = produce_values(kafka_bootstrap, sentences, [s.encode() for s in batch])
    dropped = {i for i in range(0, 600, 37)}
    counts, components = build(
        kafka_bootstrap,
        topology=topology,
        sentences=sentences,
        words=words,
        tracking=Tracking(message_timeout_ms=2_000, backoff=FAST_RETRY, backstop_grace_ms=5_000),
    )
    seen: set[int] = set()
    retried_at: dict[int, float] = {}

    def split_dropping_first_sight(sentence, collector):
        text = sentence.value.decode()
        index = int(text.rsplit(" s", 1)[1])
        if index in dropped and index not in seen:
            seen.add(index)
            return  # neither emits nor acks: the tree must time out
        if index in dropped:
            retried_at.setdefault(index, time.monotonic())
        for word in text.split():
            collector.emit(words, word.encode(), key=word.encode())
        collector.ack(sentence)

    components[2] = Bolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=f"{topology}.sentences",
        group_id=f"{topology}-split",
        handler=split_dropping_first_sight,
    )
    samples: list[tuple[float, dict[int, int]]] = []
    stop_sampling = threading.Event()

    def sample():
        while not stop_sampling.is_set():
            try:
                committed = committed_offsets(kafka_bootstrap, f"{topology}-spout", sentences)
            except KafkaException:  # e.g. NOT_COORDINATOR while the group coordinator loads: sample again
                time.sleep(0.05)
                continue
            samples.append((time.monotonic(), committed))  # taken after the read: the commit came before
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        spout = _run_word_count(
            kafka_bootstrap,
            topology,
            sentences,
            components,
            timeout=120,
            what="dropped sentences replayed and completed",
        )
    finally:
        stop_sampling.set()
        sampler.join()
    assert set(retried_at) == dropped
    assert spout.stats.replayed >= len(dropped)
    violations = [
        (i, placed[i], when, committed)
        for when, committed in samples
        for i in dropped
        if when < retried_at[i] and committed.get(placed[i][0], -1) > placed[i][1]
    ]
    assert not violations, f"commit passed an incomplete record: {violations[:3]}"
    assert len(samples) > 20


def test_undelivered_tuples_are_counted_and_their_trees_time_out_and_replay(kafka_bootstrap):
    # spouts and bolts take delivery reports for failures only (no Python call per delivered
    # tuple): a tuple the broker refuses must still be counted and its tree must never complete
    # before a replay delivers it
    topology = unique_name("undelivered")
    source, middle, sink_topic = f"{topology}-source", f"{topology}-middle", f"{topology}-sink"
    create_topics(kafka_bootstrap, {source: 1, middle: 1})
    create_topics(kafka_bootstrap, {sink_topic: 1}, config={"max.message.bytes": "2000"})
    produce_values(kafka_bootstrap, source, [f"r{i}".encode() for i in range(20)])
    too_big = b"x" * 10_000  # over the sink topic's max.message.bytes: the broker refuses it
    first_sight: set[bytes] = set()

    def oversize_once(value: bytes) -> bytes:
        if value in (b"r3", b"r11") and value not in first_sight:
            first_sight.add(value)
            return too_big
        return value

    def relay(tuple_, collector):
        collector.emit(sink_topic, oversize_once(tuple_.value), key=tuple_.value)

    received: list[bytes] = []
    on = {"topology": topology, "connection": kafka_bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=middle,
        tracking=Tracking(backoff=FAST_RETRY, message_timeout_ms=2_000, backstop_grace_ms=5_000),
    )
    relay_bolt = BasicBolt(**on, source_topics=middle, group_id=f"{topology}-relay", handler=relay)
    sink = BasicBolt(
        **on, source_topics=sink_topic, group_id=f"{topology}-sink", handler=lambda t, c: received.append(t.value)
    )
    with LocalCluster(
        AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=2_000)), spout, relay_bolt, sink
    ) as cluster:
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", source),
            timeout=120,
            what="every record completed, the refused ones after a replay",
            progress=_progress(kafka_bootstrap, f"{topology}-spout", source, spout),
        )
    assert relay_bolt.stats.delivery_errors >= 2
    assert spout.stats.replayed >= 2  # the two trees timed out: nothing completed them early
    assert spout.stats.completed == 20
    assert too_big not in received and {b"r3", b"r11"} <= set(received)


def test_spout_pauses_at_max_pending_and_resumes_when_trees_complete(kafka_bootstrap):
    topology = unique_name("pending")
    source, middle = f"{topology}-source", f"{topology}-middle"
    create_topics(kafka_bootstrap, {source: 1, middle: 1})
    produce_values(kafka_bootstrap, source, [f"r{i}".encode() for i in range(60)])
    hold = _HoldAcks()
    on = {"topology": topology, "connection": kafka_bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=middle,
        tracking=Tracking(max_pending=5),
        loop=Loop(batch_size=10),
    )
    bolt = Bolt(**on, source_topics=middle, group_id=f"{topology}-hold", handler=hold)
    with LocalCluster(AckerWorker(**on, tracking=Tracking(ackers=1)), spout, bolt) as cluster:
        cluster.wait_until(lambda: spout.stats.paused, timeout=60, what="the spout paused at max_pending")
        read = spout.stats.read
        time.sleep(1.0)  # many rounds of the spout's loop: a paused spout reads nothing more
        assert spout.stats.read == read <= 10
        hold.release.set()
        produce_values(kafka_bootstrap, middle, [b"nudge"])  # an untracked record wakes the bolt
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", source),
            timeout=120,
            what="every record completed after the bolt acked",
        )
    assert spout.stats.completed == 60 and not spout.stats.paused


def test_poison_record_goes_to_the_dead_letter_topic_and_the_commit_moves_past_it(kafka_bootstrap):
    topology, sentences, words = _word_count_topics(kafka_bootstrap, "wc-poison")
    batch = [SENTENCES[i % 5] for i in range(50)]
    batch[17] = "poison pill"
    placed = produce_values(kafka_bootstrap, sentences, [s.encode() for s in batch])
    counts, components = build(
        kafka_bootstrap,
        topology=topology,
        sentences=sentences,
        words=words,
        tracking=Tracking(max_retries=2, backoff=FAST_RETRY),
    )

    def count_or_choke(word, collector):
        if word.value == b"poison":
            raise ValueError("cannot digest poison")
        counts[word.value.decode()] += 1

    components[3].handler = count_or_choke
    spout = _run_word_count(
        kafka_bootstrap, topology, sentences, components, timeout=120, what="commit moved past the poison record"
    )
    dead = read_topic(kafka_bootstrap, TopologyTopics(topology).dlq)
    assert [m.value() for m in dead] == [b"poison pill"]
    parked = codec.decode_parked(dict(dead[0].headers())[codec.PARKED_HEADER])
    assert parked.attempts == 3 and "FAILED" in parked.reason
    assert (parked.source_topic, parked.source_partition, parked.source_offset) == (sentences, *placed[17])
    assert spout.stats.dead_lettered == 1


def test_multi_anchored_output_keeps_both_trees_open_until_it_is_acked(kafka_bootstrap):
    topology = unique_name("multi")
    source, pairs = f"{topology}-source", f"{topology}-pairs"
    create_topics(kafka_bootstrap, {source: 1, pairs: 1, f"{topology}.in": 1})
    produce_values(kafka_bootstrap, source, [b"left", b"right"])
    hold = _HoldAcks()
    waiting: list = []

    def pair_up(tuple_, collector):  # a rich bolt: one output anchored to two inputs of two trees
        waiting.append(tuple_)
        if len(waiting) == 2:
            collector.emit(pairs, b"+".join(t.value for t in waiting), anchors=waiting)
            for t in waiting:
                collector.ack(t)

    on = {"topology": topology, "connection": kafka_bootstrap}
    # trees are held open on purpose: a timeout that holds under load keeps them from replaying
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=f"{topology}.in",
        tracking=Tracking(message_timeout_ms=120_000),
    )
    sink = Bolt(**on, source_topics=pairs, group_id=f"{topology}-sink", handler=hold)
    components = [
        AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=120_000)),
        spout,
        Bolt(**on, source_topics=f"{topology}.in", group_id=f"{topology}-pair", handler=pair_up),
        sink,
    ]
    with LocalCluster(*components) as cluster:
        cluster.wait_until(lambda: len(hold.held) == 1, timeout=60, what="the paired output reached the sink")
        assert len(hold.held[0].roots) == 2
        time.sleep(2.5)  # the spout's commit interval passes twice: nothing may be committed
        assert committed_offsets(kafka_bootstrap, f"{topology}-spout", source).get(0, -1) <= 0
        assert spout.stats.completed == 0
        hold.release.set()
        produce_values(kafka_bootstrap, pairs, [b"nudge"])  # an untracked record wakes the sink
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", source),
            timeout=60,
            what="both trees completed after the output was acked",
        )
    assert spout.stats.completed == 2


def test_zero_ackers_completes_every_emit_at_once(kafka_bootstrap):
    topology = unique_name("noack")
    source, out = f"{topology}-source", f"{topology}-out"
    create_topics(kafka_bootstrap, {source: 1, out: 1})
    produce_values(kafka_bootstrap, source, [b"a", b"b", b"c"])
    spout = Spout(
        topology=topology,
        connection=kafka_bootstrap,
        tracking=Tracking(ackers=0),
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=out,
    )
    with LocalCluster(spout) as cluster:
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", source), timeout=60, what="commit with no ackers"
        )
    records = read_topic(kafka_bootstrap, out)
    assert [m.value() for m in records] == [b"a", b"b", b"c"]
    assert all(codec.ANCHORS_HEADER not in dict(m.headers() or []) for m in records)


@pytest.mark.parametrize("guarantee", ["at_most_once", "none"])
def test_untracked_guarantees_forward_without_anchors_and_commit(kafka_bootstrap, guarantee):
    topology = unique_name(guarantee.replace("_", "-"))
    source, out = f"{topology}-source", f"{topology}-out"
    create_topics(kafka_bootstrap, {source: 1, out: 1})
    produce_values(kafka_bootstrap, source, [b"x", b"y"])
    spout = Spout(
        topology=topology,
        connection=Connection(kafka_bootstrap, kafka_config={"auto.commit.interval.ms": 200}),
        tracking=Tracking(guarantee=guarantee),
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=out,
    )
    with LocalCluster(spout) as cluster:
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", source),
            timeout=60,
            what=f"{guarantee} commits as it reads",
        )
    records = read_topic(kafka_bootstrap, out)
    assert [m.value() for m in records] == [b"x", b"y"]
    assert all(codec.ANCHORS_HEADER not in dict(m.headers() or []) for m in records)


def test_acker_refuses_an_ack_topic_of_the_wrong_shape(kafka_bootstrap):
    topology = unique_name("shape")
    create_topics(kafka_bootstrap, {f"{topology}.acks": 3})
    worker = AckerWorker(topology=topology, connection=kafka_bootstrap, tracking=Tracking(ackers=2))
    with pytest.raises(TopologyError, match=r"has 3 partitions, needs 2"):
        worker.run(threading.Event())


def test_spout_refuses_to_start_without_the_topology_topics(kafka_bootstrap):
    topology = unique_name("missing")
    spout = Spout(topology=topology, connection=kafka_bootstrap, source_topics="nowhere", group_id="g", emit_to="out")
    spout.topic_wait_s = 0.5
    with pytest.raises(TopologyError, match="start an acker worker"):
        spout.start()


def test_ensure_topics_is_idempotent(kafka_bootstrap):
    topics = TopologyTopics(unique_name("idem"), ackers=3)
    admin = admin_client(kafka_bootstrap)
    ensure_topics(admin, topics)
    ensure_topics(admin, topics)
    assert {t: n for t, n in topics.shapes().items()} == {
        topics.acks: 3,
        topics.outcomes: 3,
        topics.dlq: 1,
        topics.quarantine: 1,
        topics.failures: 1,
        topics.roots: 1,
    }


def test_word_count_example_runs_as_a_script():
    import ast
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "word_count.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=420,  # the script waits up to 300 s for its sentences
        env={**os.environ, "PYTHONPATH": str(script.parents[1])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counts = ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the script prints the counts
    expected = Counter(word for i in range(1000) for word in SENTENCES[i % 5].split())
    assert expected["the"] == 800 and expected["seven"] == 400 and sum(expected.values()) == 6400
    # at-least-once (a 30 s timeout on a busy machine may replay sentences): nothing lost
    assert set(counts) == set(expected) and all(counts[w] >= n for w, n in expected.items()), counts


def test_word_count_with_batch_handlers_completes_every_sentence(kafka_bootstrap):
    """Split and count as ``batch_handler``s (one call per consumed batch): the split names each
    word's input sentence as its anchor, the count reads the batch's values column; every tree
    completes and the spout commits to the end."""
    topology, sentences, words = _word_count_topics(kafka_bootstrap, "wcb")
    rng = random.Random(2)
    batch = [rng.choice(SENTENCES) for _ in range(2_000)]
    produce_values(kafka_bootstrap, sentences, [s.encode() for s in batch])
    counts: Counter = Counter()

    def split(sentences_batch, collector):
        for sentence in sentences_batch:
            for word in sentence.value.decode().split():
                collector.emit(words, word.encode(), key=word.encode(), anchors=sentence)

    def count(words_batch, collector):
        counts.update(value.decode() for value in words_batch.values())

    on = {"topology": topology, "connection": kafka_bootstrap}
    spout = Spout(
        **on,
        source_topics=sentences,
        group_id=f"{topology}-spout",
        emit_to=f"{topology}.sentences",
        tracking=Tracking(message_timeout_ms=120_000),
    )
    components = [
        AckerWorker(**on, tracking=Tracking(ackers=2, message_timeout_ms=120_000)),
        spout,
        BasicBolt(**on, source_topics=f"{topology}.sentences", group_id=f"{topology}-split", batch_handler=split),
        BasicBolt(**on, source_topics=words, group_id=f"{topology}-count", batch_handler=count),
    ]
    _run_word_count(
        kafka_bootstrap, topology, sentences, components, timeout=240, what="spout committed to the end of sentences"
    )
    assert spout.stats.completed == 2_000 and spout.stats.dead_lettered == 0
    expected = Counter(word for s in batch for word in s.split())
    assert set(counts) == set(expected) and all(counts[w] >= n for w, n in expected.items())
