"""The demo pipeline (the README's first command): word count with guaranteed processing.

An embedded broker, acker workers, a word-count job reading ``sentences`` (a generator fills it),
and a downstream Python bolt that fails a few percent of its tuples. Progress is printed live; the
summary is checked against the topics themselves, not printed blindly:
- lost = 0: every word of every sentence that was not dead-lettered is counted at least once;
- the job's consumer group committed offsets equal the end of the ``sentences`` topic;
- no tree is pending at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO, cast

from reliable_kafka.acker import AckerWorker
from reliable_kafka.bolt import BasicBolt, BoltCollector, Tuple
from reliable_kafka.config import Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import MissingExtraError, ReliableKafkaError
from reliable_kafka.local import Component, LocalCluster
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.spout import Spout
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics
from reliable_kafka.validation import require_choice

__all__ = ["run", "DemoSummary", "SENTENCES", "SimulatedFailure", "choose_engine", "intended_failures_in_one_line"]

STATUS_INTERVAL_S = 1.0  # the demo is short: its components report every second (default 5 s)

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SimulatedFailure(ReliableKafkaError, RuntimeError):
    """The count bolt's intended failures (``fail_rate``): logged in one line each, not a traceback."""


class _OneLineForSimulatedFailures(logging.Filter):
    """Logs the first ``shown`` records of a :class:`SimulatedFailure` in one line each (no
    traceback), then one line saying the rest are not logged: the demo fails a few percent of its
    tuples on purpose, and a traceback each (about 670 lines in a run) buried its progress, whose
    line counts them anyway. Any other exception keeps its traceback."""

    def __init__(self, shown: int) -> None:
        super().__init__()
        self.shown = shown
        self.seen = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, SimulatedFailure):
            return True
        judged = getattr(record, "rk_simulated_shown", None)
        if judged is not None:  # by this filter on another handler
            return bool(judged)
        self.seen += 1
        shown = self.seen <= self.shown
        if shown:
            more = " (further simulated failures are not logged: the progress line counts them)"
            record.msg = f"{record.getMessage()} ({error}){more if self.seen == self.shown else ''}"
            record.args, record.exc_info, record.exc_text = (), None, None
        record.rk_simulated_shown = shown  # a LogRecord takes extra attributes (as logging's extra=)
        return shown


@contextlib.contextmanager
def intended_failures_in_one_line(shown: int = 5) -> Iterator[None]:
    """While inside, the root logger's handlers (or Python's last-resort one) log the first
    ``shown`` of the demo's :class:`SimulatedFailure` in one line each, and no more."""
    handlers = list(logging.getLogger().handlers) or [h for h in (logging.lastResort,) if h is not None]
    one_line = _OneLineForSimulatedFailures(shown)
    for handler in handlers:
        handler.addFilter(one_line)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(one_line)


def choose_engine(engine: str | None) -> tuple[str, str | None]:
    """The word-count job's engine and a note for the user: ``None`` picks Spark when PySpark is
    installed, else the Python engine (the note says why); "spark" without PySpark raises
    :class:`MissingExtraError` at once, before a broker is started."""
    require_choice("demo", "engine", engine, (None, "spark", "python"))
    has_spark = importlib.util.find_spec("pyspark") is not None
    if engine == "spark" and not has_spark:
        raise MissingExtraError(
            "demo: the Spark engine needs PySpark, an optional dependency: pip install 'reliable-kafka[spark]' "
            "(or run the Python engine: --engine python)"
        )
    if engine is None and not has_spark:
        return (
            "python",
            "demo: PySpark is not installed (pip install 'reliable-kafka[spark]'): running the Python engine",
        )
    return engine or "spark", None


