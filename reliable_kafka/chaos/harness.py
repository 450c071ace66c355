"""The fault-injection harness (issue 5): kill processes at random, then check the invariants.

It starts a broker (or a 3-broker cluster), the chaos topology of :mod:`reliable_kafka.chaos.worker`
as separate processes (spouts, split and sink bolts, acker workers), writes the source records at
a steady rate, and meanwhile SIGKILLs and restarts processes at random moments, restarts the
broker (or kills one broker of the cluster), and samples the spouts' committed offsets. At the end
it checks from the topics themselves:

- no loss: every source record has all its effects in the sink, or is in the dead-letter topic;
- no early commit: at every sample, every record below the committed offset had all its effects in
  the sink (or its dead letter) with a timestamp before the sample (effects are written before the
  acks that complete their tree, and the commit follows the completion);
- and it prints duplicates, replays and the time to recover after each kind of kill.

Those checks and the report are :mod:`reliable_kafka.chaos.checks`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from reliable_kafka.chaos.checks import ChaosReport, Sample, check
from reliable_kafka.chaos.worker import topic_names
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from reliable_kafka.broker.embedded import EmbeddedCluster, EmbeddedKafka

__all__ = ["ChaosConfig", "ChaosReport", "run"]

PARTITIONS = 4

Log = Callable[[str], None]  # prints a line of the run's progress


@dataclass
class ChaosConfig:
    """What one harness run does (defaults: the full run of issue 5)."""

    records: int = 50_000
    produce_seconds: float = 150.0  # source records are written evenly over this long
    kill_interval: tuple[float, float] = (1.5, 4.0)  # seconds between kills, drawn uniformly
    broker_restarts: int = 2  # single broker: kill + restart; cluster: kill one broker, restart it
    brokers: int = 1
    transactional: bool = False  # spouts and bolts in Kafka transactions: the sink holds each effect once
    kill_spouts: bool = True
    spark: bool = False  # the split stage is a PySpark job (one driver process) instead of Python bolts
    spark_spout: bool = False  # the spout stage is one single-query SparkSpout process (same group, topics)
    spouts: int = 2
    splits: int = 2
    sinks: int = 2
    ackers: int = 2
    message_timeout_ms: int = 10_000
    settle_timeout: float = 240.0  # after the faults: how long the topology may take to finish
    seed: int = 1
    bootstrap: str | None = None  # an existing cluster (then no broker faults)
    parallelism: int = 1  # of the split and sink bolts (ordering "key"); above 1, source records have keys
    keys: int = 64  # distinct source keys when parallelism > 1


class _Process:
    """One worker process of the topology, restartable under the same name."""

    def __init__(self, role: str, name: str, argv: list[str], log_dir: Path) -> None:
        self.role, self.name, self.argv = role, name, argv
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
        )
        log.close()

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def terminate(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def stop(self, deadline: float) -> None:
        """Wait until ``deadline`` (monotonic) for the SIGTERM of :meth:`terminate`, then SIGKILL."""
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            self.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the harness dies, so no worker outlives a run."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (the harness starts workers from its main thread)


class _Broker:
    """The harness's own Kafka: one embedded broker or a cluster, which it may kill and restart."""

    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.kafka: EmbeddedKafka | EmbeddedCluster | None = None

    def start(self) -> str:
        if self.config.bootstrap:
            return self.config.bootstrap
        from reliable_kafka.broker import EmbeddedCluster, EmbeddedKafka

        kafka = EmbeddedCluster(brokers=self.config.brokers) if self.config.brokers > 1 else EmbeddedKafka()
        self.kafka = kafka.start()
        return kafka.bootstrap_servers

    def fault(self, rng: random.Random, log: Log) -> None:
        """Kill a broker and start it again (the cluster keeps serving through the others)."""
        from reliable_kafka.broker import EmbeddedCluster

        if self.kafka is None:
            return
        if isinstance(self.kafka, EmbeddedCluster):
            index = rng.randrange(self.config.brokers)
            log(f"kill broker {index}")
            self.kafka.kill_broker(index)
            time.sleep(rng.uniform(3, 8))
            self.kafka.restart_broker(index)
            log(f"broker {index} back")
        else:
            log("kill the broker")
            self.kafka.kill()
            time.sleep(rng.uniform(1, 3))
            self.kafka.restart()
            log("broker back")

    def stop(self) -> None:
        if self.kafka is not None:
            self.kafka.stop()


