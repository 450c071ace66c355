"""``acker --consumer-config``: a setting for the acker's consumers only, never its producers."""

from __future__ import annotations

from reliable_kafka.acker import AckerWorker
from reliable_kafka.cli import build_parser
from reliable_kafka.kafka.config import consumer_settings, producer_settings


def test_consumer_config_reaches_the_consumer_only(monkeypatch):
    ran = []
    monkeypatch.setattr(AckerWorker, "run", lambda self, **kwargs: ran.append(self))
    args = build_parser().parse_args(
        [
            "acker",
            "--topology=t",
            "--bootstrap-servers=127.0.0.1:9",
            "--consumer-config=session.timeout.ms=10000",
            "--kafka-config",
            "client.rack=r1",
        ]
    )
    assert args.handler(args) == 0
    (worker,) = ran
    consumer, producer = consumer_settings(worker.kafka_config), producer_settings(worker.kafka_config)
    assert consumer["session.timeout.ms"] == "10000" and consumer["client.rack"] == "r1"
    assert "session.timeout.ms" not in producer and producer["client.rack"] == "r1"
