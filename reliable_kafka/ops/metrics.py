"""Prometheus metrics of one component: Storm UI's numbers under ``rk_`` names (docs/operations.md).

One ``CollectorRegistry`` per component, served by ``prometheus_client``'s own HTTP server, with
``prometheus_client``'s process, platform and garbage-collector collectors beside ours. The
collector reads the component at scrape time through its reporter (the same sample a status
snapshot takes), so metrics cost nothing on the hot path. Labels are bounded: ``topology``,
``component`` and, per partition, ``topic`` and ``partition``; outcomes and reasons use the words
of :mod:`.reasons`; never a root id, a record key or a process id.

The verdict is a state set, as kube-state-metrics exports a pod's phase: one series per verdict,
1 for the current one and 0 for the others (``rk_component_verdict{verdict="STALL"} == 1`` is the
alert). It is judged by the function ``status`` uses, over the component's own window. The live
page (``reliable-kafka ui``) serves the topology's verdicts as ``status`` sees them, DOWN and
STOPPED components included (:class:`TopologyCollector`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from reliable_kafka.errors import ConfigError
from reliable_kafka.ops import health
from reliable_kafka.ops.reasons import OUTCOMES, reason_word
from reliable_kafka.ops.verdict import Verdict

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from reliable_kafka.ops.reporter import ComponentReporter

__all__ = [
    "ComponentCollector",
    "TopologyCollector",
    "serve_metrics",
    "serve_endpoints",
    "component_registry",
    "METRICS",
    "TOPOLOGY_METRICS",
    "DEFAULT_METRICS_HOST",
    "BOLT_RESULTS",
]

DEFAULT_METRICS_HOST = "127.0.0.1"
"""Where ``/metrics`` listens unless told otherwise: loopback, so that a library default never
exposes a port. A container must listen on all interfaces (``metrics_host="0.0.0.0"``, CLI
``--metrics-host 0.0.0.0``, or ``RK_METRICS_HOST=0.0.0.0`` in its environment, as the image sets)."""

BOLT_RESULTS = ("acked", "failed", "quarantined")
"""``rk_bolt_tuples_total``'s results: each input tuple ends in exactly one of them."""

METRICS = {
    # name: (type, help, extra labels, kinds)
    "rk_component_info": ("gauge", "1 per running component; kind and host as labels", "kind,host", "all"),
    "rk_component_start_time_seconds": ("gauge", "When the component started (Unix time)", "", "all"),
    "rk_component_verdict": (
        "gauge",
        "The component's verdict over its own window: 1 for the current one, 0 for the others",
        "verdict",
        "all",
    ),
    "rk_component_waiting_for_kafka": (
        "gauge",
        "1 while the component waits for its Kafka cluster to answer before it starts, else 0",
        "",
        "all",
    ),
    "rk_complete_latency_seconds": ("histogram", "Spout emit to COMPLETED outcome of a tree", "", "spouts"),
    "rk_trees_total": ("counter", "Tree outcomes seen by the spout", "outcome", "spouts"),
    "rk_pending_trees": ("gauge", "Trees in flight (emitted, no outcome yet)", "", "spouts"),
    "rk_oldest_pending_age_seconds": (
        "gauge",
        "Age of the oldest pending record since its first emit",
        "topic,partition",
        "spouts",
    ),
    "rk_redeliveries_total": ("counter", "Records emitted again after a failure or timeout", "", "spouts"),
    "rk_dead_letters_total": ("counter", "Records parked in the dead-letter topic", "reason", "spouts"),
    "rk_commit_lag_records": (
        "gauge",
        "Source records between the committed offset and the end",
        "topic,partition",
        "spout",
    ),
    "rk_records_read_total": ("counter", "Source records read", "", "spout"),
    "rk_bolt_tuples_received_total": ("counter", "Bolt input tuples taken from the consumer", "", "bolt"),
    "rk_bolt_tuples_total": (
        "counter",
        "Bolt input tuples by result (acked, failed, quarantined: each tuple in exactly one)",
        "result",
        "bolt",
    ),
    "rk_bolt_handler_errors_total": ("counter", "Handler calls that raised (their tuples are failed)", "", "bolt"),
    "rk_bolt_untracked_tuples_total": ("counter", "Input tuples without anchors (also counted by result)", "", "bolt"),
    "rk_tuples_emitted_total": ("counter", "Tuples emitted", "", "spout,bolt"),
    "rk_process_latency_seconds": ("histogram", "Bolt handler call per tuple", "", "bolt"),
    "rk_capacity_ratio": ("gauge", "Busy share of the handler's slots (parallelism) over the last minute", "", "bolt"),
    "rk_handler_calls_in_flight": ("gauge", "Handler calls running now (at most the bolt's parallelism)", "", "bolt"),
    "rk_oldest_handler_call_age_seconds": (
        "gauge",
        "How long the oldest handler call still running has run (0: none runs)",
        "",
        "bolt",
    ),
    "rk_consumer_lag_records": (
        "gauge",
        "Records between the group's committed offset and the end (else the position)",
        "topic,partition",
        "spout,bolt,acker",
    ),
    "rk_acker_pending_roots": ("gauge", "Roots in the acker tables of this worker", "", "acker"),
    "rk_acker_table_bytes": ("gauge", "Memory of this worker's acker tables", "", "acker"),
    "rk_acker_entries_total": ("counter", "Ack entries folded", "", "acker"),
    "rk_acker_outcomes_total": ("counter", "Outcomes decided", "outcome", "acker"),
    "rk_quarantined_records_total": ("counter", "Records copied to the quarantine topic", "kind", "bolt,acker"),
}
"""The documented list (docs/operations.md is generated from the same facts; a test compares)."""

