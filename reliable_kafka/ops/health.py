"""``/healthz`` and ``/readyz`` beside ``/metrics``: what an orchestrator asks a component.

Liveness (``/healthz``): the component's loop came back from a round within
``liveness_s`` (the consumer's ``max.poll.interval.ms``, 300 s by default). A handler that takes
long on one tuple is not a liveness failure below that bound: restarting the process would not make
the tuple quicker, and its tree times out and is replayed anyway (the spout's message timeout). Past
the bound Kafka itself has given up on the member (librdkafka leaves the group when the
application does not poll within ``max.poll.interval.ms``), so the process holds no partitions and
does nothing useful; a restart costs nothing then and brings it back into the group. A broker that
goes away is not a liveness failure either: the loop keeps polling and reconnects by itself.

Readiness (``/readyz``): the component's consumer has partitions assigned, an acker has rebuilt
the tables of its partitions (it read each one up to where its end was when it first saw it, the
replay from the committed low point), and the cluster answers a DescribeCluster request made with
the component's own client settings within ``CONNECT_TIMEOUT_S`` (by the probe's thread, at most
every ``CONNECT_CHECK_S``, so probes never pile up on the broker and never touch the worker's
clients).

A Spark driver has no loop of ours to watch (its work runs in Spark's micro-batches): its liveness
says so and passes, its readiness is the cluster check alone.

Everything the worker's thread reads is taken in :meth:`Health.tick`, called by the run loop after
each round; the HTTP thread only reads what tick left and makes its own metadata request.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from reliable_kafka.ops.snapshot import ComponentView, Partition, Worker

__all__ = [
    "Check",
    "Health",
    "Probes",
    "health_of",
    "routes",
    "serve",
    "DEFAULT_LIVENESS_S",
    "CONNECT_CHECK_S",
    "CONNECT_TIMEOUT_S",
    "PATHS",
]

DEFAULT_LIVENESS_S = 300.0  # librdkafka's max.poll.interval.ms default, in seconds
CONNECT_CHECK_S = 2.0  # a cluster check is reused this long
CONNECT_TIMEOUT_S = 3.0  # a cluster check that takes longer counts as "not reachable"
LOOP_KINDS = ("spout", "transactional-spout", "bolt", "acker")  # components run by the shared run loop
PATHS = ("/metrics", "/healthz", "/readyz")


@dataclass(frozen=True)
class Check:
    """One probe's answer: ``ok`` (HTTP 200, else 503) and why not, in words."""

    ok: bool
    reasons: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def body(self) -> bytes:
        return json.dumps(
            {"status": "ok" if self.ok else "failing", "reasons": list(self.reasons), **self.details},
            separators=(",", ":"),
        ).encode()


def _liveness_bound(worker: Worker) -> float:
    """The consumer's ``max.poll.interval.ms`` (what Kafka allows between polls), in seconds."""
    from reliable_kafka.kafka.config import consumer_settings

    config = consumer_settings(getattr(worker, "kafka_config", None))
    try:
        return int(str(config.get("max.poll.interval.ms", int(DEFAULT_LIVENESS_S * 1000)))) / 1000
    except ValueError:
        return DEFAULT_LIVENESS_S  # librdkafka refuses the value itself, with its own message


def _cluster_check(worker: Worker) -> Callable[[float], str | None]:
    """A metadata request with the worker's client settings; returns None, or why it failed."""
    admin = None

    def check(timeout: float) -> str | None:
        nonlocal admin
        try:
            if admin is None:
                from reliable_kafka.kafka.admin import admin_client

                admin = admin_client(
                    worker.bootstrap_servers,
                    getattr(worker, "kafka_config", None) or {},
                    component=f"{worker.name} (health)",
                    clients=getattr(worker, "clients", None),
                )
            # DescribeCluster: small, needs no ACL, creates nothing (a metadata request naming a
            # topic could auto-create it on a broker that allows that)
            describe = getattr(admin, "describe_cluster", None)
            if describe is not None:
                describe(request_timeout=timeout).result(timeout=timeout + 1)
            else:  # a client factory's stand-in without it (e.g. the in-memory Kafka)
                admin.list_topics(timeout=timeout)
            return None
        except Exception as exc:  # the broker is away, refused, timed out: the answer is "not ready"
            return f"{type(exc).__name__}: {exc}"

    return check


