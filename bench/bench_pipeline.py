"""Storm's word count through Kafka: throughput, CPU and latency of plain, untracked and tracked.

The pipeline (issue 11): a spout reads ``source`` and forwards each sentence to ``sentences``; a
split bolt emits its 8 words to ``words``; a count bolt counts them; with tracking, one acker.
Every component is its own OS process (``spawn``), on one embedded broker, and the configurations
run side by side in one run, alternating:

* ``plain``: the same work as plain confluent-kafka loops (consume(500) -> produce -> consume ->
  count), default client settings, no tracking;
* ``off``: reliable-kafka with tracking off (``Spout(guarantee="none")``: no root, no INIT, no
  commit metadata; the bolts see untracked tuples and send no acks). ``ackers=0`` also turns
  tracking off but keeps the tracker and its commits (``--with-ackers0`` measures it too);
* ``tracked``: reliable-kafka, at-least-once, one acker process.

Figures, per configuration: sentences/s (the run's median of ``--rounds`` bursts of ``--sentences``
sentences, from the first write to the last word counted; tracked also until the spout learned
the last COMPLETED), the ratio to plain, CPU seconds per 1,000 sentences of each process and of
the broker JVM, and what each process asked of the broker (produce/fetch requests, records per
produce batch, commits) from librdkafka's statistics. Then LocalCluster figures (all components as
threads of one process). Then latency: sentences written at an offered rate for a few seconds per
point (1,000 sentences where that takes at most 12 s: 12 s at 10/s, 10 s at 100/s), rising from
10/s until the pipeline saturates; p50/p99 of source timestamp -> counted (all) and source
timestamp -> the spout learns COMPLETED (tracked), and a summary of completion latency at 10, 100
and 1,000 sentences/s. The curve is written as a PNG (matplotlib, the ``bench`` extra). Prints figures, asserts nothing.

Also: CPU seconds per 1,000 sentences at each offered rate, and each process's CPU at idle.

The broker's figure leaves out its JIT compiler threads (C1, C2), printed apart as "broker JIT"
and not counted in totals and CPU ratios: a young broker JVM spends minutes of CPU compiling Kafka's
code, about half a fresh broker's CPU over a run, most of it while tracked ran (the configuration
that exercises the most code). On a broker it starts itself the run also makes one untimed burst of
each configuration first (``--no-broker-warmup`` skips it). docs/performance.md has the profile.

Usage: ``./rk bench pipeline [--sentences N] [--rates 500,1000,...] [--quick] [--configs off,tracked]
[--no-throughput] [--no-broker-warmup] [--hops] [--kafka-config JSON] [--bootstrap-servers H:P [--broker-pid PID]]``.
Sized for a 2-core machine: the default run takes a few minutes, ``--quick`` about two.
``RK_BENCH_PROFILE=DIR`` runs every component process under cProfile (``DIR/<config>-<role>.prof``).
``RK_BENCH_BROKER_THREADS=1`` prints each burst's broker CPU per 1,000 sentences by thread name (from
/proc, JIT included), and with it ``RK_BENCH_BURST_HOOK=CMD`` runs ``CMD CONFIG PHASE before|after``
around each burst, outside its CPU figures (``bench/broker_requests.py``: the broker's requests by type).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reliable_kafka import Tracking

WORDS_PER_SENTENCE = 8
VOCABULARY = [f"w{i:03d}" for i in range(1000)]
PARTITIONS = 2  # of source, sentences and words
STATS_INTERVAL_MS = 1000
SATURATED_P99_MS = 2000.0  # a rate point whose p99 passes this (or does not drain) ends the curve
WARM_STEADY_RATE, WARM_STEADY_ROUNDS = 1000.0, 12  # the broker warm-up's steady part: 5 s rounds at this rate
WARM_JIT_SETTLED = 0.1  # ...until the JIT takes under this many CPU seconds per 1,000 sentences
# a low rate's point lasts longer (up to LOW_RATE_MAX_S): the p99 of 300 sentences is its third-slowest
MIN_SENTENCES_PER_POINT = 1000
LOW_RATE_MAX_S = 12.0
SUMMARY_RATES = (10, 100, 1000)  # completion p50/p99 printed side by side at the end (target: p99 <= 100 ms)
CONFIGS = ("plain", "off", "tracked")
FLOOR = "floor"  # --configs plain,tracked,floor: the protocol's own work in plain loops (bench/pipeline_floor.py)


def _tracks(config: str) -> bool:
    """The configurations with an acker, whose bursts end when the spout learned every COMPLETED."""
    return config.startswith("tracked") or config == FLOOR


# --- what every component process does ----------------------------------------------------------


def _now_ms() -> float:
    return time.time() * 1000.0


class _Probe:
    """Counters and latencies a component process reports to the parent."""

    def __init__(self, counter, completed) -> None:
        self.counter = counter  # words counted (count role), shared with the parent
        self.completed = completed  # trees completed (tracked spout), shared with the parent
        self.latencies: dict[int, list[float]] = defaultdict(list)  # phase -> ms
        self.completion: dict[int, list[float]] = defaultdict(list)
        self.hops: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))  # --hops
        self.client_stats: dict[str, dict] = {}  # client name -> last librdkafka statistics
        self._stopped_at: float | None = None

    def stats_cb(self, raw: str) -> None:
        stats = json.loads(raw)
        self.client_stats[stats["name"]] = stats

    def running(self, stop) -> bool:
        """False once ``stop`` has been set for 1.5 statistics intervals.

        librdkafka reports statistics only every interval, so a client stopped at once would report
        nothing of a burst shorter than that (every plain process printed 0 requests). The extra
        polls come after the burst's CPU is measured.
        """
        if not stop.is_set():
            return True
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        return time.monotonic() - self._stopped_at < 1.5 * STATS_INTERVAL_MS / 1000

    def counted(self, value: bytes) -> None:
        phase, stamp = value.split(b" ", 1)
        self.latencies[int(phase)].append(_now_ms() - float(stamp))
        self.counter.value += 1

    def hop(self, name: str, value: bytes, appended_ms: int) -> None:
        """With --hops: ``value``'s source timestamp -> broker append of the record read now, and
        that append -> now (the data topics keep LogAppendTime)."""
        now = _now_ms()
        phase, stamp = value.split(b" ", 2)[:2]
        hops = self.hops[int(phase)]
        hops[f"{name} appended"].append(appended_ms - float(stamp))
        hops[f"{name} read"].append(now - float(stamp))


def _split_words(value: bytes) -> tuple[bytes, list[bytes]]:
    """``b"phase ts w1 .. w8"`` -> (``b"phase ts"``, words)."""
    parts = value.split(b" ")
    return parts[0] + b" " + parts[1], parts[2:]


def _client_config(probe: _Probe, extra: dict | None = None) -> dict:
    return {**(extra or {}), "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": probe.stats_cb}


def _plain_role(role: str, topics: dict, bootstrap: str, probe: _Probe, stop, ready) -> None:
    """The plain confluent-kafka loops: default client settings, auto commit, no tracking."""
    from confluent_kafka import Consumer, Producer

    common = {"bootstrap.servers": bootstrap, **_client_config(probe)}
    source = {"spout": topics["source"], "split": topics["sentences"], "count": topics["words"]}[role]
    consumer = Consumer({**common, "group.id": f"{topics['topology']}-{role}", "auto.offset.reset": "earliest"})
    consumer.subscribe([source], on_assign=lambda c, p: ready.set())
    producer: Any = Producer(common) if role != "count" else None  # Any: no None check in the loop
    counts: dict[bytes, int] = defaultdict(int)
    try:
        while probe.running(stop):
            messages: list[Any] = consumer.consume(500, 0.1)  # Any: no None checks in the loop
            for message in messages:
                if message.error() is not None:
                    continue
                if role == "spout":
                    producer.produce(topics["sentences"], message.value(), key=message.key())
                elif role == "split":
                    prefix, words = _split_words(message.value())
                    for word in words:
                        while True:
                            try:
                                producer.produce(topics["words"], prefix, key=word)
                                break
                            except BufferError:  # librdkafka's queue is full: wait for room, as any producer must
                                producer.poll(0.01)
                else:
                    counts[message.key()] += 1
                    probe.counted(message.value())
            if producer is not None:
                producer.poll(0)
    finally:
        consumer.close()
        if producer is not None:
            producer.flush(10)


def _tracked_spout_class(hops: bool = False):
    from reliable_kafka.spout import Spout

    class TimedSpout(Spout):
        """Records source timestamp -> COMPLETED per phase (the bench's only hook into the spout)."""

        probe: _Probe

        def _completed(self, record) -> None:  # a spout before the batch hook (a baseline checkout)
            super()._completed(record)
            phase, stamp = record.value.split(b" ", 2)[:2]
            self.probe.completion[int(phase)].append(_now_ms() - float(stamp))
            self.probe.completed.value += 1

        def _completed_many(self, records) -> None:
            # one clock read and one shared-counter write per outcome batch, as the spout acts on it
            now = _now_ms()
            completion = self.probe.completion
            for record in records:
                phase, stamp = record.value.split(b" ", 2)[:2]
                completion[int(phase)].append(now - float(stamp))
            self.probe.completed.value += len(records)

    class HopsSpout(TimedSpout):
        """--hops: also notes each record's source hop (a per-record hook: the spout then forwards
        record by record, not a batch at a time)."""

        def _process(self, record) -> None:
            if record.attempt == 1:
                self.probe.hop("source", record.value, record.timestamp_ms)
            super()._process(record)

    return HopsSpout if hops else TimedSpout


def _ours(role: str, config: str, topics: dict, bootstrap: str, probe: _Probe):
    from reliable_kafka import AckerWorker, Connection
    from reliable_kafka.bolt import BasicBolt

    on = {
        "topology": topics["topology"],
        "connection": Connection(bootstrap, kafka_config=_client_config(probe, topics.get("kafka_config"))),
    }
    if role == "acker":
        acker = AckerWorker(**on, tracking=Tracking(ackers=1), name="acker")
        return acker
    if role == "spout":
        tracking = (
            Tracking(guarantee="at_least_once")
            if config.startswith("tracked")
            else Tracking(guarantee="at_least_once", ackers=0)
            if config == "ackers0"
            else Tracking(guarantee="none")
        )
        spout = _tracked_spout_class(hops=bool(topics.get("hops")))(
            **on,
            source_topics=topics["source"],
            group_id=f"{topics['topology']}-spout",
            emit_to=topics["sentences"],
            tracking=tracking,
        )
        spout.probe = probe
        return spout
    if role == "split":
        hops = bool(topics.get("hops"))

        def split(sentence, collector):
            if hops:
                probe.hop("sentences", sentence.value, sentence.timestamp_ms)
            prefix, words = _split_words(sentence.value)
            for word in words:
                collector.emit(topics["words"], prefix, key=word)

        return BasicBolt(**on, source_topics=topics["sentences"], group_id=f"{topics['topology']}-split", handler=split)
    counts: dict[bytes, int] = defaultdict(int)
    hops = bool(topics.get("hops"))

    def count(word, collector):
        counts[word.key] += 1
        if hops:
            probe.hop("words", word.value, word.timestamp_ms)
        probe.counted(word.value)

    return BasicBolt(**on, source_topics=topics["words"], group_id=f"{topics['topology']}-count", handler=count)


def component_main(
    roles: list[str], config: str, topics: dict, bootstrap: str, counter, completed, ready, stop, results
) -> None:
    """One component process (or, with several roles, a LocalCluster of threads).

    With ``RK_BENCH_PROFILE=DIR`` in the environment each process runs under cProfile and writes
    ``DIR/<config>-<roles>.prof`` (``python -m pstats`` reads it; threads: the main thread only).
    """
    profile_dir = os.environ.get("RK_BENCH_PROFILE")
    if profile_dir:
        import cProfile

        profiler = cProfile.Profile()
        try:
            if len(roles) == 1 and config != "plain":  # in this thread, where cProfile sees it
                probe = _Probe(counter, completed)
                component = _ours(roles[0], config, topics, bootstrap, probe)
                component.start()
                ready.set()
                profiler.enable()
                while probe.running(stop):
                    component.poll_once()
                profiler.disable()
                component.close()
                results.put(
                    {
                        "roles": roles,
                        "latencies": dict(probe.latencies),
                        "completion": dict(probe.completion),
                        "hops": {phase: dict(hops) for phase, hops in probe.hops.items()},
                        "client_stats": probe.client_stats,
                    }
                )
            else:
                profiler.enable()
                _component(roles, config, topics, bootstrap, counter, completed, ready, stop, results)
        finally:
            profiler.disable()
            profiler.dump_stats(Path(profile_dir) / f"{config}-{'+'.join(roles)}.prof")
        return
    _component(roles, config, topics, bootstrap, counter, completed, ready, stop, results)


def _component(roles, config, topics, bootstrap, counter, completed, ready, stop, results) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    probe = _Probe(counter, completed)
    if config == "plain":
        _plain_role(roles[0], topics, bootstrap, probe, stop, ready)
    elif config == FLOOR and roles != ["acker"]:
        import pipeline_floor  # a sibling file (bench/ is on sys.path, as for the parent)

        if len(roles) != 1:
            raise ValueError("the floor configuration runs one process per component (no LocalCluster)")
        pipeline_floor.floor_role(
            roles[0],
            topics,
            bootstrap,
            probe,
            stop,
            ready,
            client_config=lambda: _client_config(probe),
            split_words=_split_words,
            now_ms=_now_ms,
        )
    else:
        from reliable_kafka.local import LocalCluster

        cluster = LocalCluster(*[_ours(role, config, topics, bootstrap, probe) for role in roles])
        cluster.start(ready_timeout=120)
        ready.set()
        while not stop.wait(0.2):
            cluster.check()
        while probe.running(stop):  # the clients' last statistics
            time.sleep(0.1)
        cluster.stop()
    results.put(
        {
            "roles": roles,
            "latencies": dict(probe.latencies),
            "completion": dict(probe.completion),
            "hops": {phase: dict(hops) for phase, hops in probe.hops.items()},
            "client_stats": probe.client_stats,
        }
    )


# --- the parent: topics, feeding, measuring -----------------------------------------------------


def _sentence_pool(size: int = 1000) -> list[str]:
    rng = random.Random(11)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(WORDS_PER_SENTENCE)) for _ in range(size)]


