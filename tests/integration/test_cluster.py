"""A 3-broker embedded cluster: replication factor 3 survives one broker down."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from reliable_kafka.testing.topics import create_topics

pytestmark = pytest.mark.cluster


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failures = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _m: failures.append(err) if err else None)
    assert producer.flush(90) == 0, "records still unconfirmed after 90 s"
    assert failures == []


def _consume_all(bootstrap: str, topic: str, count: int, timeout: float = 90.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rk-cluster-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=1.0):
                if message.error() is None:
                    values.append(message.value())
    finally:
        consumer.close()
    assert len(values) == count, f"read {len(values)} of {count} records in {timeout:.0f} s"
    return values


def _isr_sizes(bootstrap: str, topic: str) -> list[int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return [len(p.isrs) for p in metadata.topics[topic].partitions.values()]


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)


def test_replicated_topic_survives_one_broker_down(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap_servers
    topic = f"rk-rf3-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 3}, replication_factor=3, config={"min.insync.replicas": "2"})
    assert _isr_sizes(bootstrap, topic) == [3, 3, 3]

    before = [f"before-{i}".encode() for i in range(200)]
    _produce(bootstrap, topic, before)
    assert sorted(_consume_all(bootstrap, topic, 200)) == sorted(before)

    kafka_cluster.kill_broker(1)
    _wait_for(lambda: _isr_sizes(bootstrap, topic) == [2, 2, 2], "ISR shrinking to 2 after broker 1 died")
    during = [f"during-{i}".encode() for i in range(200)]
    _produce(bootstrap, topic, during)  # acks=all with min.insync.replicas=2: 2 of 3 suffice
    assert sorted(_consume_all(bootstrap, topic, 400)) == sorted(before + during)

    kafka_cluster.restart_broker(1)
    _wait_for(lambda: _isr_sizes(bootstrap, topic) == [3, 3, 3], "broker 1 rejoining every ISR")


def _process_groups() -> dict[int, set[int]]:
    """Process group id -> pids, for every process on the machine."""
    groups: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                groups.setdefault(int(fields[2]), set()).add(int(entry.name))
    return groups


def _java_pids(pids: set[int]) -> set[int]:
    found = set()
    for pid in pids:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The JVM itself, not its watchdog (whose arguments also name kafka.Kafka).
        if args[0].endswith(b"java") and b"kafka.Kafka" in args:
            found.add(pid)
    return found


def test_stop_leaves_no_processes_and_no_data(kafka_cluster):
    # Runs after the test above (pytest keeps file order); it stops the module's cluster.
    groups = {node["pid"] for node in kafka_cluster.describe()["nodes"]}
    data_dir = kafka_cluster.data_dir
    running = _process_groups()
    assert len(_java_pids(set().union(*(running.get(g, set()) for g in groups)))) == 3

    kafka_cluster.stop()

    left = _process_groups()
    leftovers = [pid for g in groups for pid in left.get(g, set())]
    assert not leftovers, f"broker processes {leftovers} left after stop"
    assert not data_dir.exists()