class Health:
    """The liveness and readiness of one component, from what its loop leaves in :meth:`tick`.

    ``partitions`` is read by :meth:`tick` (the view's consumer partitions, as dicts with
    ``topic``, ``partition``, ``position`` and ``end``); ``connected`` makes the cluster check
    (None: reachable, else the reason). ``clock`` is monotonic seconds (a test's fake clock).
    """

    def __init__(
        self,
        *,
        kind: str,
        liveness_s: float,
        partitions: Callable[[], Iterable[Partition]],
        connected: Callable[[float], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kind = kind
        self.liveness_s = float(liveness_s)
        self._partitions = partitions
        self._connected = connected
        self._clock = clock
        self.started = clock()
        self.last_tick: float | None = None
        self.assigned: tuple[tuple[str, int], ...] = ()
        # acker: per assigned partition, the end offset its replay must reach (None: reached it)
        self.replay_to: dict[tuple[str, int], int | None] = {}
        self._check_lock = threading.Lock()
        self._checked_at: float | None = None
        self._unreachable: str | None = None

    # --- the worker's thread --------------------------------------------------------------------

    def tick(self) -> None:
        """After each round of the loop: it is alive, and this is what it holds."""
        self.last_tick = self._clock()
        partitions = list(self._partitions())
        self.assigned = tuple((p["topic"], p["partition"]) for p in partitions)
        if self.kind == "acker":
            self._follow_replay(partitions)

    def _follow_replay(self, partitions: list[Partition]) -> None:
        """An acker's partition is rebuilt once its position reached the end offset the partition
        had when this worker first saw it assigned (the replay from the committed low point)."""
        held = set(self.assigned)
        for key in [k for k in self.replay_to if k not in held]:
            del self.replay_to[key]  # revoked: a new assignment replays again
        for p in partitions:
            key = (p["topic"], p["partition"])
            if key in self.replay_to and self.replay_to[key] is None:
                continue  # rebuilt: from now on it only follows the new records
            target = self.replay_to.get(key)
            if target is None:
                if p["end"] is None:
                    continue  # no end known before the first fetch: replaying, target unknown
                target = self.replay_to[key] = p["end"]
            position = p["position"] if p["position"] is not None else 0
            if position >= target:
                self.replay_to[key] = None

    # --- the probe's thread ---------------------------------------------------------------------

    def liveness(self) -> Check:
        if self.kind not in LOOP_KINDS:
            return Check(True, (), {"loop": f"none watched ({self.kind}: Spark runs the work)"})
        now = self._clock()
        since = now - (self.last_tick if self.last_tick is not None else self.started)
        details = {"since_last_round_s": round(since, 3), "bound_s": self.liveness_s}
        if since > self.liveness_s:
            what = "last round" if self.last_tick is not None else "start"
            return Check(False, (f"the loop has not come back for {since:.0f} s since its {what}",), details)
        return Check(True, (), details)

    def readiness(self) -> Check:
        reasons = []
        if self.kind in LOOP_KINDS:
            if self.last_tick is None:
                reasons.append("starting: the loop has not run a round yet")
            elif not self.assigned:
                reasons.append("no partitions assigned")
            elif self.kind == "acker":
                replaying = sorted(f"{t}:{p}" for t, p in self.assigned if self.replay_to.get((t, p), -1) is not None)
                if replaying:
                    reasons.append(f"rebuilding acker tables: {', '.join(replaying)}")
        unreachable = self._cluster()
        if unreachable is not None:
            reasons.append(f"cluster not reachable: {unreachable}")
        details = {"partitions": [f"{t}:{p}" for t, p in self.assigned]}
        return Check(not reasons, tuple(reasons), details)

    def _cluster(self) -> str | None:
        with self._check_lock:  # one request at a time; concurrent probes share its answer
            now = self._clock()
            if self._checked_at is None or now - self._checked_at >= CONNECT_CHECK_S:
                self._unreachable = self._connected(CONNECT_TIMEOUT_S)
                self._checked_at = self._clock()
            return self._unreachable


def _acker_partitions(view: ComponentView) -> list[Partition]:
    """The acker's assigned partitions, positioned where its tables are: after the last record
    folded, else at the committed low point it replays from (the consumer's own position stays
    unknown until a record is consumed, so an empty partition would never look rebuilt), or at
    the consumer's position when that is further (it also passes transaction markers, which a
    transactional spout's acks leave at the end of a partition and no fold ever passes)."""
    held = getattr(view.worker, "_partitions", {})
    out = []
    for p in view.consumer_partitions:
        state = held.get(p["partition"])
        if state is None:
            continue  # assigned by the consumer, not yet by the worker's callback
        known = [o for o in (state.next_offset, state.committed, p["position"]) if o is not None]
        out.append({**p, "position": max(known) if known else None})
    return out


def health_of(view: ComponentView) -> Health:
    """The :class:`Health` of a component's view (:mod:`.snapshot`)."""
    worker = view.worker
    if view.kind == "acker":
        partitions: Callable[[], Iterable[Partition]] = lambda: _acker_partitions(view)  # noqa: E731
    else:
        partitions = lambda: view.consumer_partitions  # noqa: E731
    return Health(
        kind=view.kind,
        liveness_s=_liveness_bound(worker),
        partitions=partitions,
        connected=_cluster_check(worker),
    )


# --- HTTP ---------------------------------------------------------------------------------------


class Probes(Protocol):
    """What ``/healthz`` and ``/readyz`` ask: a running component's :class:`Health`, or a waiting
    one's endpoints (``ops.waiting``)."""

    def liveness(self) -> Check: ...

    def readiness(self) -> Check: ...


def routes(metrics_app: WSGIApplication, health: Probes) -> WSGIApplication:
    """A WSGI app: ``/metrics`` (``metrics_app``), ``/healthz``, ``/readyz``; 404 elsewhere."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path in ("/healthz", "/readyz"):
            check = health.liveness() if path == "/healthz" else health.readiness()
            body = check.body()
            status = "200 OK" if check.ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        body = f"not found: {path} (served here: {', '.join(PATHS)})\n".encode()
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scrape never holds the process at exit


class _Server6(_Server):
    address_family = socket.AF_INET6  # an IPv6 address to bind, e.g. "::"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass  # a probe every few seconds would fill the log


def serve(app: WSGIApplication, *, host: str, port: int) -> WSGIServer:
    """Serve ``app`` on ``host:port`` in a daemon thread; ``server.shutdown()`` stops it."""
    server_class = _Server6 if ":" in host else _Server
    server = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name=f"http-{server.server_port}", daemon=True).start()
    return server