def run(config: ChaosConfig | None = None, *, out: TextIO = sys.stdout) -> ChaosReport:
    """One harness run; prints progress and the checked summary to ``out``."""
    config = config or ChaosConfig()
    if threading.current_thread() is threading.main_thread():  # SIGTERM runs the cleanup below
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(config.seed)
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", file=out, flush=True)

    broker = _Broker(config)
    bootstrap = broker.start()
    try:
        report, log_dir = _run_topology(config, broker, bootstrap, rng, started, log)
    finally:
        broker.stop()
    print(report.render(), file=out, flush=True)
    if not report.ok:
        print(f"worker logs kept in {log_dir}", file=out, flush=True)
    return report


def _run_topology(
    config: ChaosConfig, broker: _Broker, bootstrap: str, rng: random.Random, started: float, log: Log
) -> tuple[ChaosReport, Path]:
    topology = unique_name("chaos")
    topics = topic_names(topology)
    replication = min(3, config.brokers)
    topic_config = {"min.insync.replicas": "2"} if replication == 3 else {}
    create_topics(
        bootstrap, {name: PARTITIONS for name in topics.values()}, replication_factor=replication, config=topic_config
    )
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=4), replication_factor=replication)
    log(
        f"topology {topology} on {bootstrap}: {config.records} records, "
        f"{'transactional' if config.transactional else 'at-least-once'}, {config.brokers} broker(s)"
        f"{', split stage on PySpark' if config.spark else ''}"
        f"{', spout stage a single-query SparkSpout' if config.spark_spout else ''}"
        f"{f', bolts with parallelism {config.parallelism} (ordering key)' if config.parallelism > 1 else ''}"
    )
    log_dir = Path(tempfile.mkdtemp(prefix=f"{topology}-logs-"))
    processes = _processes(config, topology, bootstrap, log_dir)
    for process in processes:
        process.start()

    samples: list[Sample] = []
    stop_sampling = threading.Event()
    sampler = threading.Thread(target=_sample, args=(bootstrap, topology, samples, stop_sampling), daemon=True)
    sampler.start()
    producer = threading.Thread(target=_produce, args=(bootstrap, topics["source"], config), daemon=True)
    producer.start()

    kills: Counter[str] = Counter()
    crashes: Counter[str] = Counter()  # processes that died on their own (restarted, as a supervisor would)
    kill_times: list[tuple[str, float]] = []
    broker_faults = sorted(rng.uniform(0.2, 0.8) * config.produce_seconds for _ in range(config.broker_restarts))
    targets = [p for p in processes if config.kill_spouts or p.role not in ("spout", "spark-spout")]
    try:
        while producer.is_alive():
            _sleep_supervising(rng.uniform(*config.kill_interval), processes, crashes, log)
            elapsed = time.monotonic() - started
            if broker_faults and elapsed >= broker_faults[0] and broker.kafka is not None:
                broker_faults.pop(0)
                kill_times.append(("broker", time.time()))
                broker.fault(rng, log)
                kills["broker"] += 1
                continue
            victim = rng.choice(targets)
            kill_times.append((victim.role, time.time()))
            victim.kill()
            kills[victim.role] += 1
            time.sleep(rng.uniform(0.1, 1.5))
            victim.start()
            log(f"killed and restarted {victim.name} (kills so far: {sum(kills.values())})")
        producer.join()
        log("faults over; waiting for the topology to finish")
        caught_up = _wait_caught_up(
            bootstrap, topology, config.settle_timeout, log, lambda: _restart_crashed(processes, crashes, log)
        )
        time.sleep(2.0)  # one more commit round of every bolt, then stop
    finally:
        stop_sampling.set()
        sampler.join()
        for process in processes:  # all at once: each may take a transaction timeout to stop
            process.terminate()
        deadline = time.monotonic() + 20.0
        for process in processes:
            process.stop(deadline)
    dead = [
        (p, p.popen.returncode)
        for p in processes
        if p.popen is not None and p.popen.returncode not in (0, -signal.SIGTERM)
    ]
    report = check(
        bootstrap,
        topology,
        records=config.records,
        transactional=config.transactional,
        samples=samples,
        kills=kills,
        kill_times=kill_times,
        caught_up=caught_up,
        started=started,
    )
    for process, returncode in dead:
        report.notes.append(f"{process.name} exited with {returncode}: {process.tail(5)}")
    for name, count in sorted(crashes.items()):
        report.notes.append(f"{name} died on its own {count} time(s) and was restarted; see its log")
    report.crashes = sum(crashes.values())
    return report, log_dir


