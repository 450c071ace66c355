"""The session broker and the embedded broker's own life cycle: kill, restart, CLI, errors."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from reliable_kafka.broker import EmbeddedKafka, daemon
from reliable_kafka.cli import main
from reliable_kafka.errors import BrokerStartError
from reliable_kafka.testing.topics import create_topics


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures = []
    for key, value, headers in records:
        producer.produce(
            topic,
            value,
            key,
            headers=headers,
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(60) == 0, "records still unconfirmed after 60 s"
    assert failures == []


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rk-test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received = []
    deadline = time.monotonic() + timeout
    try:
        while len(received) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=1.0):
                assert message.error() is None, message.error()
                received.append(message)
    finally:
        consumer.close()
    assert len(received) == count, f"read {len(received)} of {count} records from {topic} in {timeout:.0f} s"
    return received


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status is left


def _records(n: int) -> list[tuple[bytes, bytes, list]]:
    return [
        (
            f"key-{i % 7}".encode(),
            f"value-{i}".encode(),
            [("seq", str(i).encode()), ("rk-test", b"1")],
        )
        for i in range(n)
    ]


def test_records_round_trip_with_keys_and_headers(kafka_bootstrap, create_topic):
    topic = create_topic(partitions=3)
    sent = _records(300)
    _produce(kafka_bootstrap, topic, sent)
    received = _consume(kafka_bootstrap, topic, len(sent))
    assert sorted((m.key(), m.value(), m.headers()) for m in received) == sorted(
        (key, value, headers) for key, value, headers in sent
    )
    # One key, one partition: its records come back in the order they were sent.
    by_key: dict[bytes, list[int]] = {}
    for message in received:
        by_key.setdefault(message.key(), []).append(int(dict(message.headers())["seq"]))
    for key, seqs in by_key.items():
        assert seqs == sorted(seqs), f"records of {key!r} out of order"


def test_killed_broker_restarts_with_its_data(tmp_path):
    kafka = EmbeddedKafka(data_dir=tmp_path / "kafka").start()
    try:
        port = kafka.port
        topic = f"rk-restart-{uuid.uuid4().hex[:8]}"
        create_topics(kafka.bootstrap_servers, {topic: 2})
        sent = _records(100)
        _produce(kafka.bootstrap_servers, topic, sent)

        kafka.kill()
        assert not kafka.running()
        kafka.restart()

        assert kafka.port == port
        received = _consume(kafka.bootstrap_servers, topic, len(sent))
        assert sorted((m.key(), m.value()) for m in received) == sorted((k, v) for k, v, _ in sent)
        assert "Kafka Server started" in kafka.log_path.read_text()
    finally:
        kafka.stop()
    assert not (tmp_path / "kafka").exists()


def test_taken_port_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerStartError) as caught:
            EmbeddedKafka(port=port).start()
    assert f"port {port} on 127.0.0.1 is already in use" in str(caught.value)
    assert "port=0" in caught.value.hint


def test_cli_starts_reports_and_stops_a_detached_broker(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RK_RUN_DIR", str(tmp_path / "run"))
    assert main(["kafka", "status"]) == 1
    assert main(["kafka", "up"]) == 0
    try:
        current = daemon.status()
        assert current.running, current.describe()
        pid = current.alive_pids[0]
        assert main(["kafka", "up"]) == 0  # idempotent: says it already runs
        assert main(["kafka", "status"]) == 0
        out = capsys.readouterr().out
        assert "already running" in out
        assert f"is running: bootstrap {current.bootstrap}" in out

        topic = f"rk-cli-{uuid.uuid4().hex[:8]}"
        create_topics(current.bootstrap, {topic: 1})
        _produce(current.bootstrap, topic, _records(10))
    finally:
        assert main(["kafka", "down"]) == 0
    assert not daemon.status().recorded
    assert main(["kafka", "status"]) == 1
    assert not _running(pid), f"broker JVM {pid} still runs after `kafka down`"
    assert not Path(current.state["data_dir"]).exists()