TOPOLOGY_METRICS = {
    # name: (type, help, extra labels); served by the live page, labels ``topology`` and these
    "rk_topology_verdict": (
        "gauge",
        "The topology's verdict as `status` judges it: 1 for the current one, 0 for the others",
        "verdict",
    ),
    "rk_topology_component_verdict": (
        "gauge",
        "Each component's verdict as `status` judges it (DOWN and STOPPED included): 1 for the current one",
        "component,kind,verdict",
    ),
    "rk_topology_dead_letter_records": ("gauge", "Records held by the dead-letter topic", ""),
    "rk_topology_quarantined_records": ("gauge", "Records held by the quarantine topic", ""),
}

SPOUT_KINDS = ("spout", "transactional-spout", "spark-spout")

Family = TypeVar("Family", CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)


class _MakeFamily(Protocol):
    """A metric family of ``cls`` labelled with the component's labels and ``extra``."""

    def __call__(self, cls: type[Family], name: str, help_text: str, extra: Sequence[str] = ...) -> Family: ...


def _verdict_family(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=[*labels, "verdict"])


def _add_state_set(family: GaugeMetricFamily, values: list[str], current: str) -> None:
    """One series per verdict the code knows (a new one appears by itself), 1 for ``current``."""
    for verdict in Verdict:
        family.add_metric([*values, verdict.value], 1.0 if verdict.value == current else 0.0)


def _judge(snapshot: dict[str, Any]) -> str:
    """The verdict ``status`` would give this snapshot now (the same function, not a copy)."""
    from reliable_kafka.ops.status import judge_snapshot  # imports confluent_kafka: only when scraped

    return judge_snapshot(snapshot, time.time()).verdict.value


