"""What a component's metrics port says while the component waits for its Kafka cluster.

A worker whose cluster does not answer when it starts waits for it (``kafka.admin.wait_for_cluster``,
called by the run loop) before anything else exists: no consumer, no reporter. Without this its
metrics port would be closed meanwhile, and Prometheus would report the target down (the
``ReliableKafkaTargetDown`` alert) as if the process were gone. From the first failed try until the
cluster answers, :class:`WaitingEndpoints` serves on the same port:

- ``/healthz`` 200: the process is alive and doing what it should; restarting it would not bring
  Kafka back (the reason says what it waits for);
- ``/readyz`` 503, with the address, how long it has waited and librdkafka's last error;
- ``/metrics``: ``rk_component_info``, ``rk_component_start_time_seconds`` and
  ``rk_component_waiting_for_kafka 1`` (0 once the component runs), with the process collectors.

It stops before the component's reporter opens the port again (``server_close``: the reporter's
server binds with ``SO_REUSEADDR``); a port of 0 is written back to the worker, so both use the same.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

from reliable_kafka.ops import health
from reliable_kafka.ops.metrics import METRICS, component_registry, serve_endpoints
from reliable_kafka.ops.reporter import metrics_address

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from confluent_kafka.admin import AdminClient

__all__ = ["WaitingEndpoints", "WAITING_METRIC", "wait_serving"]

WAITING_METRIC = "rk_component_waiting_for_kafka"


class _WaitingCollector:
    def __init__(self, endpoints: WaitingEndpoints) -> None:
        self.endpoints = endpoints

    def describe(self) -> list[Metric]:
        return []  # families are made at scrape time (auto_describe is off)

    def collect(self) -> Iterator[Metric]:
        e = self.endpoints
        labels, values = ["topology", "component"], [e.topology, e.component]
        info = GaugeMetricFamily("rk_component_info", METRICS["rk_component_info"][1], labels=[*labels, "kind", "host"])
        info.add_metric([*values, e.kind, socket.gethostname()], 1)
        started = GaugeMetricFamily(
            "rk_component_start_time_seconds", METRICS["rk_component_start_time_seconds"][1], labels=labels
        )
        started.add_metric(values, e.started_at)
        waiting = GaugeMetricFamily(WAITING_METRIC, METRICS[WAITING_METRIC][1], labels=labels)
        waiting.add_metric(values, 1)
        yield from (info, started, waiting)


class WaitingEndpoints:
    """``/healthz``, ``/readyz`` and ``/metrics`` of a component waiting for its cluster (module doc)."""

    def __init__(
        self,
        *,
        topology: str,
        component: str,
        kind: str,
        bootstrap_servers: str,
        host: str | None,
        port: int,
        since: float | None = None,
    ) -> None:
        """``since``: when the wait began (``time.monotonic()``; default now)."""
        self.topology, self.component, self.kind = topology, component, kind
        self.bootstrap_servers = bootstrap_servers
        self._since = time.monotonic() if since is None else since
        self.started_at = time.time() - (time.monotonic() - self._since)
        self._lock = threading.Lock()
        self._error = ""
        self._tries = 0
        registry = component_registry(_WaitingCollector(self))
        server, self.port = serve_endpoints(component, registry, self, port=port, addr=metrics_address(host))
        self._server: WSGIServer | None = server

    def liveness(self) -> health.Check:
        """Alive: the process waits as it should; restarting it would not bring Kafka back."""
        return health.Check(ok=True, reasons=(self.reason(),))

    def readiness(self) -> health.Check:
        return health.Check(ok=False, reasons=(self.reason(),))

    def failed(self, error: str) -> None:
        """One more failed try, with librdkafka's error."""
        with self._lock:
            self._error, self._tries = error, self._tries + 1

    def reason(self) -> str:
        with self._lock:
            error, tries = self._error, self._tries
        waited = time.monotonic() - self._since
        return (
            f"waiting for Kafka at {self.bootstrap_servers} before starting (for {waited:.0f} s, failed tries: "
            f"{tries}; last error: {error or 'none yet'})"
        )

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def wait_serving(worker: Any, admin: AdminClient, stop: threading.Event, *, bootstrap_servers: str) -> bool:
    """``kafka.admin.wait_for_cluster`` for ``worker`` (a spout, bolt, acker or Spark job): when it
    has a ``metrics_port``, :class:`WaitingEndpoints` serve it from the first failed try until the
    cluster answers or ``stop`` is set, and a port of 0 is written back (its reporter reuses it)."""
    from reliable_kafka.kafka.admin import wait_for_cluster

    name = str(getattr(worker, "name", type(worker).__name__))
    endpoints: list[WaitingEndpoints] = []  # made at the first failed try: a reachable cluster opens nothing
    since = time.monotonic()

    def failed(error: str) -> None:
        port = getattr(worker, "metrics_port", None)
        if port is None:
            return
        if not endpoints:
            endpoints.append(
                WaitingEndpoints(
                    topology=str(getattr(getattr(worker, "topics", None), "topology", "")),
                    component=name,
                    kind=str(getattr(worker, "component", "")),
                    bootstrap_servers=bootstrap_servers,
                    host=getattr(worker, "metrics_host", None),
                    port=port,
                    since=since,
                )
            )
            worker.metrics_port = endpoints[0].port
        endpoints[0].failed(error)

    try:
        return wait_for_cluster(admin, stop, component=name, bootstrap_servers=bootstrap_servers, on_failure=failed)
    finally:
        for served in endpoints:
            served.close()  # before the component's reporter opens the same port
