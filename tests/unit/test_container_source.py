"""The container source's configuration and the docker tests' CI rule (no engine needed)."""

from __future__ import annotations

import sys

import pytest

from reliable_kafka.errors import MissingExtraError
from reliable_kafka.testing import fixtures, session


def test_missing_testcontainers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "testcontainers.core.container", None)  # import fails
    with pytest.raises(MissingExtraError, match=r"reliable-kafka\[testing\]"):
        session.kafka_container(env={"TESTCONTAINERS_RYUK_DISABLED": "false"})


@pytest.mark.parametrize("ci", ["true", "1"])
def test_docker_tests_fail_in_ci_without_an_engine(monkeypatch, ci):
    monkeypatch.setattr(fixtures, "docker_available", lambda: False)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI expects a Docker engine"):
        fixtures.require_docker()


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_docker_tests_skip_outside_ci_and_say_so(monkeypatch, ci):
    monkeypatch.setattr(fixtures, "docker_available", lambda: False)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="skipped outside CI only"):
        fixtures.require_docker()


def test_docker_tests_run_when_an_engine_answers(monkeypatch):
    monkeypatch.setattr(fixtures, "docker_available", lambda: True)
    monkeypatch.setenv("CI", "true")
    fixtures.require_docker()