def _processes(config: ChaosConfig, topology: str, bootstrap: str, log_dir: Path) -> list[_Process]:
    counts = {
        "acker": config.ackers,
        "spout": 0 if config.spark_spout else config.spouts,
        "spark-spout": 1 if config.spark_spout else 0,
        "split": 0 if config.spark else config.splits,
        "spark": 1 if config.spark else 0,
        "sink": config.sinks,
    }
    processes = []
    for role, count in counts.items():
        for index in range(count):
            name = f"{role}-{index}"
            argv = [
                sys.executable,
                "-m",
                "reliable_kafka.chaos.worker",
                "--role",
                role,
                "--topology",
                topology,
                "--bootstrap-servers",
                bootstrap,
                "--name",
                name,
                "--message-timeout-ms",
                str(config.message_timeout_ms),
            ]
            if role in ("spark", "spark-spout"):
                argv += ["--checkpoint-dir", str(log_dir / f"{name}-checkpoint")]
            if role == "spark-spout":  # as the Python spouts' bound beside a Spark stage, below
                argv += ["--max-pending", "1000"]
            if role == "spout" and (config.spark or config.transactional or config.parallelism > 1):
                # a slower stage (Spark; a transaction per batch; calls that wait on "I/O") needs
                # fewer trees in flight: pending / throughput must stay well under the message
                # timeout, even while a killed worker's partitions move. Else the first trees
                # time out queued, their replays queue behind their stale tuples, and so on. With
                # parallelism 4 and 0.5-5 ms calls a sink does about 1,450 calls/s, and a sink is
                # often down: 2 spouts x 2,000 trees x 3 calls is 8 s of work against the 10 s
                # timeout (the default run left 15,000 of 50,000 records not done; 10,000 pending
                # left 17,781); 500 is about 2 s
                max_pending = 1000 if config.spark else 500 if config.parallelism > 1 else 2000
                argv += ["--max-pending", str(max_pending)]
            if config.transactional:
                argv.append("--transactional")
            if role in ("split", "sink") and config.parallelism > 1:
                argv += ["--parallelism", str(config.parallelism)]
            processes.append(_Process(role, name, argv, log_dir))
    return processes


def _produce(bootstrap: str, topic: str, config: ChaosConfig) -> None:
    slices = max(1, int(config.produce_seconds / 0.5))
    per_slice = -(-config.records // slices)
    for start in range(0, config.records, per_slice):
        began = time.monotonic()
        stop = min(config.records, start + per_slice)
        # parallel bolts order calls by key: give the records keys, many records per key
        keys = [b"k%d" % (i % config.keys) for i in range(start, stop)] if config.parallelism > 1 else None
        produce_values(bootstrap, topic, [str(i).encode() for i in range(start, stop)], keys=keys, timeout=120)
        time.sleep(max(0.0, 0.5 - (time.monotonic() - began)))


def _sample(bootstrap: str, topology: str, samples: list[Sample], stop: threading.Event) -> None:
    source = topic_names(topology)["source"]
    while not stop.is_set():
        try:
            committed = committed_offsets(bootstrap, f"{topology}-spout", source, timeout=5)
            samples.append((time.time(), committed))  # stamped after the read: the commit came before
        except Exception:  # the broker may be down: no sample this round
            pass
        stop.wait(0.5)


def _sleep_supervising(seconds: float, processes: list[_Process], crashes: Counter[str], log: Log) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _restart_crashed(processes, crashes, log)
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


def _restart_crashed(processes: list[_Process], crashes: Counter[str], log: Log) -> None:
    for process in processes:
        if process.popen is not None and process.popen.poll() is not None:
            crashes[process.name] += 1
            log(f"{process.name} died on its own (exit {process.popen.returncode}); restarting it:\n{process.tail(3)}")
            process.start()


def _wait_caught_up(bootstrap: str, topology: str, timeout: float, log: Log, supervise: Callable[[], None]) -> bool:
    source = topic_names(topology)["source"]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            ends = end_offsets(bootstrap, source)
            committed = committed_offsets(bootstrap, f"{topology}-spout", source)
        except Exception:
            time.sleep(1)
            continue
        if committed == ends:
            return True
        supervise()
        done = sum(max(0, c) for c in committed.values())
        if done != last:
            log(f"committed {done}/{sum(ends.values())}")
            last = done
        time.sleep(1)
    return False