def _cpu_seconds(pid: int) -> float:
    try:
        import psutil

        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except ImportError:  # /proc/<pid>/stat: utime and stime are fields 14 and 15, in clock ticks
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_tree(pid: int) -> list[int]:
    try:
        import psutil

        root = psutil.Process(pid)
        return [root.pid] + [child.pid for child in root.children(recursive=True)]
    except ImportError:  # without psutil the broker's JVM (a child of its watchdog) was not counted
        return _process_tree_from_proc(pid)
    except Exception:
        return []


def _process_tree_from_proc(pid: int) -> list[int]:
    """``pid`` and its descendants, from the parent pid in each /proc/<pid>/stat (field 4)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return tree


JIT = "broker JIT"  # the broker JVM compiling its code: a one-off of a young broker, not counted in totals


def _jit_seconds(pid: int) -> float:
    """CPU seconds of the JIT compiler threads (C1, C2) of JVM ``pid``, from /proc (0 elsewhere)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    total = 0
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        if "CompilerThre" in stat[stat.index("(") + 1 : stat.rindex(")")]:  # "C2 CompilerThread0", cut to 15
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _thread_ticks(pids: list[int]) -> dict[str, int]:
    """Clock ticks of CPU per thread name (digits folded: ``data-plane-kafka-request-handler-N``) of
    the processes ``pids``, from /proc: ``RK_BENCH_BROKER_THREADS=1`` prints the broker's by burst."""
    import re

    ticks: dict[str, int] = defaultdict(int)
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue  # the thread ended meanwhile
            fields = stat.rsplit(")", 1)[1].split()
            name = re.sub(r"\d+", "N", stat[stat.index("(") + 1 : stat.rindex(")")])
            ticks[name] += int(fields[11]) + int(fields[12])
    return ticks


