"""/healthz and /readyz: the rules of reliable_kafka.ops.health, on a fake clock, and the routing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from reliable_kafka.ops.health import CONNECT_CHECK_S, Health, routes, serve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _health(kind="bolt", *, partitions=(), connected=None, liveness_s=300.0):
    clock = Clock()
    held = {"partitions": list(partitions)}
    calls = []

    def check(timeout):
        calls.append(clock.now)
        return connected

    health = Health(
        kind=kind, liveness_s=liveness_s, partitions=lambda: held["partitions"], connected=check, clock=clock
    )
    return health, clock, held, calls


def _p(partition, position, end, topic="t.acks"):
    return {"topic": topic, "partition": partition, "position": position, "end": end}


def test_alive_while_the_loop_comes_back_within_the_bound():
    health, clock, _, _ = _health(liveness_s=60)
    health.tick()
    clock.now += 60
    assert health.liveness().ok
    clock.now += 0.5
    check = health.liveness()
    assert not check.ok and "has not come back for 60 s" in check.reasons[0]
    health.tick()  # a slow handler that returns: alive again
    assert health.liveness().ok


def test_a_loop_that_never_ran_a_round_is_dead_after_the_bound_from_start():
    health, clock, _, _ = _health(liveness_s=10)
    assert health.liveness().ok
    clock.now += 11
    assert not health.liveness().ok


def test_a_spark_driver_has_no_loop_to_watch():
    health, clock, _, _ = _health(kind="spark-bolt", liveness_s=10)
    clock.now += 1000
    assert health.liveness().ok
    assert health.readiness().ok  # the cluster answers; no partitions of ours


def test_ready_needs_a_round_partitions_and_the_cluster():
    health, _, held, _ = _health()
    assert health.readiness().reasons == ("starting: the loop has not run a round yet",)
    health.tick()
    assert health.readiness().reasons == ("no partitions assigned",)
    held["partitions"] = [_p(0, 5, 9, topic="t.words")]
    health.tick()
    check = health.readiness()
    assert check.ok and check.details["partitions"] == ["t.words:0"]


def test_not_ready_while_the_cluster_does_not_answer_and_the_check_is_reused():
    health, clock, held, calls = _health(partitions=[_p(0, 0, 0)], connected="KafkaException: transport")
    health.tick()
    check = health.readiness()
    assert not check.ok and check.reasons == ("cluster not reachable: KafkaException: transport",)
    health.readiness()
    assert len(calls) == 1  # within CONNECT_CHECK_S: the same answer, no second request
    clock.now += CONNECT_CHECK_S
    health.readiness()
    assert len(calls) == 2


def test_an_acker_is_ready_once_each_partition_replayed_to_its_end_when_first_seen():
    health, _, held, _ = _health(kind="acker")
    held["partitions"] = [_p(0, 100, 500), _p(1, None, None)]
    health.tick()
    check = health.readiness()
    assert not check.ok and check.reasons == ("rebuilding acker tables: t.acks:0, t.acks:1",)
    held["partitions"] = [_p(0, 499, 800), _p(1, 0, 0)]  # the end moved on: the target stays 500
    health.tick()
    assert health.readiness().reasons == ("rebuilding acker tables: t.acks:0",)
    held["partitions"] = [_p(0, 500, 900), _p(1, 0, 3)]
    health.tick()
    assert health.readiness().ok
    held["partitions"] = [_p(0, 600, 1200), _p(1, 1, 9)]  # behind again under load: still rebuilt
    health.tick()
    assert health.readiness().ok


def test_an_acker_partition_assigned_again_replays_again():
    health, _, held, _ = _health(kind="acker")
    held["partitions"] = [_p(0, 10, 10)]
    health.tick()
    assert health.readiness().ok
    held["partitions"] = []
    health.tick()
    held["partitions"] = [_p(0, 3, 20)]
    health.tick()
    assert health.readiness().reasons == ("rebuilding acker tables: t.acks:0",)


def test_an_empty_partition_with_no_position_yet_is_rebuilt():
    health, _, held, _ = _health(kind="acker")
    held["partitions"] = [_p(0, None, 0)]
    health.tick()
    assert health.readiness().ok


@pytest.fixture
def server():
    health, clock, held, _ = _health(liveness_s=60)

    def metrics_app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"rk_up 1\n"]

    http = serve(routes(metrics_app, health), host="127.0.0.1", port=0)
    try:
        yield f"http://127.0.0.1:{http.server_port}", health, clock, held
    finally:
        http.shutdown()
        http.server_close()


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_endpoint_routes_metrics_probes_and_nothing_else(server):
    base, health, clock, held = server
    assert _get(f"{base}/metrics") == (200, b"rk_up 1\n")
    status, body = _get(f"{base}/readyz")
    assert status == 503 and json.loads(body)["reasons"] == ["starting: the loop has not run a round yet"]
    held["partitions"] = [_p(0, 1, 1, topic="t.words")]
    health.tick()
    status, body = _get(f"{base}/readyz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    assert _get(f"{base}/healthz")[0] == 200
    clock.now += 61
    status, body = _get(f"{base}/healthz")
    assert status == 503 and json.loads(body)["status"] == "failing"
    for path in ("/", "/metricsx", "/health", "/readyz/x"):
        assert _get(f"{base}{path}")[0] == 404, path


def test_an_acker_is_positioned_where_its_tables_are_or_past_a_transaction_marker():
    from types import SimpleNamespace

    from reliable_kafka.ops.health import health_of

    worker = SimpleNamespace(
        name="a",
        kafka_config={},
        _partitions={
            0: SimpleNamespace(next_offset=None, committed=5),  # nothing read since the commit
            1: SimpleNamespace(next_offset=9, committed=3),  # a marker at 9: the consumer is at 10
            2: SimpleNamespace(next_offset=4, committed=3),  # still replaying
        },
    )
    view = SimpleNamespace(
        kind="acker",
        worker=worker,
        consumer_partitions=[_p(0, None, 5), _p(1, 10, 10), _p(2, 4, 8), _p(3, 0, 0)],  # 3: not yet the worker's
    )
    health = health_of(view)
    health._connected = lambda timeout: None  # no cluster here
    health.tick()
    assert health.readiness().reasons == ("rebuilding acker tables: t.acks:2",)