@dataclass
class DemoSummary:
    sentences: int
    completed: int
    replayed: int
    dead_lettered: int
    lost_words: int
    duplicate_words: int
    committed: dict[int, int]
    end: dict[int, int]
    pending: int
    seconds: float
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(self.checks.values())

    def render(self) -> str:
        lines = [
            "",
            "summary",
            f"  sentences written     {self.sentences}",
            f"  trees completed       {self.completed} (replays: {self.replayed})",
            f"  dead-lettered         {self.dead_lettered}",
            f"  words lost            {self.lost_words}",
            f"  duplicate word counts {self.duplicate_words} (at-least-once: replays count again)",
            f"  committed offsets     {self.committed}",
            f"  end of topic          {self.end}",
            f"  pending trees         {self.pending}",
            f"  time                  {self.seconds:.1f} s",
            "checks",
        ]
        lines += [f"  [{'ok' if passed else 'FAILED'}] {name}" for name, passed in self.checks.items()]
        return "\n".join(lines)


@contextlib.contextmanager
def _kafka(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from reliable_kafka.broker import EmbeddedKafka

    print("demo: starting an embedded Kafka broker...", flush=True)
    with EmbeddedKafka() as broker:
        print(f"demo: Kafka at {broker.bootstrap_servers}", flush=True)
        yield broker.bootstrap_servers


class _Job(Protocol):
    """What the demo needs of a word-count job, whichever engine runs it."""

    group_id: str
    components: list[Component]

    def stats(self) -> dict[str, int]: ...  # read, completed, replayed, dead_lettered, pending

    def start(self) -> None: ...

    def stop(self) -> None: ...


class _PythonJob:
    """Spout on `sentences` + split bolt: the Storm word count's front half, in threads."""

    def __init__(self, bootstrap: str, topology: str, sentences: str, words: str) -> None:
        self.group_id = f"{topology}-spout"
        on: dict[str, Any] = {"topology": topology, "connection": bootstrap}
        create_topics(bootstrap, {f"{topology}.sentences": 2})

        def split(sentence: Tuple, collector: BoltCollector) -> None:
            for word in cast(bytes, sentence.value).decode().split():  # every sentence has a value
                collector.emit(words, b"1", key=word.encode())  # (word, count) like the Spark job

        self.spout = Spout(
            **on,
            source_topics=sentences,
            group_id=self.group_id,
            emit_to=f"{topology}.sentences",
            tracking=Tracking(max_retries=10, backoff=Backoff(initial_ms=50, max_ms=1000)),
        )
        self.components: list[Component] = [
            self.spout,
            BasicBolt(**on, source_topics=f"{topology}.sentences", group_id=f"{topology}-split", handler=split),
        ]

    def start(self) -> None:
        pass  # its components run in the demo's LocalCluster

    def stop(self) -> None:
        pass

    def stats(self) -> dict[str, int]:
        s = self.spout.stats
        return {
            "read": s.read,
            "completed": s.completed,
            "replayed": s.replayed,
            "dead_lettered": s.dead_lettered,
            "pending": self.spout.tracker.pending_roots(),
        }


def _spark_job(bootstrap: str, topology: str, sentences: str, words: str) -> _Job:
    from reliable_kafka.spark.demo_job import SparkWordCount

    return SparkWordCount(bootstrap, topology, sentences, words)


def _generate(bootstrap: str, topic: str, count: int, rng: random.Random) -> list[str]:
    written = [rng.choice(SENTENCES) for _ in range(count)]
    chunk = max(1, count // 10)
    for start in range(0, count, chunk):  # a stream, not one burst: ten slices over a few seconds
        produce_values(bootstrap, topic, [s.encode() for s in written[start : start + chunk]])
        time.sleep(0.3)
    return written


def run(
    *,
    sentences: int = 20_000,
    fail_rate: float = 0.03,
    engine: str | None = None,
    bootstrap_servers: str | None = None,
    timeout_s: float = 600.0,
    out: TextIO = sys.stdout,
) -> DemoSummary:
    """Run the demo end to end and return its checked summary (also printed to ``out``).

    ``engine``: "spark", "python", or None for Spark when PySpark is installed (:func:`choose_engine`).
    Without ``bootstrap_servers`` an embedded broker is started."""
    engine, note = choose_engine(engine)  # before anything starts: a missing extra fails at once
    if note:
        print(note, file=out, flush=True)
    with intended_failures_in_one_line():
        return _run(sentences, fail_rate, engine, bootstrap_servers, timeout_s, out)


def _run(
    sentences: int, fail_rate: float, engine: str, bootstrap_servers: str | None, timeout_s: float, out: TextIO
) -> DemoSummary:
    started = time.monotonic()
    rng = random.Random(7)
    given_bootstrap = bootstrap_servers is not None
    with _kafka(bootstrap_servers) as bootstrap:
        topology = unique_name("demo")
        sentence_topic, word_topic = f"{topology}-sentences", f"{topology}-words"
        create_topics(bootstrap, {sentence_topic: 2, word_topic: 2})
        counted: Counter[str] = Counter()
        coin = random.Random(11)
        lock = threading.Lock()

        # the downstream bolt: fails a few percent of its tuples
        def count(word: Tuple, collector: BoltCollector) -> None:
            if coin.random() < fail_rate:
                raise SimulatedFailure("simulated failure in the count bolt")
            with lock:
                counted[cast(bytes, word.key).decode()] += int(cast(bytes, word.value))  # split's (word, count)

        on: dict[str, Any] = {"topology": topology, "connection": bootstrap}
        ackers = [AckerWorker(**on, tracking=Tracking(ackers=2), name=f"acker-{i}") for i in range(2)]
        counter = BasicBolt(**on, source_topics=word_topic, group_id=f"{topology}-count", handler=count)
        for component in (*ackers, counter):
            # an optional attribute that ops.reporter reads (getattr with a default)
            component.status_interval_s = STATUS_INTERVAL_S  # type: ignore[attr-defined]
        print(
            f"demo: topology {topology}, engine {engine}, {sentences} sentences, "
            f"count bolt fails {fail_rate:.0%} of tuples",
            flush=True,
        )
        with LocalCluster(*ackers, counter) as cluster:
            job = (
                _spark_job(bootstrap, topology, sentence_topic, word_topic)
                if engine == "spark"
                else _PythonJob(bootstrap, topology, sentence_topic, word_topic)
            )
            for component in [*job.components, getattr(job, "job", None)]:
                if component is not None:  # the same optional attribute as above
                    component.status_interval_s = STATUS_INTERVAL_S  # type: ignore[union-attr]
            job_cluster = LocalCluster(*job.components).start() if job.components else None
            try:
                job.start()
                written = _generate(bootstrap, sentence_topic, sentences, rng)
                ends = end_offsets(bootstrap, sentence_topic)

                def done() -> bool:
                    return committed_offsets(bootstrap, job.group_id, sentence_topic) == ends

                deadline = time.monotonic() + timeout_s
                while not done():
                    cluster.check()
                    if job_cluster:
                        job_cluster.check()
                    if time.monotonic() > deadline:
                        print("demo: timed out waiting for the commit to reach the end", flush=True)
                        break
                    _progress(job, bootstrap, sentence_topic, ends, out)
                    time.sleep(1.0)
                _progress(job, bootstrap, sentence_topic, ends, out, final=True)
                # let the last words of completed trees reach the counter (they were acked already)
                time.sleep(1.0)
                stats = job.stats()
                _show_status(bootstrap, topology, out)
            finally:
                job.stop()
                if job_cluster:
                    job_cluster.stop()
        dead = [(m.value() or b"").decode() for m in read_topic(bootstrap, TopologyTopics(topology).dlq)]
        expected = Counter(w for s in written for w in s.split())
        expected.subtract(Counter(w for s in dead for w in s.split()))
        lost = sum(max(0, n - counted[w]) for w, n in expected.items())
        duplicates = sum(max(0, counted[w] - max(n, 0)) for w, n in expected.items())
        committed = committed_offsets(bootstrap, job.group_id, sentence_topic)
        summary = DemoSummary(
            sentences=len(written),
            completed=stats["completed"],
            replayed=stats["replayed"],
            dead_lettered=len(dead),
            lost_words=lost,
            duplicate_words=duplicates,
            committed=committed,
            end=ends,
            pending=stats["pending"],
            seconds=time.monotonic() - started,
        )
        summary.checks = {
            "lost = 0 (every word of every sentence not dead-lettered was counted)": lost == 0,
            "committed offsets = end of the sentences topic": committed == ends,
            "every sentence completed or dead-lettered": stats["completed"] + len(dead) >= len(written),
            "no tree pending": stats["pending"] == 0,
        }
        print(summary.render(), file=out, flush=True)
        _how_to_watch(topology, bootstrap if given_bootstrap else None, out)
        return summary


def _progress(job: _Job, bootstrap: str, topic: str, ends: dict[int, int], out: TextIO, *, final: bool = False) -> None:
    """One progress line: a bar of the committed share of the sentences, then the job's counters.
    On a terminal the line is rewritten in place; otherwise each call prints a line."""
    s = job.stats()
    committed = committed_offsets(bootstrap, job.group_id, topic)
    done, total = sum(max(0, committed.get(p, 0)) for p in ends), max(1, sum(ends.values()))
    width = 24
    filled = int(width * done / total)
    line = (
        f"  [{'#' * filled}{'.' * (width - filled)}] {100 * done / total:5.1f}% committed {done}/{total} | "
        f"in {s['read']} | completed {s['completed']} | replayed {s['replayed']} | "
        f"dead-lettered {s['dead_lettered']} | pending {s['pending']}"
    )
    if getattr(out, "isatty", lambda: False)():
        print("\r\x1b[2K" + line, end="\n" if final else "", file=out, flush=True)
    else:
        print(line, file=out, flush=True)


def _show_status(bootstrap: str, topology: str, out: TextIO) -> None:
    """What ``reliable-kafka status`` says about the run, while its components still run."""
    from reliable_kafka.ops.status import build_report, render

    try:
        report = build_report(bootstrap, topology)
    except Exception as exc:  # the demo's checks do not depend on it
        print(f"demo: status not available: {exc}", file=out, flush=True)
        return
    print(f"\n$ reliable-kafka status --topology {topology} --bootstrap-servers {bootstrap}", file=out)
    print(render(report), file=out, flush=True)
    print(
        "(the ackers' pending roots are entries of their tables, not trees still in flight: once a tree\n"
        " failed, the acks of its other tuples arrive for a root the acker already decided and wait there\n"
        " until the message timeout drops them; the summary's pending trees are the spout's roots with no\n"
        " outcome yet)",
        file=out,
        flush=True,
    )


def _how_to_watch(topology: str, bootstrap: str | None, out: TextIO) -> None:
    if bootstrap:
        print(
            f"\nthis run's components have stopped; their last snapshots stay in {topology}.status:\n"
            f"  reliable-kafka status --topology {topology} --bootstrap-servers {bootstrap} [--json] [--watch]\n"
            f"  reliable-kafka ui --topology {topology} --bootstrap-servers {bootstrap} --port 8080\n"
            f"  (run them while a demo runs to watch it live)",
            file=out,
            flush=True,
        )
    else:
        print(
            "\nto watch a run live, keep a broker and point the demo at it, then in a second terminal:\n"
            "  reliable-kafka kafka up                      # prints the broker's address, B\n"
            "  reliable-kafka demo --bootstrap-servers B    # prints its topology name, T\n"
            "  reliable-kafka status --topology T --bootstrap-servers B --watch\n"
            "  reliable-kafka ui --topology T --bootstrap-servers B --port 8080   # http://127.0.0.1:8080/",
            file=out,
            flush=True,
        )
