"""Acker failover: time from stopping one of two acker workers to the outcome of a new tree.

Two ``python -m reliable_kafka acker`` processes share a two-partition ack topic. One is stopped
(SIGKILL, or SIGTERM); at that moment a tree (INIT and ACK) is sent to the partition it owned, and
the bench times how long its COMPLETED outcome takes to appear. Cases:

* ``kill``: SIGKILL of an unnamed worker; the survivor takes over once the dead member's session
  expires (the classic protocol's ``session.timeout.ms``, KIP-848's broker-side
  ``group.consumer.session.timeout.ms``).
* ``kill+restart``: SIGKILL of a named worker (static membership, ``group.instance.id``) and its
  restart at once under the same name: it gets its partition back without a rebalance.
* ``term``: SIGTERM of an unnamed worker: it closes its consumer, which leaves the group; the
  tree is sent once it has exited (timed from the signal, its clean stop included).

Each case runs with each consumer setting of ``--settings`` (see SETTINGS). Prints figures,
asserts nothing. Usage: ``./rk bench acker_failover [--repeat N] [--settings a,b]
[--bootstrap-servers HOST:PORT] [--broker-config KEY=VALUE ...]`` (without ``--bootstrap-servers``,
an embedded broker is started, with ``--broker-config`` settings, and stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from reliable_kafka import codec
from reliable_kafka.core.ids import new_id, partition_for_root
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics

SETTINGS = {
    "classic-10s": ["session.timeout.ms=10000", "heartbeat.interval.ms=2000"],  # the defaults before
    "classic-6s": ["session.timeout.ms=6000", "heartbeat.interval.ms=1000"],  # the broker's minimum
    "classic-6s-hb500": ["session.timeout.ms=6000", "heartbeat.interval.ms=500"],
    "consumer": ["group.protocol=consumer"],  # KIP-848: timeouts are the broker's (45 s by default)
}
CASES = ("kill", "kill+restart", "term")
WAIT_S = 120.0


class Worker:
    def __init__(
        self, *, topology: str, bootstrap: str, name: str, named: bool, settings: list[str], log_dir: Path
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
        command = [
            sys.executable,
            "-m",
            "reliable_kafka",
            "acker",
            "--topology",
            topology,
            "--bootstrap-servers",
            bootstrap,
            "--ackers",
            "2",
            "--message-timeout-ms",
            "120000",
            "--commit-interval-ms",
            "200",
        ]
        if named:
            command += ["--name", name]
        for setting in settings:
            command += ["--kafka-config", setting]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for verb, listed in re.findall(
            r"acker[-\w.]*: (assigned|revoked|lost) \[([\d, ]*)\]", self.log_path.read_text(errors="replace")
        ):
            partitions = {int(p) for p in listed.split(",") if p.strip()}
            owned = owned | partitions if verb == "assigned" else owned - partitions
        return owned

    def stop(self, signum: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait(condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout:.0f}s: {what}")
        time.sleep(0.05)


def one_run(bootstrap: str, case: str, settings: list[str], log_dir: Path) -> float:
    topics = TopologyTopics(unique_name("failover"), ackers=2)
    admin = admin_client(bootstrap)
    ensure_topics(admin, topics)
    named = case == "kill+restart"
    workers = [
        Worker(
            topology=topics.topology,
            bootstrap=bootstrap,
            name=f"acker-{i}",
            named=named,
            settings=settings,
            log_dir=log_dir,
        )
        for i in range(2)
    ]
    outcomes = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    try:
        wait(lambda: all(len(w.owned()) == 1 for w in workers), "both workers own one partition")
        victim = workers[0]
        partition = next(iter(victim.owned()))
        ends = [
            TopicPartition(
                topics.outcomes, p, outcomes.get_watermark_offsets(TopicPartition(topics.outcomes, p), timeout=30)[1]
            )
            for p in range(2)
        ]
        outcomes.assign(ends)
        root = next(r for r in iter(new_id, None) if partition_for_root(r, 2) == partition)
        edge, spout = new_id(), new_id()
        started = time.monotonic()
        victim.process.send_signal(signal.SIGKILL if case.startswith("kill") else signal.SIGTERM)
        if case == "term":  # else the stopping worker may fold the tree itself before it exits
            victim.process.wait(60)
        for kind in (EventKind.INIT, EventKind.ACK):
            producer.produce(topics.acks, codec.encode_ack_batch(spout, [kind], [root], [edge]), partition=partition)
        producer.flush(30)
        if named:
            victim.process.wait()
            workers.append(
                Worker(
                    topology=topics.topology,
                    bootstrap=bootstrap,
                    name=victim.name,
                    named=True,
                    settings=settings,
                    log_dir=log_dir,
                )
            )
        deadline = started + WAIT_S
        while time.monotonic() < deadline:
            for message in outcomes.consume(100, timeout=0.05):
                if message.error() is None and root in codec.decode_outcomes(message.value()).roots.tolist():
                    return time.monotonic() - started
        raise TimeoutError(f"no outcome within {WAIT_S:.0f}s ({case}, {settings}); logs in {log_dir}")
    finally:
        outcomes.close()
        for worker in workers:
            worker.stop(signal.SIGKILL)


@contextlib.contextmanager
def kafka(bootstrap: str | None, broker_config: dict[str, str]) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from reliable_kafka.broker import EmbeddedKafka

    with EmbeddedKafka(extra_config=broker_config) as broker:
        yield broker.bootstrap_servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",
        default=None,
        help="use this Kafka (default: start an embedded broker)",
    )
    parser.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="embedded broker setting (e.g. group.consumer.session.timeout.ms=6000)",
    )
    parser.add_argument(
        "--settings",
        default="classic-10s,classic-6s,consumer",
        help=f"consumer settings to compare, of {', '.join(SETTINGS)}",
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    broker_config = dict(item.split("=", 1) for item in args.broker_config)
    with tempfile.TemporaryDirectory(prefix="rk-failover-") as logs, kafka(args.bootstrap, broker_config) as bootstrap:
        print(f"broker {bootstrap} {broker_config or ''}".rstrip())
        print(f"{'setting':<18} {'case':<14} seconds to the outcome (each run; median)")
        for name in args.settings.split(","):
            for case in args.cases.split(","):
                figures = [one_run(bootstrap, case, SETTINGS[name], Path(logs)) for _ in range(args.repeat)]
                print(
                    f"{name:<18} {case:<14} {' '.join(f'{f:5.1f}' for f in figures)}; {statistics.median(figures):.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