def _print_thread_ticks(config: str, before: dict[str, int], after: dict[str, int], sentences: int) -> None:
    spent = {name: after[name] - before.get(name, 0) for name in after}
    per = 1000 / sentences / os.sysconf("SC_CLK_TCK")
    top = sorted(spent.items(), key=lambda item: -item[1])[:8]
    print(
        f"  broker threads, {config}: total {sum(spent.values()) * per:.4f} s/1,000 | "
        + "  ".join(f"{name} {value * per:.4f}" for name, value in top if value),
        flush=True,
    )


@dataclass
class Burst:
    """One throughput burst of one configuration."""

    config: str
    sentences: int
    seconds: float
    completed_seconds: float | None
    cpu: dict[str, float]  # process -> CPU seconds during the burst

    @property
    def rate(self) -> float:
        return self.sentences / self.seconds


@dataclass
class RatePoint:
    config: str
    offered: float
    achieved: float
    counted_p50: float
    counted_p99: float
    completed_p50: float | None = None
    completed_p99: float | None = None
    saturated: bool = False
    cpu: dict = field(default_factory=dict)  # process -> CPU seconds per 1,000 sentences offered


@dataclass
class Pipeline:
    """The components of one configuration, running, with their topics and shared counters."""

    config: str
    bootstrap: str
    broker_pids: list[int]
    threads: bool = False
    kafka_config: dict | None = None  # librdkafka settings for reliable-kafka's components
    hops: bool = False  # data topics keep LogAppendTime; components note each hop (--hops)
    topics: dict = field(default_factory=dict)
    processes: dict = field(default_factory=dict)
    results: list = field(default_factory=list)
    written: int = 0
    phase: int = 0

    def start(self, ctx, pool: list[str]) -> Pipeline:
        from confluent_kafka import Producer

        from reliable_kafka.kafka.admin import admin_client, ensure_topics
        from reliable_kafka.testing.topics import create_topics, unique_name
        from reliable_kafka.topology import TopologyTopics

        topology = unique_name(f"bench-{self.config}")
        self.topics = {
            "topology": topology,
            "source": f"{topology}-source",
            "sentences": f"{topology}-sentences",
            "words": f"{topology}-words",
            "kafka_config": self.kafka_config,
            "hops": self.hops,
        }
        create_topics(
            self.bootstrap,
            {self.topics[t]: PARTITIONS for t in ("source", "sentences", "words")},
            config={"message.timestamp.type": "LogAppendTime"} if self.hops else None,
        )
        ensure_topics(admin_client(self.bootstrap), TopologyTopics(topology, ackers=1))
        roles = ["spout", "split", "count"] + (["acker"] if _tracks(self.config) else [])
        groups = [roles] if self.threads else [[role] for role in roles]
        self.counter, self.completed = ctx.Value("q", 0, lock=False), ctx.Value("q", 0, lock=False)
        self._stop, self._results = ctx.Event(), ctx.Queue()
        readies = []
        for group in groups:
            ready = ctx.Event()
            process = ctx.Process(
                target=component_main,
                name="+".join(group),
                daemon=True,
                args=(
                    group,
                    self.config,
                    self.topics,
                    self.bootstrap,
                    self.counter,
                    self.completed,
                    ready,
                    self._stop,
                    self._results,
                ),
            )
            process.start()
            self.processes["+".join(group) if self.threads else group[0]] = process
            readies.append((group, ready, process))
        deadline = time.monotonic() + 120
        for group, ready, process in readies:
            while not ready.wait(0.2):
                if not process.is_alive() or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.config}: component {group} did not start")
        self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 1})
        self._pool = pool
        return self

    def cpu(self) -> dict[str, float]:
        figures = {name: _cpu_seconds(process.pid) for name, process in self.processes.items()}
        jit = sum(_jit_seconds(pid) for pid in self.broker_pids)
        figures["broker"] = sum(_cpu_seconds(pid) for pid in self.broker_pids) - jit
        figures[JIT] = jit
        return figures

    def _write(self, count: int, phase: int) -> None:
        for _ in range(count):
            sentence = self._pool[self.written % len(self._pool)]
            value = f"{phase} {_now_ms():.3f} {sentence}".encode()
            while True:
                try:
                    self._producer.produce(self.topics["source"], value, partition=self.written % PARTITIONS)
                    break
                except BufferError:
                    self._producer.poll(0.01)
            self.written += 1
        self._producer.poll(0)

    def drained(self) -> bool:
        return self.counter.value >= self.written * WORDS_PER_SENTENCE and (
            not _tracks(self.config) or self.completed.value >= self.written
        )

    def wait(self, condition, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            for name, process in self.processes.items():
                if not process.is_alive():
                    raise RuntimeError(f"{self.config}: component {name} died (exit code {process.exitcode})")
            time.sleep(0.005)
        return True

    def burst(self, sentences: int, timeout: float) -> Burst:
        """``sentences`` written as fast as the pipeline takes them; timed until all are counted."""
        self.phase += 1
        words_before = self.counter.value
        threads = bool(os.environ.get("RK_BENCH_BROKER_THREADS")) and sentences >= 5000
        hook = os.environ.get("RK_BENCH_BURST_HOOK") if threads else None  # a command run before and after
        if hook:
            import subprocess

            subprocess.run([hook, self.config, str(self.phase), "before"], check=False)
        ticks_before = _thread_ticks(self.broker_pids) if threads else {}
        cpu_before = self.cpu()
        started = time.perf_counter()
        for start in range(0, sentences, 1000):
            self._write(min(1000, sentences - start), self.phase)
        self._producer.flush(30)
        target = words_before + sentences * WORDS_PER_SENTENCE
        if not self.wait(lambda: self.counter.value >= target, timeout):
            raise RuntimeError(
                f"{self.config}: burst not counted within {timeout:.0f}s "
                f"({self.counter.value - words_before} of {target - words_before} words)"
            )
        counted = time.perf_counter() - started
        completed = None
        if _tracks(self.config):
            if not self.wait(self.drained, timeout):
                raise RuntimeError(f"{self.config}: burst not completed within {timeout:.0f}s")
            completed = time.perf_counter() - started
        cpu_after = self.cpu()
        if threads:
            _print_thread_ticks(self.config, ticks_before, _thread_ticks(self.broker_pids), sentences)
        if hook:
            subprocess.run([hook, self.config, str(self.phase), "after"], check=False)
        return Burst(
            self.config, sentences, counted, completed, {name: cpu_after[name] - cpu_before[name] for name in cpu_after}
        )

    def offer(self, rate: float, seconds: float, drain_timeout: float) -> tuple[int, float, bool, dict]:
        """Write at ``rate`` sentences/s for ``seconds``; returns (phase, achieved rate, drained, CPU
        seconds per 1,000 sentences of each process while writing and draining)."""
        self.phase += 1
        cpu_before = self.cpu()
        tick = 0.005
        started = time.perf_counter()
        written_at_start = self.written
        counted_before = self.counter.value
        while (elapsed := time.perf_counter() - started) < seconds:
            due = int(rate * elapsed) - (self.written - written_at_start)
            if due > 0:
                self._write(due, self.phase)
            self._producer.poll(0)
            time.sleep(tick)
        self._producer.flush(30)
        achieved_words = self.counter.value - counted_before
        drained = self.wait(self.drained, drain_timeout)
        cpu_after, sentences = self.cpu(), max(1, self.written - written_at_start)
        cpu = {name: (cpu_after[name] - cpu_before[name]) / sentences * 1000 for name in cpu_after}
        return self.phase, achieved_words / WORDS_PER_SENTENCE / seconds, drained, cpu

    def stop(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + 60
        while len(self.results) < len(self.processes) and time.monotonic() < deadline:
            try:
                self.results.append(self._results.get(timeout=1))
            except Exception:
                if not any(p.is_alive() for p in self.processes.values()):
                    break
        for process in self.processes.values():
            process.join(10)
            if process.is_alive():
                process.kill()

    def latencies(self, phase: int, kind: str) -> list[float]:
        return [ms for result in self.results for ms in result[kind].get(phase, [])]

    def hop_line(self, phase: int) -> str:
        """--hops: p50 / p99 ms from the source timestamp to each hop's broker append and read."""
        hops: dict[str, list[float]] = defaultdict(list)
        for result in self.results:
            for name, values in result["hops"].get(phase, {}).items():
                hops[name].extend(values)
        order = [f"{topic} {step}" for topic in ("source", "sentences", "words") for step in ("appended", "read")]
        return "  ".join(
            f"{name} {_percentile(hops[name], 0.5):.0f}/{_percentile(hops[name], 0.99):.0f}"
            for name in order
            if hops[name]
        )

    def client_totals(self) -> dict[str, dict[str, Any]]:
        """Per process: produce/fetch/commit requests and records per produce batch (librdkafka)."""
        totals = {}
        for result in self.results:
            name = "+".join(result["roles"])
            tx = rx = produce = fetch = commit = records = 0
            by_topic: dict[str, int] = {}
            other: dict[str, int] = defaultdict(int)  # the other request types (Heartbeat, Metadata...)
            for stats in result["client_stats"].values():
                for broker in stats.get("brokers", {}).values():  # the group coordinator's too
                    tx += broker.get("tx", 0)
                    rx += broker.get("rx", 0)
                    for request, count in broker.get("req", {}).items():
                        if request == "Produce":
                            produce += count
                        elif request == "Fetch":
                            fetch += count
                        elif request == "OffsetCommit":
                            commit += count
                        elif count:
                            other[request] += count
                for topic_name, topic in stats.get("topics", {}).items():
                    sent = sum(p.get("txmsgs", 0) for pid, p in topic.get("partitions", {}).items() if int(pid) >= 0)
                    if sent:
                        by_topic[topic_name.rsplit("-", 1)[-1].rsplit(".", 1)[-1]] = sent
                        records += sent
            totals[name] = {
                "requests": tx,
                "produce": produce,
                "fetch": fetch,
                "commit": commit,
                "per_request": records / produce if produce else 0.0,
                "records": by_topic,
                "other": dict(sorted(other.items(), key=lambda item: -item[1])),
            }
        return totals


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def kafka(bootstrap: str | None, broker_pids: list[int]) -> Iterator[tuple[str, list[int]]]:
    if bootstrap:
        yield bootstrap, [pid for root in broker_pids for pid in _process_tree(root)]
        return
    from reliable_kafka.broker import EmbeddedKafka

    started = time.perf_counter()
    with EmbeddedKafka() as broker:
        print(
            f"embedded broker at {broker.bootstrap_servers} (started in {time.perf_counter() - started:.1f}s)",
            flush=True,
        )
        assert broker.pid is not None  # started, not detached
        yield broker.bootstrap_servers, _process_tree(broker.pid)


# --- the run ------------------------------------------------------------------------------------


def _throughput(ctx, bootstrap, broker_pids, pool, configs, *, rounds, sentences, threads=False, kafka_config=None):
    bursts: dict[str, list[Burst]] = defaultdict(list)
    clients: dict[str, dict] = {}
    for _ in range(rounds):
        for config in configs:
            pipeline = Pipeline(config, bootstrap, broker_pids, threads=threads, kafka_config=kafka_config).start(
                ctx, pool
            )
            try:
                pipeline.burst(min(2000, sentences), timeout=300)  # warm-up: caches, JIT, batches
                bursts[config].append(pipeline.burst(sentences, timeout=600))
            finally:
                pipeline.stop()
            clients[config] = pipeline.client_totals()
            b = bursts[config][-1]
            print(
                f"  {config:<8}{' threads' if threads else ''}: {b.rate:>8,.0f} sentences/s "
                f"({b.seconds:.1f} s"
                f"{'' if b.completed_seconds is None else f', completed in {b.completed_seconds:.1f} s'})",
                flush=True,
            )
    return bursts, clients


def _warm_broker(ctx, bootstrap, broker_pids, pool, configs, *, sentences, steady, kafka_config=None) -> None:
    """One untimed burst of each configuration on a broker this run started, then (``steady``: a
    run that measures latency) a steady rate until the broker's JIT settles: a fresh JVM spends its
    first minutes compiling Kafka's code (C1/C2), seconds of broker CPU that would otherwise land on
    the first rounds, mostly on the configuration that exercises the most code paths (tracked), and
    on the latency points (half a core at 1,000/s on 2 cores). A broker in service paid that long
    ago."""
    before = sum(_cpu_seconds(pid) for pid in broker_pids)
    jit_before = sum(_jit_seconds(pid) for pid in broker_pids)
    for config in configs:
        pipeline = Pipeline(config, bootstrap, broker_pids, kafka_config=kafka_config).start(ctx, pool)
        try:
            pipeline.burst(sentences, timeout=600)
            # a steady rate runs other code paths (small requests, delayed fetches): at 1,000/s the
            # JIT took 0.4 to 0.6 s per 1,000 sentences for its first 25 s, then under 0.08
            for _ in range(WARM_STEADY_ROUNDS if steady else 0):
                *_, cpu = pipeline.offer(WARM_STEADY_RATE, 5.0, drain_timeout=60)
                if cpu[JIT] < WARM_JIT_SETTLED:
                    break
        finally:
            pipeline.stop()
    spent = sum(_cpu_seconds(pid) for pid in broker_pids) - before
    jit = sum(_jit_seconds(pid) for pid in broker_pids) - jit_before
    print(
        f"  broker warm-up: {len(configs)} untimed bursts of {sentences} sentences, {spent:.1f} s of broker CPU "
        f"({jit:.1f} s of it the JIT)",
        flush=True,
    )


def _report_throughput(
    bursts: dict[str, list[Burst]],
    clients: dict,
    *,
    title: str,
    plain_rate: float | None = None,
    plain_cpu: float | None = None,
) -> tuple[dict, dict]:
    """Prints the table; returns (sentences/s, total CPU s per 1,000 sentences) per configuration."""
    print(f"\n{title}")
    rates = {config: statistics.median(b.rate for b in runs) for config, runs in bursts.items()}
    plain = rates.get("plain", plain_rate)
    # On a shared machine wall time measures the neighbours too; CPU seconds per sentence do not:
    # "CPU ratio" is plain's total (Python + broker) over this configuration's, the throughput
    # ratio a CPU-bound run would show.
    print(
        f"{'pipeline':<10}{'sentences/s':>12}{'ratio':>7}{'CPU ratio':>10}   CPU s per 1,000 sentences "
        f"(median of rounds)"
    )
    totals = {}
    for config, runs in bursts.items():
        names = list(runs[0].cpu)
        cpu = {name: statistics.median(b.cpu[name] / b.sentences * 1000 for b in runs) for name in names}
        totals[config] = sum(v for k, v in cpu.items() if k != JIT)
        ratio = f"{rates[config] / plain:.2f}" if plain else "-"
        plain_total = totals.get("plain", plain_cpu)
        cpu_ratio = f"{plain_total / totals[config]:.2f}" if plain_total and totals[config] else "-"
        print(f"{config:<10}{rates[config]:>12,.0f}{ratio:>7}{cpu_ratio:>10}   {_cpu_line(cpu)}")
    print("\nclient requests to the broker, last round, whole pipeline life (librdkafka statistics):")
    for config, per_process in clients.items():
        for name, t in per_process.items():
            print(
                f"  {config:<8} {name:<22} requests {t['requests']:>7}  produce {t['produce']:>6}  "
                f"fetch {t['fetch']:>6}  commit {t['commit']:>5}  records/produce request {t['per_request']:.1f}  "
                f"records sent {t['records']}  other {t['other']}"
            )
    return rates, totals


def _latency_curve(
    ctx, bootstrap, broker_pids, pool, configs, rates, *, seconds, kafka_config=None, hops=False
) -> list[RatePoint]:
    points = []
    for config in configs:
        pipeline = Pipeline(config, bootstrap, broker_pids, kafka_config=kafka_config, hops=hops).start(ctx, pool)
        measured = []
        try:
            pipeline.burst(500, timeout=300)  # warm-up
            idle_before, idle_seconds = pipeline.cpu(), 3.0
            pipeline.wait(lambda: False, idle_seconds)  # nothing offered: what the loops cost at rest
            idle = {
                name: (seconds - idle_before[name]) / idle_seconds * 100 for name, seconds in pipeline.cpu().items()
            }
            print(f"  {config:<8} idle, % of a core: " + "  ".join(f"{n} {v:.1f}" for n, v in idle.items()), flush=True)
            for rate in rates:
                lasting = max(seconds, min(MIN_SENTENCES_PER_POINT / rate, LOW_RATE_MAX_S))
                phase, achieved, drained, cpu = pipeline.offer(rate, lasting, drain_timeout=max(10.0, 2 * lasting))
                measured.append((rate, phase, achieved, drained, cpu))
                if not drained:
                    break
                pipeline.wait(lambda: False, 0.3)  # a gap between points
        finally:
            pipeline.stop()
        for rate, phase, achieved, drained, cpu in measured:
            counted = pipeline.latencies(phase, "latencies")
            completed = pipeline.latencies(phase, "completion")
            point = RatePoint(config, rate, achieved, _percentile(counted, 0.5), _percentile(counted, 0.99), cpu=cpu)
            if _tracks(config):
                point.completed_p50, point.completed_p99 = _percentile(completed, 0.5), _percentile(completed, 0.99)
            worst = point.completed_p99 if point.completed_p99 is not None else point.counted_p99
            point.saturated = not drained or worst > SATURATED_P99_MS or achieved < 0.8 * rate
            points.append(point)
            extra = (
                ""
                if point.completed_p50 is None
                else f" | completed p50 {point.completed_p50:7.1f} p99 {point.completed_p99:7.1f}"
            )
            print(
                f"  {config:<8} offered {rate:>7,.0f}/s achieved {achieved:>7,.0f}/s | counted p50 "
                f"{point.counted_p50:7.1f} ms p99 {point.counted_p99:7.1f} ms{extra}"
                f"{'  (saturated)' if point.saturated else ''}\n"
                f"           CPU s per 1,000 sentences: {_cpu_line(cpu)}"
                + (f"\n           from the source timestamp, p50/p99 ms: {pipeline.hop_line(phase)}" if hops else ""),
                flush=True,
            )
    return points


def _cpu_line(cpu: dict[str, float]) -> str:
    python = sum(v for k, v in cpu.items() if k not in ("broker", JIT))
    line = "  ".join(f"{name} {value:.3f}" for name, value in cpu.items() if name != JIT)
    line += f"  | python total {python:.3f}"
    return line + (f"  (broker JIT {cpu[JIT]:.3f}, not counted)" if JIT in cpu else "")


RUNS = Path("bench/runs")  # gitignored: a run's outputs, so that a run never changes a tracked file


def plot_path(given: Path | None, *, now: float | None = None) -> Path:
    """Where the latency curve goes: ``--plot PATH`` when given (docs/img/pipeline-latency.png to
    update the README's curve on purpose), else ``bench/runs/<UTC time>/pipeline-latency.png``."""
    if given is not None:
        return given
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return RUNS / stamp / "pipeline-latency.png"


def _plot(points: list[RatePoint], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install 'reliable-kafka[bench]'): no plot written to {path}")
        return
    figure, axis = plt.subplots(figsize=(8, 5))
    series = [
        ("plain", "counted", "plain: source -> counted"),
        ("off", "counted", "tracking off: source -> counted"),
        ("tracked", "counted", "tracked: source -> counted"),
        ("tracked", "completed", "tracked: source -> spout learns COMPLETED"),
    ]
    for color, (config, kind, label) in enumerate(series):
        chosen = [p for p in points if p.config == config]
        if not chosen:
            continue
        xs = [p.offered for p in chosen]
        for q, style in (("p50", "-"), ("p99", "--")):  # one colour per series: p50 solid, p99 dashed
            ys = [getattr(p, f"{kind}_{q}") for p in chosen]
            axis.plot(xs, ys, style, color=f"C{color}", marker="o" if q == "p50" else "x", label=f"{label} {q}")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("offered rate (sentences/s)")
    axis.set_ylabel("latency (ms)")
    axis.set_title("word count, 3 stages, one process per component")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, bbox_inches="tight")
    print(f"latency curve written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=None, help="sentences per throughput burst [20000]")
    parser.add_argument("--rates", default=None, help="offered rates for the latency curve, sentences/s")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds of plain/off/tracked [2]")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter measurements (about two minutes)")
    parser.add_argument("--with-ackers0", action="store_true", help="also measure Spout(ackers=0)")
    parser.add_argument("--no-threads", action="store_true", help="skip the LocalCluster (threads) figures")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency curve")
    parser.add_argument("--no-throughput", action="store_true", help="skip the throughput bursts")
    parser.add_argument(
        "--no-broker-warmup",
        action="store_true",
        help="measure the embedded broker from its start (its JIT compiling lands on the first rounds)",
    )
    parser.add_argument(
        "--hops",
        action="store_true",
        help="latency per hop: data topics keep LogAppendTime; prints source -> each append and read",
    )
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help="which of plain,off,tracked,floor to measure [plain,off,tracked]"
    )
    parser.add_argument(
        "--kafka-config",
        type=json.loads,
        default=None,
        help="librdkafka settings for reliable-kafka's components (JSON), e.g. '{\"linger.ms\": 0}'",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="where to write the latency curve (default: bench/runs/<UTC time>/pipeline-latency.png; "
        "docs/img/pipeline-latency.png redraws the README's)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",  # --bootstrap: its old name
        help="an existing broker (else an embedded one is started)",
    )
    parser.add_argument(
        "--broker-pid",
        type=int,
        action="append",
        default=[],
        help="with --bootstrap-servers: the broker's pid, for its CPU figures",
    )
    args = parser.parse_args()
    sentences = args.sentences or (6000 if args.quick else 20000)
    rounds = args.rounds or (1 if args.quick else 2)
    rates = [
        float(r)
        for r in (
            args.rates or ("10,100,1000,4000,16000" if args.quick else "10,100,250,500,1000,2000,4000,8000,16000,32000")
        ).split(",")
    ]
    seconds = 2.0 if args.quick else 3.0
    configs = [c for c in args.configs.split(",") if c] + (["ackers0"] if args.with_ackers0 else [])
    ctx = mp.get_context("spawn")
    pool = _sentence_pool()
    print(
        f"word count bench: {sentences} sentences x {rounds} rounds, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    bursts, clients, thread_bursts, thread_clients, points = {}, {}, {}, {}, []
    with kafka(args.bootstrap, args.broker_pid) as (bootstrap, broker_pids):
        if not args.bootstrap and not args.no_broker_warmup:
            # also before a latency-only run: a cold broker compiles through its first minutes, and
            # that CPU lands on the busiest rate points (0.4 s of JIT per 1,000 sentences at 1,000/s)
            print("\nwarming up the broker (its JIT), not measured:", flush=True)
            _warm_broker(
                ctx,
                bootstrap,
                broker_pids,
                pool,
                configs,
                sentences=sentences,
                steady=not args.no_latency,
                kafka_config=args.kafka_config,
            )
        if not args.no_throughput:
            print("\nthroughput, one process per component, alternating:", flush=True)
            bursts, clients = _throughput(
                ctx,
                bootstrap,
                broker_pids,
                pool,
                configs,
                rounds=rounds,
                sentences=sentences,
                kafka_config=args.kafka_config,
            )
            if not args.no_threads:
                print("\nthroughput, LocalCluster (all components as threads of one process):", flush=True)
                thread_bursts, thread_clients = _throughput(
                    ctx,
                    bootstrap,
                    broker_pids,
                    pool,
                    [c for c in configs if c not in ("plain", FLOOR)],
                    rounds=1,
                    sentences=sentences,
                    threads=True,
                    kafka_config=args.kafka_config,
                )
        if not args.no_latency:
            print(
                f"\nlatency against offered rate ({seconds:.0f} s per point, longer at low rates for up to "
                f"{MIN_SENTENCES_PER_POINT:,} sentences, at most {LOW_RATE_MAX_S:.0f} s):",
                flush=True,
            )
            points = _latency_curve(
                ctx,
                bootstrap,
                broker_pids,
                pool,
                [c for c in CONFIGS if c in configs],
                rates,
                seconds=seconds,
                kafka_config=args.kafka_config,
                hops=args.hops,
            )
    rates_by_config, cpu_by_config = (
        _report_throughput(bursts, clients, title="throughput, one process per component") if bursts else ({}, {})
    )
    if thread_bursts:
        _report_throughput(
            thread_bursts,
            thread_clients,
            title="throughput, LocalCluster (threads); ratios to the plain multi-process loop",
            plain_rate=rates_by_config.get("plain"),
            plain_cpu=cpu_by_config.get("plain"),
        )
    if points:
        low = {p.offered: p for p in points if p.config == "tracked" and p.offered in SUMMARY_RATES}
        if low:
            print(
                f"\ntracked completion latency (source timestamp -> spout learns COMPLETED), load "
                f"{os.getloadavg()[0]:.1f}; target p99 <= 100 ms at each rate:"
            )
            for rate, p in sorted(low.items()):
                print(
                    f"  {rate:>6,.0f} sentences/s: p50 {p.completed_p50:6.1f} ms  p99 {p.completed_p99:6.1f} ms  "
                    f"(counted p50 {p.counted_p50:6.1f} p99 {p.counted_p99:6.1f})"
                )
        _plot(points, plot_path(args.plot))


if __name__ == "__main__":
    main()
