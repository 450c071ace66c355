"""docker/ackers.yaml beside a Kafka that already runs (the session's embedded broker).

The two acker containers are configured by the environment only (topology, bootstrap, ackers,
replication factor, a command-config file, names, metrics ports; the host's network reaches the
broker on loopback); they become healthy (their compose health check is /readyz), say their stable names,
log no librdkafka configuration warning (the session timeout reaches their consumers only), and
complete the word count run on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from examples.word_count import build
from reliable_kafka import LocalCluster
from reliable_kafka.offsets import lag
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def compose_command() -> list[str]:
    """``docker compose`` (v2 plugin) where present, else Debian's ``docker-compose`` (v1)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed (docker/engine start installs it)")


def wait_for(condition, *, timeout: float, what: str, state=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f}s: {what} {state()}")
        time.sleep(0.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ackers(docker_engine, kafka_bootstrap, tmp_path):
    done = subprocess.run([str(REPO / "docker" / "build-images")], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"docker/build-images failed:\n{done.stderr[-3000:]}"
    topology = unique_name("ackers")
    properties = tmp_path / "client.properties"
    properties.write_text("# what a secured cluster would need; here only a client id\nclient.id=compose-ackers\n")
    properties.chmod(0o644)  # the image's user (nobody) reads it
    ports = [_free_port(), _free_port()]
    env = {
        **os.environ,
        "RK_TOPOLOGY": topology,
        "RK_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RK_ACKERS": "2",
        "RK_REPLICATION_FACTOR": "1",  # one broker
        "RK_COMMAND_CONFIG": str(properties),
        "RK_ACKER_PREFIX": f"{topology}-acker",
        "RK_ACKER1_METRICS_PORT": str(ports[0]),
        "RK_ACKER2_METRICS_PORT": str(ports[1]),
        "RK_METRICS_HOST": "127.0.0.1",  # the host's network: keep the endpoints on loopback
        "RK_ACKER_RESTART": "no",
    }
    command = [*compose_command(), "-f", str(REPO / "docker" / "ackers.yaml"), "-p", f"rk{uuid.uuid4().hex[:8]}"]

    def compose(*args: str) -> str:
        done = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(args)} failed: {done.stderr[-2000:]}"
        return done.stdout

    compose("up", "-d")
    try:
        yield topology, ports, compose
    finally:
        compose("down", "--timeout", "10")


def test_ackers_beside_an_existing_kafka_run_the_word_count(ackers, kafka_bootstrap, docker_engine):
    topology, ports, compose = ackers
    containers = {s: docker_engine.containers.get(compose("ps", "-q", s).strip()) for s in ("acker-1", "acker-2")}

    def health() -> dict:
        for c in containers.values():
            c.reload()
        return {s: c.attrs["State"].get("Health", {}).get("Status") for s, c in containers.items()}

    wait_for(
        lambda: set(health().values()) == {"healthy"},
        timeout=240,
        what="both ackers healthy (their /readyz)",
        state=lambda: f"{health()}\n{compose('logs', '--tail', '20')}",
    )
    for n, port in enumerate(ports, 1):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as response:
            assert json.loads(response.read())["status"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert f'component="{topology}-acker-{n}"' in response.read().decode()
    logs = compose("logs")
    assert "CONFWARN" not in logs, logs  # no setting reached a client it does not belong to

    sentences, words = f"{topology}-sentences", f"{topology}-words"
    create_topics(kafka_bootstrap, {sentences: 2, words: 2, f"{topology}.sentences": 2})
    counts, components = build(kafka_bootstrap, topology=topology, sentences=sentences, words=words)
    host_side = components[1:]  # the spout and the two bolts: the ackers are the containers
    produce_values(kafka_bootstrap, sentences, [f"alpha beta {i}".encode() for i in range(200)])
    with LocalCluster(*host_side) as cluster:
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, f"{topology}-spout", sentences) == 0,
            timeout=300,
            what="every sentence done, its tree completed by the containers' ackers",
        )
    assert counts["alpha"] >= 200 and counts["beta"] >= 200
