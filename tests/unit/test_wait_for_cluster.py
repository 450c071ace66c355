"""``kafka.admin.wait_for_cluster``: what a worker does when its cluster does not answer at start
(an admin client that fails as librdkafka does; the real broker started late is
tests/integration/test_start_before_broker.py)."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka.kafka.admin import LONGEST_RETRY_S, UNREACHABLE, wait_for_cluster
from reliable_kafka.lifecycle import run_until_stopped
from reliable_kafka.testing import ManualClock


class Waits(threading.Event):
    """A stop event whose waits are recorded instead of slept; set after ``stop_after`` waits."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.stop_after = stop_after

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        if self.stop_after is not None and len(self.waits) >= self.stop_after:
            self.set()
        return self.is_set()


class Admin:
    """Fails ``failures`` metadata requests with ``code``, then answers."""

    def __init__(self, failures: int, code: int = KafkaError._TRANSPORT) -> None:
        self.failures, self.code, self.calls = failures, code, 0

    def list_topics(self, timeout: float) -> object:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code, "Failed to get metadata: Local: Broker transport failure"))
        return object()


def wait(admin: Admin, stop: threading.Event) -> bool:
    return wait_for_cluster(admin, stop, component="acker-1", bootstrap_servers="k:9092", clock=ManualClock())  # type: ignore[arg-type]


def test_a_cluster_that_answers_at_once_is_not_waited_for(caplog):
    stop = Waits()
    assert wait(Admin(0), stop) is True
    assert stop.waits == [] and caplog.text == ""


@pytest.mark.parametrize("code", sorted(UNREACHABLE))
def test_an_unreachable_cluster_is_retried_with_doubling_waits_each_logged(code, caplog):
    caplog.set_level(logging.WARNING)
    admin, stop = Admin(8, code), Waits()
    assert wait(admin, stop) is True
    assert admin.calls == 9
    assert stop.waits == [1, 2, 4, 8, 16, LONGEST_RETRY_S, LONGEST_RETRY_S, LONGEST_RETRY_S]
    assert caplog.text.count("acker-1: cannot reach Kafka at k:9092 (Failed to get metadata") == 8
    assert "acker-1: Kafka at k:9092 answers after 8 failed tries; starting" in caplog.text


def test_stopped_while_waiting_is_false_and_asks_no_more():
    admin, stop = Admin(100), Waits(stop_after=3)
    assert wait(admin, stop) is False
    assert admin.calls == 3


def test_a_stop_set_before_the_first_try_still_asks_once():
    stopped = Waits()
    stopped.set()  # a worker run to start and close at once (run(stop) with stop set)
    assert wait(Admin(0), stopped) is True
    unreachable = Admin(5)
    assert wait(unreachable, stopped) is False
    assert unreachable.calls == 1 and stopped.waits == []


def test_an_error_that_waiting_cannot_mend_is_raised_at_once():
    admin = Admin(1, KafkaError._AUTHENTICATION)
    with pytest.raises(KafkaException) as raised:
        wait(admin, Waits())
    assert raised.value.args[0].code() == KafkaError._AUTHENTICATION and admin.calls == 1


class Worker:
    """A worker without a Connection (as a test's or the simulation's): never waited for."""

    def __init__(self, stop: threading.Event) -> None:
        self.stats, self.calls, self.stop = object(), [], stop

    def start(self) -> None:
        self.calls.append("start")

    def poll_once(self) -> None:
        self.calls.append("poll")
        self.stop.set()

    def close(self) -> None:
        self.calls.append("close")


def test_a_worker_without_confluent_kafkas_clients_starts_at_once():
    stop = threading.Event()
    worker = Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)  # type: ignore[arg-type]
    assert worker.calls == ["start", "poll", "close"]


def test_each_failed_try_is_reported_with_librdkafkas_error_and_an_answer_is_not():
    failures: list[str] = []
    assert (
        wait_for_cluster(
            Admin(3),  # type: ignore[arg-type]
            Waits(),
            component="acker-1",
            bootstrap_servers="k:9092",
            clock=ManualClock(),
            on_failure=failures.append,
        )
        is True
    )
    assert failures == ["Failed to get metadata: Local: Broker transport failure"] * 3


def test_the_waiting_endpoints_say_alive_not_ready_and_waiting_then_free_the_port():
    """ops.waiting on a free port: what a probe and Prometheus read while a worker waits."""
    import json
    import socket

    from prometheus_client.parser import text_string_to_metric_families

    from reliable_kafka.ops.waiting import WAITING_METRIC, WaitingEndpoints
    from reliable_kafka.testing.endpoints import http_get

    endpoints = WaitingEndpoints(
        topology="wc", component="acker-1", kind="acker", bootstrap_servers="k:9092", host="127.0.0.1", port=0
    )
    port = endpoints.port
    try:
        endpoints.failed("Local: Broker transport failure")
        status, body = http_get(port, "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, body = http_get(port, "/readyz")
        (reason,) = json.loads(body)["reasons"]
        assert status == 503 and "waiting for Kafka at k:9092" in reason and "failed tries: 1;" in reason, reason
        assert "last error: Local: Broker transport failure" in reason
        status, body = http_get(port, "/metrics")
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        (sample,) = families[WAITING_METRIC].samples
        assert sample.value == 1 and sample.labels == {"topology": "wc", "component": "acker-1"}
        (info,) = families["rk_component_info"].samples
        assert info.labels["kind"] == "acker"
        assert "process_cpu_seconds" in families  # the process collectors, as a running component's
        assert http_get(port, "/other")[0] == 404
    finally:
        endpoints.close()
    with socket.socket() as again:  # closed: the running component's reporter can bind the port
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))


def test_a_metrics_port_in_use_while_waiting_is_a_config_error_naming_it():
    import socket

    from reliable_kafka.errors import ConfigError
    from reliable_kafka.ops.waiting import WaitingEndpoints

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"acker-1: cannot serve /metrics on 127.0.0.1:{port}"):
            WaitingEndpoints(
                topology="wc",
                component="acker-1",
                kind="acker",
                bootstrap_servers="k:9092",
                host="127.0.0.1",
                port=port,
            )