class ComponentCollector:
    """A custom collector: builds the metric families from a fresh snapshot at each scrape."""

    def __init__(self, reporter: ComponentReporter) -> None:
        self.reporter = reporter

    def describe(self) -> list[Metric]:
        return []  # families vary by kind; an empty describe() keeps registration lazy

    def collect(self) -> Iterator[Metric]:
        reporter = self.reporter
        snap = reporter.snapshot(record=False)
        base = {"topology": snap["topology"], "component": snap["component"]}
        names, values = list(base), list(base.values())
        kind = snap["kind"]
        counters = snap["counters"]

        def family(cls: type[Family], name: str, help_text: str, extra: Sequence[str] = ()) -> Family:
            return cls(name, help_text, labels=[*names, *extra])

        info = family(GaugeMetricFamily, "rk_component_info", METRICS["rk_component_info"][1], ("kind", "host"))
        info.add_metric([*values, kind, snap["host"]], 1)
        yield info
        started = family(
            GaugeMetricFamily, "rk_component_start_time_seconds", METRICS["rk_component_start_time_seconds"][1]
        )
        started.add_metric(values, snap["started_at"])
        yield started
        # judged over the published window (the scrape's own sample is not part of it), as `status` does
        judged = reporter.last if reporter.last is not None else snap
        verdict = _verdict_family("rk_component_verdict", METRICS["rk_component_verdict"][1], names)
        _add_state_set(verdict, values, _judge({**judged, "state": "running"}))
        yield verdict
        waiting = family(  # 1 only from ops.waiting, before the component starts
            GaugeMetricFamily, "rk_component_waiting_for_kafka", METRICS["rk_component_waiting_for_kafka"][1]
        )
        waiting.add_metric(values, 0)
        yield waiting

        latency = snap.get("latency")
        if latency is not None:
            name = f"rk_{snap['latency_kind']}_latency_seconds"
            hist = family(HistogramMetricFamily, name, METRICS[name][1])
            cumulative, buckets = 0, []
            for bound, n in zip([*latency["bounds"], float("inf")], latency["counts"]):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
            hist.add_metric(values, buckets, latency["sum_s"])
            yield hist

        lag_family = family(
            GaugeMetricFamily, "rk_consumer_lag_records", METRICS["rk_consumer_lag_records"][1], ("topic", "partition")
        )
        for p in snap.get("partitions", []):
            # the group's committed offset against the broker's end (what `reliable-kafka lag` and
            # Kafka's tools read): a blocked loop's position may not move, its commit does not either.
            # Not an acker's: it commits below its oldest pending root, however far it has read
            if p.get("lag") is not None and snap.get("kind") != "acker":
                lag_family.add_metric([*values, p["topic"], str(p["partition"])], max(0, p["lag"]))
            elif p.get("end") is not None and p.get("position") is not None:
                lag_family.add_metric([*values, p["topic"], str(p["partition"])], max(0, p["end"] - p["position"]))
        yield lag_family

        if kind in SPOUT_KINDS:
            yield from self._spout(snap, family, values, counters)
        elif kind == "bolt":
            yield from self._bolt(snap, family, values, counters)
        elif kind == "acker":
            yield from self._acker(snap, family, values, counters)

    def _spout(
        self, snap: dict[str, Any], family: _MakeFamily, values: list[str], counters: dict[str, Any]
    ) -> Iterator[Metric]:
        trees = family(CounterMetricFamily, "rk_trees", METRICS["rk_trees_total"][1], ("outcome",))
        for outcome in OUTCOMES:
            trees.add_metric([*values, outcome], counters.get(outcome, counters.get(f"tracker_{outcome}", 0)))
        yield trees
        pending = family(GaugeMetricFamily, "rk_pending_trees", METRICS["rk_pending_trees"][1])
        pending.add_metric(values, snap.get("pending_roots", 0))
        yield pending
        oldest = family(
            GaugeMetricFamily,
            "rk_oldest_pending_age_seconds",
            METRICS["rk_oldest_pending_age_seconds"][1],
            ("topic", "partition"),
        )
        commit_lag = family(
            GaugeMetricFamily, "rk_commit_lag_records", METRICS["rk_commit_lag_records"][1], ("topic", "partition")
        )
        for p in snap.get("partitions", []):
            labels = [*values, p["topic"], str(p["partition"])]
            oldest.add_metric(labels, p["oldest_pending"]["age_s"] if p.get("oldest_pending") else 0.0)
            if p.get("end") is not None and p.get("committed") is not None:
                commit_lag.add_metric(labels, max(0, p["end"] - p["committed"]))
        yield oldest
        yield commit_lag
        redeliveries = family(CounterMetricFamily, "rk_redeliveries", METRICS["rk_redeliveries_total"][1])
        redeliveries.add_metric(values, counters.get("replayed", counters.get("tracker_redelivered", 0)))
        yield redeliveries
        dead = family(CounterMetricFamily, "rk_dead_letters", METRICS["rk_dead_letters_total"][1], ("reason",))
        by_word: dict[str, int] = {}
        for reason, n in snap.get("dead_letters_by_reason", {}).items():
            word = reason_word(reason)  # old and new spellings add up under one word
            by_word[word] = by_word.get(word, 0) + n
        for word, n in sorted(by_word.items()):
            dead.add_metric([*values, word], n)
        yield dead
        if "read" in counters:
            read = family(CounterMetricFamily, "rk_records_read", METRICS["rk_records_read_total"][1])
            read.add_metric(values, counters["read"])
            yield read
            emitted = family(CounterMetricFamily, "rk_tuples_emitted", METRICS["rk_tuples_emitted_total"][1])
            emitted.add_metric(values, counters.get("emitted", 0))
            yield emitted

    def _bolt(
        self, snap: dict[str, Any], family: _MakeFamily, values: list[str], counters: dict[str, Any]
    ) -> Iterator[Metric]:
        def counter(name: str, value: float) -> CounterMetricFamily:
            metric = family(CounterMetricFamily, name.removesuffix("_total"), METRICS[name][1])
            metric.add_metric(values, value)
            return metric

        yield counter("rk_bolt_tuples_received_total", counters.get("received", 0))
        tuples = family(CounterMetricFamily, "rk_bolt_tuples", METRICS["rk_bolt_tuples_total"][1], ("result",))
        for result in BOLT_RESULTS:  # a handler error fails its tuple: counted as failed, and apart below
            tuples.add_metric([*values, result], counters.get(result, 0))
        yield tuples
        yield counter("rk_bolt_handler_errors_total", counters.get("handler_errors", 0))
        yield counter("rk_bolt_untracked_tuples_total", counters.get("untracked", 0))
        yield counter("rk_tuples_emitted_total", counters.get("emitted", 0))
        capacity = family(GaugeMetricFamily, "rk_capacity_ratio", METRICS["rk_capacity_ratio"][1])
        capacity.add_metric(values, snap.get("capacity") or 0.0)
        yield capacity
        for name, key in (
            ("rk_handler_calls_in_flight", "calls_in_flight"),
            ("rk_oldest_handler_call_age_seconds", "oldest_call_s"),
        ):
            if key in snap:  # bolts that report their calls (every bolt of this version)
                gauge = family(GaugeMetricFamily, name, METRICS[name][1])
                gauge.add_metric(values, snap[key] or 0.0)
                yield gauge
        quarantined = family(
            CounterMetricFamily, "rk_quarantined_records", METRICS["rk_quarantined_records_total"][1], ("kind",)
        )
        quarantined.add_metric([*values, "anchors_header"], counters.get("quarantined", 0))
        yield quarantined

    def _acker(
        self, snap: dict[str, Any], family: _MakeFamily, values: list[str], counters: dict[str, Any]
    ) -> Iterator[Metric]:
        for name, key in (("rk_acker_pending_roots", "pending_roots"), ("rk_acker_table_bytes", "table_bytes")):
            gauge = family(GaugeMetricFamily, name, METRICS[name][1])
            gauge.add_metric(values, snap.get(key, 0))
            yield gauge
        entries = family(CounterMetricFamily, "rk_acker_entries", METRICS["rk_acker_entries_total"][1])
        entries.add_metric(values, counters.get("entries_folded", 0))
        yield entries
        outcomes = family(CounterMetricFamily, "rk_acker_outcomes", METRICS["rk_acker_outcomes_total"][1], ("outcome",))
        for outcome in ("completed", "failed", "timed_out"):
            outcomes.add_metric([*values, outcome], counters.get(outcome, 0))
        yield outcomes
        quarantined = family(
            CounterMetricFamily, "rk_quarantined_records", METRICS["rk_quarantined_records_total"][1], ("kind",)
        )
        quarantined.add_metric([*values, "ack_record"], counters.get("quarantined", 0))
        quarantined.add_metric([*values, "invalid_entry"], counters.get("invalid_entries", 0))
        yield quarantined


