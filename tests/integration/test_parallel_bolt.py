"""A parallel count bolt on the real broker: random handler failures and a SIGKILL mid-run.

The word count: sentences -> spout -> split bolt -> words (keyed by word) -> the count bolt with
``parallelism=32, ordering="key"``, run as its own process (tests/integration/parallel_bolt_script.py)
that raises on about 2% of its calls and writes each word's effect to an effects topic. The test
SIGKILLs that process once a good share of the words were counted, starts it again, and checks:

- no loss: every sentence has the effects of all its words, or is in the dead-letter topic;
- no early commit: every sampled committed offset of the spout lies below records whose effects
  were all written before the sample (reliable_kafka.chaos.checks.early_commits);
- per-key order within each incarnation of the bolt: calls of one key never overlap, and run in
  increasing offset order.

Each check was seen to fail on a mutant of the bolt (``--mutant`` of the script; see the module
docstring there): ``unordered`` breaks the order check, ``ack-first`` the early-commit check,
``drop`` the loss check. ``RK_PARALLEL_MUTANT=NAME`` runs these tests against one.

Also: a short chaos run with parallel bolts, and a parallel bolt in one process (LocalCluster) whose
every tree completes, with no dead letter and no call of one key overlapping another.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from reliable_kafka import AckerWorker, BasicBolt, LocalCluster, Loop, Spout, Tracking
from reliable_kafka.chaos.checks import early_commits
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

SCRIPT = Path(__file__).with_name("parallel_bolt_script.py")
SENTENCES = 1500
WORDS_PER_SENTENCE = 4
VOCABULARY = [f"w{i:02d}" for i in range(40)]
PARTITIONS = 4
KILL_AFTER_CALLS = 1500  # the count bolt is killed once it has finished this many calls
# the spout's message timeout: well above a run's length on a busy machine, so that trees replay
# because a call failed or the killed bolt's successor re-ran them, not because they timed out
TIMEOUT_MS = 60_000


def _sentence(i: int) -> bytes:
    words = [VOCABULARY[(i * 7 + j * 13) % len(VOCABULARY)] for j in range(WORDS_PER_SENTENCE)]
    return f"{i} {' '.join(words)}".encode()


class CountProcess:
    """The parallel count bolt as a separate process, which the test kills and starts again."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.argv, self.log_path = argv, log_path
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def check_alive(self) -> None:
        assert self.popen is not None
        if self.popen.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise AssertionError(f"the count bolt exited with {self.popen.returncode}:\n{tail}")


