"""Liveness when the ackers' group coordinator moves (docs/design.md sections 7.5 and 8.3), on three brokers.

One named acker (``reliable-kafka acker --name``: static membership), one named bolt and one spout
run as separate processes while records flow; the broker that coordinates the ackers' group is
SIGKILLed. The acker's session often times out while the coordinator is away, and its own rejoin
then fences it: librdkafka hands it a fatal error (2 of 3 kills in one series here, 0 of 3 in another). Every
record must still complete, none dead-lettered for lack of an acker, none lost: the acker makes a
new consumer and replays its partitions. The test kills the coordinator up to three times until
the acker was fenced; if librdkafka never fenced it, a consumer joining with its instance id
fences it the same way, so that the test always covers the fatal path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.cluster

RECORDS = 3000
WORKER = Path(__file__).with_name("coordinator_move_worker.py")


class _Process:
    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name, self.log_path = name, log_dir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


def _coordinator(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id


def _wait_until_committed(bootstrap: str, topology: str, timeout: float, processes) -> None:
    source = f"{topology}.source"
    deadline = time.monotonic() + timeout
    committed: dict = {}
    ends: dict = {}
    while time.monotonic() < deadline:
        try:
            ends = end_offsets(bootstrap, source)
            committed = committed_offsets(bootstrap, f"{topology}.spout", source)
        except Exception:  # noqa: BLE001 - a broker is down: ask again
            time.sleep(1)
            continue
        if all(committed.get(partition, -1) >= end for partition, end in ends.items() if end > 0):
            return  # (an empty partition has nothing to commit)
        time.sleep(1)
    tails = "\n".join(f"--- {p.name}:\n" + "\n".join(p.log().splitlines()[-12:]) for p in processes)
    raise AssertionError(f"spout committed {committed}, source ends at {ends} after {timeout:.0f} s\n{tails}")


def _fenced(acker_log: str) -> bool:
    return "Static consumer fenced" in acker_log


def _fence_like_a_rejoin(bootstrap: str, topology: str) -> None:
    """What librdkafka's own rejoin does to the acker after a coordinator move: a member with its
    ``group.instance.id`` joins, and the acker's next heartbeat or commit is fenced."""
    intruder = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topology}.ackers",
            "group.instance.id": f"{topology}.ackers.acker-0",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",  # the acker's: else refused
        }
    )
    intruder.subscribe([f"{topology}.acks"])
    deadline = time.monotonic() + 60
    while not intruder.assignment() and time.monotonic() < deadline:
        intruder.poll(0.2)
    assert intruder.assignment(), "a consumer with the acker's instance id got no partitions in 60 s"
    intruder.close()  # a static member's close keeps its place: the acker's rejoin takes it back


def test_a_named_acker_keeps_folding_after_its_group_coordinator_is_killed(kafka_cluster, tmp_path):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    topology = unique_name("rk-move")
    create_topics(
        bootstrap,
        {f"{topology}.{name}": 2 for name in ("source", "stage", "sink")},
        replication_factor=3,
        config={"min.insync.replicas": "2"},
    )
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=2), replication_factor=3)
    python = sys.executable
    processes = [
        _Process(
            "acker-0",
            [python, "-m", "reliable_kafka", "acker", "--topology", topology, "--bootstrap-servers", bootstrap]
            + ["--name", "acker-0", "--ackers", "2", "--message-timeout-ms", "10000", "--no-create-topics"],
            tmp_path,
        ),
        _Process("bolt-0", [python, str(WORKER), "bolt", topology, bootstrap], tmp_path),
        _Process("spout-0", [python, str(WORKER), "spout", topology, bootstrap], tmp_path),
    ]
    acker = processes[0]
    produced = 0

    def produce(count: int) -> None:
        nonlocal produced
        produce_values(bootstrap, f"{topology}.source", [str(i).encode() for i in range(produced, produced + count)])
        produced += count

    kills = []
    try:
        produce(300)
        _wait_until_committed(bootstrap, topology, 120, processes)  # all three run and the trees complete
        while len(kills) < 3 and not _fenced(acker.log()):
            coordinator = _coordinator(bootstrap, f"{topology}.ackers")
            flowing = threading.Thread(target=lambda: [produce(100) or time.sleep(0.5) for _ in range(6)])
            flowing.start()  # records flow (and the acker commits) while the broker dies
            time.sleep(1.5)
            cluster.kill_broker(coordinator)
            kills.append(coordinator)
            flowing.join()
            _wait_until_committed(bootstrap, topology, 180, processes)
            cluster.restart_broker(coordinator)
        if not _fenced(acker.log()):
            _fence_like_a_rejoin(bootstrap, topology)
            kills.append("fenced by a consumer with its instance id")
        produce(RECORDS - produced)  # at least 900 records after the fence: only a folding acker completes them
        _wait_until_committed(bootstrap, topology, 180, processes)

        assert _fenced(acker.log()), "the acker was never fenced: the test did not cover the fatal path"
        assert end_offsets(bootstrap, f"{topology}.dlq") in ({}, {0: 0}), "records were dead-lettered"
        sink = {m.value() for m in read_topic(bootstrap, f"{topology}.sink")}
        missing = [i for i in range(RECORDS) if str(i).encode() not in sink]
        assert not missing, f"{len(missing)} records lost, e.g. {missing[:5]}"
        assert all(p.popen.poll() is None for p in processes), [(p.name, p.popen.returncode) for p in processes]
        notable = [line for line in acker.log().splitlines() if "WARNING" in line or "CRITICAL" in line]
        print(f"kills: {kills}; the acker's warnings:\n" + "\n".join(notable))
    finally:
        for process in processes:
            process.stop()
        for index in range(cluster.brokers):
            if not cluster.broker_running(index):
                cluster.restart_broker(index)
