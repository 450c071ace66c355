"""A worker started before its broker waits for it (``kafka.admin.wait_for_cluster``, called by the
run loop every worker shares): each failed try is logged with the address, and once the broker
runs the worker starts and works; stopped while it waits, it ends cleanly. Meanwhile its metrics
port says so (``ops.waiting``: alive, not ready, ``rk_component_waiting_for_kafka 1``), and the
same port serves the running worker after. A real broker started late on the port the worker was
given."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from reliable_kafka import AckerWorker, codec
from reliable_kafka.broker.embedded import EmbeddedKafka
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.testing.endpoints import http_get
from reliable_kafka.testing.records import read_topic
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics

WAIT_S = 120  # generous: a busy machine starts a broker slowly; nothing here is timed


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.1)


def _waiting_gauge(port: int) -> float | None:
    """``rk_component_waiting_for_kafka`` as the port serves it now (None: not served)."""
    status, body = http_get(port, "/metrics")
    assert status == 200, body
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "rk_component_waiting_for_kafka":
            return float(family.samples[0].value)
    return None


def _send(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})  # gone before the broker stops
    producer.produce(topic, value)
    assert producer.flush(30) == 0


def _run(worker: AckerWorker, stop: threading.Event, errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            worker.run(stop)
        except BaseException as exc:  # the test's to report
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_acker_started_before_its_broker_waits_then_folds(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="reliable_kafka.kafka.admin")
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    topics = TopologyTopics(unique_name("start-before-broker"), ackers=1)
    worker = AckerWorker(topology=topics.topology, connection=bootstrap)
    worker.metrics_port = 0  # any free port: the waiting endpoints pick it, the running worker keeps it
    stop, errors = threading.Event(), []
    thread = _run(worker, stop, errors)
    try:
        _until(lambda: "cannot reach Kafka at " + bootstrap in caplog.text, "the worker says it cannot reach Kafka")
        assert thread.is_alive() and not errors, errors  # waiting, not exited
        _until(lambda: worker.metrics_port, "the waiting worker serves its metrics port")
        metrics_port = worker.metrics_port
        live, body = http_get(metrics_port, "/healthz")
        assert live == 200 and json.loads(body)["status"] == "ok", body
        ready, body = http_get(metrics_port, "/readyz")
        assert ready == 503, body
        (reason,) = json.loads(body)["reasons"]
        assert f"waiting for Kafka at {bootstrap}" in reason and "last error" in reason, reason
        assert _waiting_gauge(metrics_port) == 1.0
        with EmbeddedKafka(port=port, data_dir=tmp_path / "kafka") as kafka:
            assert kafka.bootstrap_servers == bootstrap
            ensure_topics(admin_client(bootstrap), topics)
            root, edge = new_id(), new_id()
            _send(
                bootstrap,
                topics.acks,
                codec.encode_ack_batch(new_id(), [EventKind.INIT, EventKind.ACK], [root] * 2, [edge] * 2),
            )

            def decided() -> dict[int, int]:
                found: dict[int, int] = {}
                for message in read_topic(bootstrap, topics.outcomes, timeout=1):
                    batch = codec.decode_outcomes(message.value())
                    found.update(zip(batch.roots.tolist(), batch.kinds.tolist()))
                return found

            _until(lambda: root in decided(), "the late-started acker published the tree's outcome")
            assert decided()[root] == OutcomeKind.COMPLETED
            assert "answers after" in caplog.text
            # the running worker serves the same port: no longer waiting, and ready once its partition is read
            assert worker.metrics_port == metrics_port
            assert _waiting_gauge(metrics_port) == 0.0
            _until(lambda: http_get(metrics_port, "/readyz")[0] == 200, "the running worker is ready")
            stop.set()
            thread.join(60)
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive() and not errors, errors


def test_a_worker_stopped_while_it_waits_for_its_broker_ends_cleanly(caplog):
    caplog.set_level(logging.WARNING, logger="reliable_kafka.kafka.admin")
    bootstrap = f"127.0.0.1:{_free_port()}"
    worker = AckerWorker(topology=unique_name("never-reached"), connection=bootstrap)
    stop, errors = threading.Event(), []
    thread = _run(worker, stop, errors)
    _until(lambda: "cannot reach Kafka at " + bootstrap in caplog.text, "the worker says it cannot reach Kafka")
    stop.set()
    thread.join(60)
    assert not thread.is_alive() and not errors, errors
    assert worker.stats.records == 0
