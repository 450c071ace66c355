"""Which Kafka the test session uses: RK_BOOTSTRAP, then Docker, then the embedded broker."""

from __future__ import annotations

import pytest

from reliable_kafka.errors import ConfigError
from reliable_kafka.testing.session import choose_kafka_source


def _probe(answer: bool, calls: list[int]):
    def ping() -> bool:
        calls.append(1)
        return answer

    return ping


@pytest.mark.parametrize("docker", [True, False])
def test_rk_bootstrap_wins_without_probing_docker(docker):
    calls: list[int] = []
    assert choose_kafka_source({"RK_BOOTSTRAP": "kafka:9092"}, _probe(docker, calls)) == "external"
    assert calls == []


def test_docker_when_a_daemon_answers():
    assert choose_kafka_source({}, _probe(True, [])) == "docker"


def test_embedded_when_no_daemon_answers():
    assert choose_kafka_source({"RK_BOOTSTRAP": "  "}, _probe(False, [])) == "embedded"


@pytest.mark.parametrize("forced", ["embedded", "docker", " Embedded "])
def test_rk_kafka_forces_a_source_without_probing(forced):
    calls: list[int] = []
    assert choose_kafka_source({"RK_KAFKA": forced}, _probe(True, calls)) == forced.strip().lower()
    assert calls == []


def test_unknown_rk_kafka_is_rejected_by_name():
    with pytest.raises(ConfigError, match="RK_KAFKA"):
        choose_kafka_source({"RK_KAFKA": "podman"}, _probe(True, []))
