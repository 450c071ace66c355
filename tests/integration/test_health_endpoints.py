"""/metrics, /healthz and /readyz of a running acker, spout and bolt on the real broker.

Two bolts share a one-partition input in one group: the member that holds the partition is ready,
the other one is alive but not ready ("no partitions assigned"); every other path answers 404.
"""

from __future__ import annotations

import json
import time

from reliable_kafka import AckerWorker, BasicBolt, LocalCluster, Spout, Tracking
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.testing.endpoints import http_get
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics


def _wait(condition, *, timeout: float, what: str, detail=lambda: ""):
    """The condition's first true answer, read again every half second until ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f} s: {what}\n{detail()}")
        time.sleep(0.5)
    return value


def test_every_component_serves_metrics_liveness_and_readiness(kafka_bootstrap):
    topology = unique_name("health")
    source, middle = f"{topology}-in", f"{topology}.mid"
    create_topics(kafka_bootstrap, {source: 2, middle: 1})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=2))
    on = {"topology": topology, "connection": kafka_bootstrap}
    acker = AckerWorker(**on, tracking=Tracking(ackers=2))
    spout = Spout(**on, source_topics=source, group_id=f"{topology}-spout", emit_to=middle)
    bolts = [
        BasicBolt(**on, source_topics=middle, group_id=f"{topology}-bolt", handler=lambda t, c: None, name=f"bolt-{i}")
        for i in range(2)
    ]
    components = [acker, spout, *bolts]
    for component in components:
        component.status_interval_s = 1.0
        component.metrics_port = 0  # a free port on 127.0.0.1, written back once serving

    def answers() -> str:
        return "\n".join(
            f"{c.name}: {path} {http_get(c.metrics_port, path)}" for c in components for path in ("/healthz", "/readyz")
        )

    produce_values(kafka_bootstrap, source, [f"record {i}".encode() for i in range(20)])
    with LocalCluster(*components):
        _wait(lambda: all(c.metrics_port for c in components), timeout=60, what="every component serving")
        for component in (acker, spout):
            _wait(
                lambda component=component: http_get(component.metrics_port, "/readyz")[0] == 200,
                timeout=120,
                what=f"{component.name} ready",
                detail=answers,
            )

        # one bolt holds the middle topic's only partition: it is ready, the other is not. Both
        # answers come from one read: the group may still move the partition between two reads
        def one_ready_one_idle():
            answers_now = [http_get(b.metrics_port, "/readyz") for b in bolts]
            idle = [json.loads(body) for status, body in answers_now if status == 503]
            settled = sorted(status for status, _ in answers_now) == [200, 503]
            return settled and idle[0]["reasons"] == ["no partitions assigned"]

        _wait(
            one_ready_one_idle,
            timeout=120,
            what="one bolt ready, the other not, saying it has no partitions",
            detail=answers,
        )
        ready = json.loads(http_get(acker.metrics_port, "/readyz")[1])
        assert ready["status"] == "ok" and sorted(ready["partitions"]) == [f"{topology}.acks:0", f"{topology}.acks:1"]
        for component in components:
            status, body = http_get(component.metrics_port, "/healthz")
            assert status == 200 and json.loads(body)["status"] == "ok", (component.name, body)
            status, body = http_get(component.metrics_port, "/metrics")
            assert status == 200 and b"rk_component_info{" in body, component.name
            for path in ("/", "/metrics/x", "/ready"):
                assert http_get(component.metrics_port, path)[0] == 404, (component.name, path)
