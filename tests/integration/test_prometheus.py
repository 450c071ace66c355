"""A real Prometheus server scrapes a running topology whose bolt raises on every record, with the
shipped alert rules, and the dead-letter flood alert fires.

Debian's ``prometheus`` (``.ci/prometheus.sh``). The server runs on a free loopback port with its
own data directory under the test's tmp dir, scrapes every second and evaluates every second; the
shipped rules are loaded unchanged except their ``for:`` durations (5 s here, so that the test
does not wait minutes; their expressions are the shipped ones). Waits are bounded and fail with
what Prometheus said.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from reliable_kafka import AckerWorker, BasicBolt, LocalCluster, Spout, Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

RULES = Path(__file__).resolve().parents[2] / "deploy/prometheus/reliable-kafka-rules.yml"


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        message = "Debian's prometheus is not installed: run .ci/prometheus.sh"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _wait(condition, *, timeout: float, what: str, detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except OSError:  # the server is not listening yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f} s: {what}\n{detail()}")
        time.sleep(0.5)


def _start_prometheus(binary: str, tmp_path: Path, ports: list[int]) -> tuple[subprocess.Popen, str, Callable[[], str]]:
    """A Prometheus scraping 127.0.0.1 at ``ports`` every second with the shipped rules (``for: 5s``),
    answering its API: (the process, the API's URL, what its log said)."""
    rules = tmp_path / "rules.yml"
    rules.write_text(re.sub(r"\bfor: \S+", "for: 5s", RULES.read_text()))
    config = tmp_path / "prometheus.yml"
    targets = ", ".join(f'"127.0.0.1:{port}"' for port in ports)
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(rules))}]\n"
        "scrape_configs:\n"
        f"  - job_name: reliable-kafka\n    static_configs: [{{targets: [{targets}]}}]\n"
    )
    port = _free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    api = f"http://127.0.0.1:{port}/api/v1"

    def said() -> str:
        return f"prometheus log:\n{log.read_text()[-3000:]}"

    try:
        _wait(
            lambda: _get(f"{api}/status/buildinfo")["status"] == "success",
            timeout=60,
            what="Prometheus up",
            detail=said,
        )
    except BaseException:
        _stop(server)
        raise
    return server, api, said


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _firing(api: str, name: str) -> list[dict]:
    alerts = _get(f"{api}/alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_prometheus_fires_the_dead_letter_flood_alert_on_a_bolt_that_fails_everything(kafka_bootstrap, tmp_path):
    binary = _prometheus()
    topology = unique_name("prom")
    source = f"{topology}-in"
    create_topics(kafka_bootstrap, {source: 1, f"{topology}.mid": 1})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=1))

    def always_raise(tuple_, collector):
        raise ValueError("this deploy fails every record")

    on = {"topology": topology, "connection": kafka_bootstrap}
    acker = AckerWorker(**on, tracking=Tracking(ackers=1))
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=f"{topology}.mid",
        tracking=Tracking(max_retries=0, backoff=Backoff(initial_ms=0)),
    )
    bolt = BasicBolt(**on, source_topics=f"{topology}.mid", group_id=f"{topology}-parse", handler=always_raise)
    components = [acker, spout, bolt]
    for component in components:
        component.status_interval_s = 1.0
        component.metrics_port = 0  # a free port on 127.0.0.1, written back once serving

    stop = threading.Event()

    def keep_writing():
        n = 0
        while not stop.wait(0.2):
            produce_values(kafka_bootstrap, source, [f"record {n + i}".encode() for i in range(5)])
            n += 5

    writer = threading.Thread(target=keep_writing, daemon=True)
    server = None
    try:
        with LocalCluster(*components):
            _wait(lambda: all(c.metrics_port for c in components), timeout=60, what="every component serving /metrics")
            server, api, said = _start_prometheus(binary, tmp_path, [c.metrics_port for c in components])
            # the three targets are scraped, and the verdict gauges are in Prometheus
            query = lambda q: _get(f"{api}/query?query={urllib.parse.quote(q)}")["data"]["result"]  # noqa: E731
            _wait(
                lambda: len(query('up{job="reliable-kafka"} == 1')) == 3,
                timeout=60,
                what="three healthy targets",
                detail=lambda: json.dumps(_get(f"{api}/targets"), indent=1)[-3000:],
            )
            writer.start()

            [alert] = _wait(
                lambda: _firing(api, "ReliableKafkaDeadLetterFlood"),
                timeout=120,
                what="ReliableKafkaDeadLetterFlood firing",
                detail=lambda: json.dumps(_get(f"{api}/alerts"), indent=1)[-3000:] + "\n" + said(),
            )
            assert alert["labels"]["component"] == spout.name and alert["labels"]["topology"] == topology
            assert alert["labels"]["severity"] == "critical"
            assert "docs/operations.md#runbook-dead-letter-flood" in alert["annotations"]["runbook"]
            assert spout.stats.dead_lettered > 0 and spout.stats.completed == 0
            states = query(f'rk_component_verdict{{topology="{topology}"}} == 1')
            assert {s["metric"]["component"] for s in states} == {c.name for c in components}
    finally:
        stop.set()
        if server is not None:
            _stop(server)


def test_prometheus_sees_a_worker_that_waits_for_kafka_as_a_live_target_and_fires_the_waiting_alert(tmp_path):
    """An acker started while its cluster does not answer (nothing listens on its port) serves its
    metrics port meanwhile: the target is up, ``rk_component_waiting_for_kafka`` is 1 and the
    waiting alert fires, not the target-down one."""
    binary = _prometheus()
    acker = AckerWorker(topology=unique_name("prom-wait"), connection=f"127.0.0.1:{_free_port()}")
    acker.metrics_port = 0
    stop = threading.Event()
    thread = threading.Thread(target=acker.run, args=(stop,), daemon=True)
    thread.start()
    server = None
    try:
        _wait(lambda: acker.metrics_port, timeout=120, what="the waiting acker serving its metrics port")
        server, api, said = _start_prometheus(binary, tmp_path, [acker.metrics_port])
        [alert] = _wait(
            lambda: _firing(api, "ReliableKafkaWaitingForKafka"),
            timeout=120,
            what="ReliableKafkaWaitingForKafka firing",
            detail=lambda: json.dumps(_get(f"{api}/alerts"), indent=1)[-3000:] + "\n" + said(),
        )
        assert alert["labels"]["component"] == acker.name and alert["labels"]["topology"] == acker.topics.topology
        assert "docs/operations.md#runbook-waiting" in alert["annotations"]["runbook"]
        up = _get(f"{api}/query?query={urllib.parse.quote('up')}")["data"]["result"]
        assert [sample["value"][1] for sample in up] == ["1"]
        assert _firing(api, "ReliableKafkaTargetDown") == []
        assert thread.is_alive()  # still waiting: never started
    finally:
        stop.set()
        thread.join(60)
        if server is not None:
            _stop(server)
    assert not thread.is_alive()
