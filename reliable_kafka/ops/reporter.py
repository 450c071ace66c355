"""Each component's reporter: a status snapshot every few seconds, and ``/metrics`` when asked.

:func:`attach` is called by the shared run loop (``lifecycle.run_until_stopped``) and by Spark jobs'
``start``; it starts a daemon thread that samples the worker (see :mod:`.snapshot`) every
``interval_s`` and publishes a JSON snapshot to ``<topology>.status`` (compacted, keyed by the
component's name). The thread, not the worker's loop, publishes: a handler stuck on one tuple
still reports, and shows as STALL rather than vanishing. ``close()`` publishes a last snapshot
with ``state = "stopped"``; a killed component simply stops publishing and goes stale (DOWN).

Reporting never stops a worker: an error here is logged and the next round tries again.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from reliable_kafka.ops.health import health_of
from reliable_kafka.ops.snapshot import ComponentView, Worker, view_of

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from confluent_kafka import Producer

__all__ = [
    "ComponentReporter",
    "attach",
    "metrics_address",
    "SCHEMA",
    "DEFAULT_INTERVAL_S",
    "HISTORY",
    "METRICS_HOST_ENV",
]

log = logging.getLogger(__name__)

SCHEMA = 1
DEFAULT_INTERVAL_S = 5.0  # a worker's ``status_interval_s`` attribute overrides it
HISTORY = 12  # samples kept in each snapshot: the verdict's window (a minute at 5 s)
METRICS_HOST_ENV = "RK_METRICS_HOST"  # where /metrics listens when the worker does not say (images: 0.0.0.0)


def metrics_address(host: str | None) -> str:
    """Where a component's endpoints listen: its ``metrics_host``, else ``$RK_METRICS_HOST``, else
    loopback (``ops.metrics.DEFAULT_METRICS_HOST``)."""
    from reliable_kafka.ops.metrics import DEFAULT_METRICS_HOST

    return host or os.environ.get(METRICS_HOST_ENV) or DEFAULT_METRICS_HOST


class ComponentReporter:
    """Samples one component, keeps its last ``HISTORY`` samples, publishes, serves metrics."""

    def __init__(
        self,
        view: ComponentView,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        publish: bool = True,
    ) -> None:
        self.view = view
        self.interval_s = float(interval_s)
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.publish_enabled = publish
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = time.time()
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.last: dict[str, Any] | None = None
        self.capacity: float | None = None
        self._producer: Producer | None = None
        self._stop = threading.Event()
        self._next_refresh = 0.0
        self._thread: threading.Thread | None = None
        self._metrics_server: WSGIServer | None = None
        self._lock = threading.Lock()  # one snapshot at a time (thread, scrape, close)
        self.health = health_of(view)  # /healthz and /readyz beside /metrics (ops.health)

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ComponentReporter:
        if self.metrics_port is not None:
            from reliable_kafka.ops.metrics import serve_metrics

            self._metrics_server, port = serve_metrics(
                self, port=self.metrics_port, addr=metrics_address(self.metrics_host)
            )
            self.metrics_port = port
            self.view.worker.metrics_port = port  # 0 asked for a free port: say which one
        self._thread = threading.Thread(target=self._loop, name=f"{self.view.name}-status", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop sampling, publish the ``stopped`` snapshot, stop serving metrics."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._round(state="stopped")
        self.view.close()  # its broker-offsets client
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    def tick(self) -> None:
        """Called by the worker's loop after each round: refreshes what only the worker's thread
        may read (its consumer's positions, what /healthz and /readyz judge), at most about once a second."""
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + min(1.0, self.interval_s / 2)
            try:
                self.view.refresh()
            except Exception as exc:
                log.debug("%s: status refresh: %s", self.view.name, exc)
            self.health.tick()  # the loop is alive, and holds these partitions

    def _loop(self) -> None:
        while True:
            self._round(state="running")
            if self._stop.wait(self.interval_s):
                return

    def _round(self, *, state: str) -> None:
        try:
            snapshot = self.snapshot(state=state)
            if self.publish_enabled:
                self._publish(snapshot)
        except Exception as exc:  # the broker is away, a race with close(): next round
            log.warning("%s: status snapshot not published: %s", self.view.name, exc)

    # --- the snapshot ---------------------------------------------------------------------------

    def snapshot(self, *, state: str = "running", record: bool = True) -> dict[str, Any]:
        """Sample now and return the whole snapshot (docs/operations.md); ``record`` appends the
        sample to the history (the publishing rounds do; a metrics scrape does not, so the
        verdict's window stays evenly spaced)."""
        with self._lock:
            now = time.time()
            read = self.view.sample()
            latency = self.view.latency()
            histogram = latency.snapshot() if latency is not None else None
            counters = read["counters"]
            point = {
                "t": round(now, 3),
                "progress": read["progress"],
                "backlog": read["backlog"],
                "counters": counters,
                "partitions": {
                    f"{p['topic']}:{p['partition']}": [p.get("committed"), p.get("end")] for p in read["partitions"]
                },
            }
            if histogram is not None:
                point["latency_counts"] = histogram["counts"]
                point["latency_sum_s"] = histogram["sum_s"]
            if record:
                self.history.append(point)
                self.capacity = self._capacity()
            snapshot = {
                "schema": SCHEMA,
                "topology": self.view.topology,
                "component": self.view.name,
                "task_id": getattr(self.view.worker, "task_id", None),  # names senders in `trace`
                "kind": self.view.kind,
                "host": self.host,
                "pid": self.pid,
                "started_at": round(self.started_at, 3),
                "published_at": round(now, 3),
                "interval_s": self.interval_s,
                "state": state,
                "group": self.view.group,
                "inputs": self.view.inputs,
                "outputs": self.view.outputs(),
                "metrics_port": self.metrics_port,
                "latency_kind": self.view.latency_name,
                "latency": histogram,
                "capacity": self.capacity,
                **{k: v for k, v in read.items() if k not in ("progress", "backlog")},
                "history": list(self.history),
            }
            if record:
                self.last = snapshot
            return snapshot

    def _capacity(self) -> float | None:
        """Busy share of the handler's slots over the window (Storm UI's capacity; bolts): handler
        seconds over wall seconds times ``parallelism`` (1: the serial loop's share of wall time)."""
        if self.view.latency_name != "process" or len(self.history) < 2:
            return None
        first, last = self.history[0], self.history[-1]
        elapsed = last["t"] - first["t"]
        if elapsed <= 0:
            return None
        slots = getattr(self.view.worker, "parallelism", 1) or 1
        busy: float = (last["latency_sum_s"] - first["latency_sum_s"]) / (elapsed * slots)
        return round(min(1.0, max(0.0, busy)), 4)

    def _publish(self, snapshot: dict[str, Any]) -> None:
        producer = self._producer
        if producer is None:
            producer = self._producer = self._new_producer()
        producer.produce(
            self.view.worker.topics.status,
            key=self.view.name.encode(),
            value=json.dumps(snapshot, separators=(",", ":")).encode(),
        )
        producer.poll(0)

    def _new_producer(self) -> Producer:
        from reliable_kafka.kafka.admin import admin_client, ensure_status_topic
        from reliable_kafka.kafka.clients import new_producer

        worker = self.view.worker
        config = getattr(worker, "kafka_config", None) or {}
        clients = getattr(worker, "clients", None)  # the worker's own client factory (e.g. in memory)
        ensure_status_topic(admin_client(worker.bootstrap_servers, config, clients=clients), worker.topics, timeout=10)
        # snapshots are idempotent facts; a small, quick producer of its own (a transactional
        # worker's producer cannot write outside its transactions)
        quick: dict[str, Any] = {"linger.ms": 50}
        return new_producer(worker.bootstrap_servers, config, clients=clients, **quick)


def attach(worker: Worker) -> ComponentReporter | None:
    """Start reporting for ``worker`` (None for an object of an unknown kind).

    Reads optional attributes of the worker: ``metrics_port`` (serve ``/metrics``; 0 picks a free
    port, written back to the attribute), ``metrics_host`` (the address to bind; default
    ``$RK_METRICS_HOST``, else 127.0.0.1) and ``status_interval_s`` (default 5 s).
    """
    view = view_of(worker)
    if view is None:
        return None
    reporter = ComponentReporter(
        view,
        interval_s=getattr(worker, "status_interval_s", DEFAULT_INTERVAL_S),
        metrics_port=getattr(worker, "metrics_port", None),
        metrics_host=getattr(worker, "metrics_host", None),
    )
    return reporter.start()  # a metrics port in use raises ConfigError: the operator asked for it
