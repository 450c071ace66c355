"""The acker's outcome producer sends at once (no linger) unless the user's kafka_config says otherwise."""

from __future__ import annotations

from reliable_kafka import AckerWorker, Connection


def test_outcomes_are_not_held_back_by_librdkafkas_linger():
    worker = AckerWorker(topology="t", connection="127.0.0.1:1")
    assert worker.producer_config()["linger.ms"] == 0


def test_the_users_settings_win_and_are_not_changed():
    given = {"linger.ms": 20, "client.id": "a"}
    worker = AckerWorker(topology="t", connection=Connection("127.0.0.1:1", kafka_config=given))
    assert worker.producer_config() == {"linger.ms": 20, "client.id": "a"}
    assert given == {"linger.ms": 20, "client.id": "a"}
