"""Prometheus metrics of one component: Storm UI's numbers under ``rk_`` names (docs/operations.md).

One ``CollectorRegistry`` per component, served by ``prometheus_client``'s own HTTP server. The
collector reads the component at scrape time through its reporter (the same sample a status
snapshot takes), so metrics cost nothing on the hot path. Labels are bounded: ``topology``,
``component`` and, per partition, ``topic`` and ``partition``; never a root id or a record key.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from reliable_kafka.errors import ConfigError

__all__ = ["ComponentCollector", "serve_metrics", "METRICS"]

METRICS = {
    # name: (type, help, extra labels, kinds)
    "rk_component_info": ("gauge", "1 per running component; kind, host and pid as labels", "kind,host,pid", "all"),
    "rk_component_start_time_seconds": ("gauge", "When the component started (Unix time)", "", "all"),
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
    "rk_bolt_tuples_total": ("counter", "Bolt input tuples by result", "result", "bolt"),
    "rk_tuples_emitted_total": ("counter", "Tuples emitted", "", "spout,bolt"),
    "rk_process_latency_seconds": ("histogram", "Bolt handler call per tuple", "", "bolt"),
    "rk_capacity_ratio": ("gauge", "Share of wall time in the handler over the last minute", "", "bolt"),
    "rk_consumer_lag_records": (
        "gauge",
        "Records between the consumer position and the end",
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


class ComponentCollector:
    """A custom collector: builds the metric families from a fresh snapshot at each scrape."""

    def __init__(self, reporter) -> None:
        self.reporter = reporter

    def describe(self):
        return []  # families vary by kind; an empty describe() keeps registration lazy

    def collect(self):
        reporter = self.reporter
        snap = reporter.snapshot(record=False)
        base = {"topology": snap["topology"], "component": snap["component"]}
        names, values = list(base), list(base.values())
        kind = snap["kind"]
        counters = snap["counters"]

        def family(cls, name, help_text, extra=()):
            return cls(name, help_text, labels=[*names, *extra])

        info = family(GaugeMetricFamily, "rk_component_info", METRICS["rk_component_info"][1], ("kind", "host", "pid"))
        info.add_metric([*values, kind, snap["host"], str(snap["pid"])], 1)
        yield info
        started = family(
            GaugeMetricFamily, "rk_component_start_time_seconds", METRICS["rk_component_start_time_seconds"][1]
        )
        started.add_metric(values, snap["started_at"])
        yield started

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
            if p.get("end") is not None and p.get("position") is not None:
                lag_family.add_metric([*values, p["topic"], str(p["partition"])], max(0, p["end"] - p["position"]))
        yield lag_family

        if kind in ("spout", "transactional-spout", "spark-spout"):
            yield from self._spout(snap, family, values, counters)
        elif kind == "bolt":
            yield from self._bolt(snap, family, values, counters)
        elif kind == "acker":
            yield from self._acker(snap, family, values, counters)

    def _spout(self, snap, family, values, counters):
        trees = family(CounterMetricFamily, "rk_trees", METRICS["rk_trees_total"][1], ("outcome",))
        for outcome, key in (
            ("completed", "completed"),
            ("failed", "failed"),
            ("timed_out", "timed_out"),
            ("backstop_expired", "backstop_expired"),
        ):
            trees.add_metric([*values, outcome], counters.get(key, counters.get(f"tracker_{key}", 0)))
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
        for reason, n in sorted(snap.get("dead_letters_by_reason", {}).items()):
            dead.add_metric([*values, reason], n)
        yield dead
        if "read" in counters:
            read = family(CounterMetricFamily, "rk_records_read", METRICS["rk_records_read_total"][1])
            read.add_metric(values, counters["read"])
            yield read
            emitted = family(CounterMetricFamily, "rk_tuples_emitted", METRICS["rk_tuples_emitted_total"][1])
            emitted.add_metric(values, counters.get("emitted", 0))
            yield emitted

    def _bolt(self, snap, family, values, counters):
        tuples = family(CounterMetricFamily, "rk_bolt_tuples", METRICS["rk_bolt_tuples_total"][1], ("result",))
        for result in ("acked", "failed", "untracked", "handler_errors", "quarantined"):
            tuples.add_metric([*values, result], counters.get(result, 0))
        yield tuples
        emitted = family(CounterMetricFamily, "rk_tuples_emitted", METRICS["rk_tuples_emitted_total"][1])
        emitted.add_metric(values, counters.get("emitted", 0))
        yield emitted
        capacity = family(GaugeMetricFamily, "rk_capacity_ratio", METRICS["rk_capacity_ratio"][1])
        capacity.add_metric(values, snap.get("capacity") or 0.0)
        yield capacity
        quarantined = family(
            CounterMetricFamily, "rk_quarantined_records", METRICS["rk_quarantined_records_total"][1], ("kind",)
        )
        quarantined.add_metric([*values, "anchors_header"], counters.get("quarantined", 0))
        yield quarantined

    def _acker(self, snap, family, values, counters):
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


def serve_metrics(reporter, *, port: int, addr: str = "0.0.0.0"):
    """Serve ``/metrics`` for ``reporter``'s component; returns (server, bound port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ComponentCollector(reporter))
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"{reporter.view.name}: cannot serve /metrics on port {port}: {exc}; "
            f"pick a free metrics_port (0: any free port)"
        ) from exc
    return server, server.server_port