class TopologyCollector:
    """The ``status`` report as metrics: the topology's verdict and each component's, as judged
    from the status topic (so a killed or stopped component shows, which its own /metrics cannot).
    ``report`` is a callable returning the ``status --json`` document."""

    def __init__(self, report: Callable[[], dict[str, Any]]) -> None:
        self.report = report

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        report = self.report()
        topology = report["topology"]
        overall = _verdict_family("rk_topology_verdict", TOPOLOGY_METRICS["rk_topology_verdict"][1], ["topology"])
        _add_state_set(overall, [topology], report["verdict"])
        yield overall
        each = _verdict_family(
            "rk_topology_component_verdict",
            TOPOLOGY_METRICS["rk_topology_component_verdict"][1],
            ["topology", "component", "kind"],
        )
        for c in report["components"]:
            _add_state_set(each, [topology, c["name"], str(c.get("kind"))], c["verdict"])
        yield each
        for name, part in (
            ("rk_topology_dead_letter_records", "dead_letters"),
            ("rk_topology_quarantined_records", "quarantine"),
        ):
            held = report.get(part, {}).get("records")
            gauge = GaugeMetricFamily(name, TOPOLOGY_METRICS[name][1], labels=["topology", "topic"])
            if held is not None:
                gauge.add_metric([topology, report[part]["topic"]], held)
            yield gauge


def component_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry with ``collectors`` and prometheus_client's process, platform and GC collectors
    (one registry per component: several components in one process each show the process)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (*collectors, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


def serve_metrics(
    reporter: ComponentReporter, *, port: int, addr: str = DEFAULT_METRICS_HOST
) -> tuple[WSGIServer, int]:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` (:mod:`.health`; 404 elsewhere) for
    ``reporter``'s component on ``addr:port``; returns (server, bound port)."""
    registry = component_registry(ComponentCollector(reporter))
    return serve_endpoints(reporter.view.name, registry, reporter.health, port=port, addr=addr)


def serve_endpoints(
    name: str, registry: CollectorRegistry, probes: health.Probes, *, port: int, addr: str
) -> tuple[WSGIServer, int]:
    """Serve ``registry`` as ``/metrics`` and ``probes`` as ``/healthz`` and ``/readyz`` for the
    component ``name`` on ``addr:port`` (a port in use is a ConfigError); returns (server, bound port)."""
    try:
        server = health.serve(health.routes(make_wsgi_app(registry), probes), host=addr, port=port)
    except OSError as exc:
        raise ConfigError(
            f"{name}: cannot serve /metrics on {addr}:{port}: {exc}; "
            f"pick a free metrics_port (0: any free port) and a local address as metrics_host"
        ) from exc
    return server, server.server_port
