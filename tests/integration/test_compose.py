"""docker/compose.yaml for real: Kafka and two acker containers, the word count from the host.

One acker is stopped with SIGTERM (it exits 0 after committing its low point); then, while trees
are pending (the count bolt holds the second batch's words), the other is killed with SIGKILL with
no other acker running; restarted, they replay their partitions from the committed low points, and
every sentence is counted (nothing lost).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from examples.word_count import build
from reliable_kafka import LocalCluster
from reliable_kafka.kafka.admin import admin_client, partition_count
from reliable_kafka.offsets import committed_offsets, end_offsets, lag
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.session import _free_port
from reliable_kafka.testing.topics import create_topics

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = "wordcount"  # compose.yaml's ackers serve this topology
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def compose_command() -> list[str]:
    """``docker compose`` (v2 plugin) where present, else Debian's ``docker-compose`` (v1)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed (docker/engine start installs it)")


class Compose:
    def __init__(self, project: str, port: int) -> None:
        self.command = [*compose_command(), "-f", str(REPO / "docker" / "compose.yaml"), "-p", project]
        self.env = {**os.environ, "RK_KAFKA_PORT": str(port), "RK_ACKER_RESTART": "no"}
        self.bootstrap = f"127.0.0.1:{port}"

    def __call__(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([*self.command, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)} failed: {done.stderr[-2000:]}"
        return done.stdout

    def container(self, service: str, client):
        (cid,) = self("ps", "-q", service).split()
        return client.containers.get(cid)


@pytest.fixture(scope="module")
def compose(docker_engine):
    build = subprocess.run([str(REPO / "docker" / "build-images")], capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, f"docker/build-images failed:\n{build.stderr[-3000:]}"
    stack = Compose(f"rk{uuid.uuid4().hex[:8]}", _free_port())
    stack("up", "-d")
    try:
        yield stack
    finally:
        stack("down", "-v", "--timeout", "10")


def wait_for(condition, *, timeout: float, what: str, state=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f}s: {what} {state()}")
        time.sleep(0.5)


def sentences(count: int, start: int, prefix: str = "") -> list[str]:
    return [
        " ".join(prefix + WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 4)) for i in range(start, start + count)
    ]


def test_word_count_survives_acker_sigterm_and_sigkill(compose, docker_engine):
    bootstrap = compose.bootstrap
    admin = admin_client(bootstrap)
    # The acker containers create the topology's topics (4 ack partitions) once Kafka answers.
    wait_for(
        lambda: partition_count(admin, f"{TOPOLOGY}.acks") == 4,
        timeout=180,
        what="the acker containers created wordcount.acks",
        state=lambda: compose("logs", "--tail", "20"),
    )
    # each acker's compose health check is its /readyz: ready once it holds and rebuilt partitions
    ackers = [compose.container(s, docker_engine) for s in ("acker-1", "acker-2")]

    def health() -> list:
        for c in ackers:
            c.reload()
        return [c.attrs["State"].get("Health", {}).get("Status") for c in ackers]

    wait_for(lambda: health() == ["healthy", "healthy"], timeout=180, what="both ackers healthy", state=health)
    assert "CONFWARN" not in compose("logs", "acker-1", "acker-2")  # settings reach their own clients only
    create_topics(bootstrap, {"sentences": 2, "words": 2, f"{TOPOLOGY}.sentences": 2})
    counts, components = build(bootstrap, topology=TOPOLOGY)
    host_side = components[1:]  # spout, split and count on the host; the ackers are the containers
    assert [type(c).__name__ for c in host_side] == ["Spout", "BasicBolt", "BasicBolt"]
    # The count bolt holds "late-" words until released: their trees stay pending meanwhile.
    held, release = threading.Event(), threading.Event()
    count_words = host_side[2].handler

    def holding(word, collector):
        if word.value.startswith(b"late-"):
            held.set()
            assert release.wait(timeout=600), "never released"
        count_words(word, collector)

    host_side[2].handler = holding
    expected = Counter()

    def produce(batch: list[str]) -> None:
        produce_values(bootstrap, "sentences", [s.encode() for s in batch])
        expected.update(word for s in batch for word in s.split())

    def spout_done() -> bool:
        return lag(bootstrap, f"{TOPOLOGY}-spout", "sentences") == 0

    def acks_state() -> str:
        return (
            f"committed {committed_offsets(bootstrap, f'{TOPOLOGY}.ackers', f'{TOPOLOGY}.acks')}, "
            f"end {end_offsets(bootstrap, f'{TOPOLOGY}.acks')}"
        )

    def acks_done() -> bool:
        return lag(bootstrap, f"{TOPOLOGY}.ackers", f"{TOPOLOGY}.acks") == 0

    with LocalCluster(*host_side) as cluster:
        try:
            produce(sentences(200, 0))
            cluster.wait_until(spout_done, timeout=180, what="the first 200 sentences done")

            # SIGTERM: a clean exit that commits the low point (here the end: no tree is pending).
            acker1 = compose.container("acker-1", docker_engine)
            compose("stop", "acker-1")
            acker1.reload()
            assert acker1.attrs["State"]["ExitCode"] == 0, acker1.logs(tail=30).decode()
            assert b": stopped;" in acker1.logs(), "acker-1 did not run its shutdown (outcomes, commit)"
            wait_for(acks_done, timeout=60, what="every ack partition committed to its end", state=acks_state)

            # SIGKILL the remaining acker while trees are pending; no acker runs until both restart.
            produce(sentences(300, 200, prefix="late-"))
            assert held.wait(timeout=180), "no late word reached the count bolt"
            assert not acks_done(), f"no pending tree holds a low point back: {acks_state()}"
            acker2 = compose.container("acker-2", docker_engine)
            acker2.kill(signal="SIGKILL")
            acker2.reload()
            assert acker2.attrs["State"]["ExitCode"] == 137
        finally:
            release.set()
        compose("start", "acker-1", "acker-2")
        cluster.wait_until(spout_done, timeout=300, what="every sentence done after the SIGKILL")
        cluster.wait_until(
            lambda: all(counts[w] >= n for w, n in expected.items()), timeout=60, what="every word counted"
        )
    missing = {w: n - counts[w] for w, n in expected.items() if counts[w] < n}
    assert not missing, f"lost words: {missing}"
    assert sum(expected[w] for w in expected if w.startswith("late-")) > 500