def _wait(condition, timeout: float, what: str, *, while_waiting=lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        while_waiting()
        time.sleep(0.2)


def _caught_up(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> bool:
    # an empty partition (unkeyed records may miss one) never gets a commit
    committed = committed_offsets(bootstrap, group, topic)
    return all(max(committed.get(partition, -1), 0) == end for partition, end in ends.items())


def _finished_calls(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for _ in file)
    except FileNotFoundError:
        return 0


def _sample(bootstrap: str, group: str, topic: str, samples: list, stop: threading.Event) -> None:
    while not stop.is_set():
        committed = committed_offsets(bootstrap, group, topic, timeout=10)
        samples.append((time.time(), committed))  # stamped after the read: the commit came before
        stop.wait(0.25)


def order_violations(lines: list[str]) -> list[str]:
    """Calls of one key that overlapped or ran out of offset order within one bolt process."""
    calls: dict[tuple[str, str], list[tuple[int, int, int, int]]] = defaultdict(list)
    for line in lines:
        pid, key, partition, offset, start, end, _ok = line.split()
        calls[(pid, key)].append((int(start), int(end), int(partition), int(offset)))
    violations = []
    for (pid, key), runs in calls.items():
        runs.sort()
        for (_, before_end, before_partition, before_offset), (start, _, partition, offset) in zip(runs, runs[1:]):
            if start < before_end:
                violations.append(f"pid {pid} key {key}: a call began before the previous one ended")
            elif partition == before_partition and offset <= before_offset:
                violations.append(f"pid {pid} key {key}: offset {offset} after {before_offset}")
    return violations


def lost_and_completion(bootstrap: str, sentences: str, effects: str, dlq: str):
    """(lost sentences, each sentence's position in the source, when each was complete)."""
    position = {
        int((m.value() or b"").split()[0]): (m.partition(), m.offset()) for m in read_topic(bootstrap, sentences)
    }
    first_seen: dict[bytes, float] = {}
    for message in read_topic(bootstrap, effects):
        stamp = message.timestamp()[1] / 1000
        first_seen[message.value() or b""] = min(first_seen.get(message.value() or b"", stamp), stamp)
    dead = {}
    for message in read_topic(bootstrap, dlq):
        dead[int((message.value() or b"").split()[0])] = message.timestamp()[1] / 1000
    complete_at, lost = {}, []
    for sentence in position:
        seen = [first_seen.get(f"{sentence}:{j}".encode()) for j in range(WORDS_PER_SENTENCE)]
        # done when its last effect was written or when it was dead-lettered, whichever came first
        # (a tree that timed out may still have its last effects written, from the bolt's backlog)
        done = [dead[sentence]] if sentence in dead else []
        if all(stamp is not None for stamp in seen):
            done.append(max(stamp for stamp in seen if stamp is not None))
        if done:
            complete_at[sentence] = min(done)
        else:
            lost.append(sentence)
    return lost, position, complete_at


def run_word_count(bootstrap: str, tmp_path: Path, *, use_async: bool) -> dict:
    topology = unique_name("pwc")
    sentences, stage, words, effects = (f"{topology}.{name}" for name in ("source", "sentences", "words", "effects"))
    create_topics(bootstrap, {name: PARTITIONS for name in (sentences, stage, words, effects)})
    topics = TopologyTopics(topology, ackers=2)
    ensure_topics(admin_client(bootstrap), topics)
    produce_values(bootstrap, sentences, [_sentence(i) for i in range(SENTENCES)])

    def split(sentence, collector):
        number, *tokens = sentence.value.split()
        for j, word in enumerate(tokens):
            collector.emit(words, b"%s:%d" % (number, j), key=word)

    on = {"topology": topology, "connection": bootstrap}
    spout = Spout(
        **on,
        source_topics=sentences,
        group_id=f"{topology}-spout",
        emit_to=stage,
        tracking=Tracking(message_timeout_ms=TIMEOUT_MS),
        loop=Loop(commit_interval_ms=250),
    )
    components = [
        AckerWorker(**on, tracking=Tracking(ackers=2, message_timeout_ms=TIMEOUT_MS)),
        spout,
        BasicBolt(**on, source_topics=stage, group_id=f"{topology}-split", handler=split),
    ]
    calls = tmp_path / "calls.txt"
    argv = [sys.executable, str(SCRIPT), "--bootstrap", bootstrap, "--topology", topology]
    argv += ["--words", words, "--effects", effects, "--calls", str(calls)]
    argv += ["--async"] if use_async else []
    mutant = os.environ.get("RK_PARALLEL_MUTANT")
    argv += ["--mutant", mutant] if mutant else []
    count = CountProcess(argv, tmp_path / "count.log")
    samples: list = []
    stop_sampling = threading.Event()
    sampler = threading.Thread(
        target=_sample, args=(bootstrap, f"{topology}-spout", sentences, samples, stop_sampling), daemon=True
    )
    ends = end_offsets(bootstrap, sentences)
    try:
        with LocalCluster(*components) as cluster:
            sampler.start()
            count.start()
            _wait(
                lambda: _finished_calls(calls) >= KILL_AFTER_CALLS,
                120,
                f"{KILL_AFTER_CALLS} calls of the count bolt",
                while_waiting=lambda: (count.check_alive(), cluster.check()),
            )
            count.kill()
            calls_before_kill = _finished_calls(calls)
            count.start()  # the restarted bolt: the same group, the same topics
            _wait(
                lambda: _caught_up(bootstrap, f"{topology}-spout", sentences, ends),
                240,
                "every sentence committed by the spout",
                while_waiting=lambda: (count.check_alive(), cluster.check()),
            )
            time.sleep(1.0)  # a last sample after the end
    finally:
        stop_sampling.set()
        if sampler.is_alive():
            sampler.join()
        count.stop()
    lost, position, complete_at = lost_and_completion(bootstrap, sentences, effects, topics.dlq)
    lines = calls.read_text().splitlines()
    return {
        "lost": lost,
        "early": early_commits(samples, position, complete_at),
        "samples": len(samples),
        "order": order_violations(lines),
        "incarnations": len({line.split()[0] for line in lines}),
        "calls_before_kill": calls_before_kill,
        "failed_calls": sum(1 for line in lines if line.endswith(" 0")),
        "dead_lettered": sum(end_offsets(bootstrap, topics.dlq).values()),
    }


def _check(result: dict) -> None:
    summary = {name: len(value) if isinstance(value, list) else value for name, value in result.items()}
    print(f"parallel word count: {summary}")  # shown with -s: calls, failures, dead letters, samples
    assert result["incarnations"] == 2, result  # the SIGKILL hit a running bolt, which came back
    assert result["failed_calls"] > 0, result  # the injected failures happened
    assert result["lost"] == [], f"{len(result['lost'])} sentences lost: {result['lost'][:10]}"
    assert result["samples"] > 5 and result["early"] == [], f"early commits: {result['early'][:5]}"
    assert result["order"] == [], f"{len(result['order'])} per-key order violations: {result['order'][:5]}"


@pytest.mark.slow
def test_thread_pool_count_bolt_survives_failures_and_a_sigkill(kafka_bootstrap, tmp_path):
    _check(run_word_count(kafka_bootstrap, tmp_path, use_async=False))


@pytest.mark.slow
def test_async_count_bolt_survives_failures_and_a_sigkill(kafka_bootstrap, tmp_path):
    _check(run_word_count(kafka_bootstrap, tmp_path, use_async=True))


# --- the checks themselves (no broker) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "violated"),
    [
        (["1 a 0 5 0 1 1", "1 a 0 6 2 3 1", "2 a 0 5 0 1 1"], False),  # a new incarnation may replay
        (["1 a 0 5 0 3 1", "1 a 0 6 2 4 1"], True),  # overlapping calls of one key
        (["1 a 0 6 0 1 1", "1 a 0 5 2 3 1"], True),  # offsets out of order
        (["1 a 0 5 0 3 1", "1 b 0 6 1 2 1"], False),  # different keys may overlap
    ],
)
def test_order_violations_sees_overlap_and_reordering(lines, violated):
    assert bool(order_violations(lines)) is violated


@pytest.mark.slow
def test_chaos_kills_parallel_bolts_among_the_other_processes():
    from reliable_kafka.chaos.harness import ChaosConfig, run

    report = run(
        ChaosConfig(
            records=2000,
            produce_seconds=15,
            kill_interval=(1.0, 2.0),
            broker_restarts=0,
            message_timeout_ms=10_000,
            settle_timeout=180,
            seed=7,
            parallelism=16,
        )
    )
    assert report.kills["split"] + report.kills["sink"] >= 1, report.render()  # parallel bolts were killed
    assert report.lost == 0 and not report.early_commits and report.caught_up, report.render()


# --- in one process (LocalCluster): every tree completes, in key order -----------------------------

RECORDS = 2_000


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_parallel_bolt_with_random_failures_completes_every_tree_in_key_order(kafka_bootstrap, kind):
    topology = unique_name("par")
    source, mid = f"{topology}-src", f"{topology}.mid"
    create_topics(kafka_bootstrap, {source: 4, mid: 4})
    keys = [b"key-%d" % (i % 50) for i in range(RECORDS)]
    produce_values(kafka_bootstrap, source, [b"%d" % i for i in range(RECORDS)], keys=keys)
    lock = threading.Lock()
    running: set[bytes] = set()
    overlaps: list[bytes] = []
    calls: dict[tuple[int, bytes], list[int]] = defaultdict(list)  # (mid partition, key) -> offsets, call order
    handled: set[bytes] = set()
    rng = random.Random(26)

    def begin(tuple_) -> tuple[float, bool]:
        with lock:
            if tuple_.key in running:
                overlaps.append(tuple_.key)
            running.add(tuple_.key)
            calls[(tuple_.partition, tuple_.key)].append(tuple_.offset)
            return 0.002 + 0.003 * rng.random(), rng.random() < 0.05

    def end(tuple_, fails: bool) -> None:
        with lock:
            running.discard(tuple_.key)
            if not fails:
                handled.add(tuple_.value)
        if fails:
            raise RuntimeError("transient failure")

    def handler(tuple_, collector):
        pause, fails = begin(tuple_)
        time.sleep(pause)
        end(tuple_, fails)

    async def async_handler(tuple_, collector):
        pause, fails = begin(tuple_)
        await asyncio.sleep(pause)
        end(tuple_, fails)

    on = {"topology": topology, "connection": kafka_bootstrap}
    chosen = handler if kind == "threads" else async_handler
    bolt = BasicBolt(**on, source_topics=mid, group_id=f"{topology}-bolt", handler=chosen, parallel=16)
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=mid,
        tracking=Tracking(
            max_retries=30, backoff=Backoff(initial_ms=20, multiplier=2.0, max_ms=200), message_timeout_ms=120_000
        ),
    )
    components = [AckerWorker(**on, tracking=Tracking(ackers=2, message_timeout_ms=120_000)), spout, bolt]
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: (
                committed_offsets(kafka_bootstrap, f"{topology}-spout", source) == end_offsets(kafka_bootstrap, source)
            ),
            timeout=240,
            what="the spout committed to the end of its source (every tree completed)",
            progress=lambda: f"spout {spout.stats}, bolt {bolt.stats}",
        )
    assert spout.stats.completed == RECORDS and spout.stats.dead_lettered == 0
    assert handled == {b"%d" % i for i in range(RECORDS)}, "a record was never handled without a raise"
    assert bolt.stats.failed > 0 and bolt.stats.handler_errors == bolt.stats.failed  # the raises happened
    assert not overlaps, f"calls of one key overlapped: {overlaps[:5]}"
    for (partition, key), offsets in calls.items():
        assert offsets == sorted(offsets), f"{key!r} on {mid}[{partition}] ran out of offset order: {offsets}"
    stats = bolt.stats
    assert stats.received == stats.acked + stats.failed + stats.quarantined + stats.abandoned
