"""Status snapshots, verdicts and /metrics on a real broker (issue 12's acceptance tests).

Components report every second here (``status_interval_s``), so a verdict's window is
``HISTORY`` s: a stalled bolt must show STALL within ``HISTORY + 1`` s plus the time
to publish and read a snapshot. The waits below are bounded far above that and fail with the last
report; nothing asserts how long anything took.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from examples.word_count import build
from reliable_kafka import LocalCluster, Tracking
from reliable_kafka.demo import SENTENCES
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets, lag
from reliable_kafka.ops.metrics import METRICS
from reliable_kafka.ops.reporter import HISTORY
from reliable_kafka.ops.status import build_report, read_snapshots, render
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

INTERVAL_S = 1.0
STALL_BOUND_S = (HISTORY + 1) * INTERVAL_S


def _word_count(bootstrap: str, prefix: str, **options):
    topology = unique_name(prefix)
    sentences, words = f"{topology}-sentences", f"{topology}-words"
    create_topics(bootstrap, {sentences: 2, words: 2, f"{topology}.sentences": 2})
    # created before the workers start: a spout that starts while the acker is still creating them
    # can ask for the outcome topic's offsets before it has a leader (a race outside this test's scope)
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=2))
    counts, components = build(bootstrap, topology=topology, sentences=sentences, words=words, **options)
    for component in components:
        component.status_interval_s = INTERVAL_S
    return topology, sentences, counts, components


def _caught_up(bootstrap: str, group: str, topic: str) -> bool:
    return lag(bootstrap, group, topic) == 0


def _wait(condition, *, timeout: float, what: str, detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f} s: {what}\n{detail()}")
        time.sleep(0.25)


def test_status_agrees_with_the_components_own_stats(kafka_bootstrap):
    topology, sentences, _, components = _word_count(kafka_bootstrap, "st-agree")
    acker, spout, split, count = components
    produce_values(kafka_bootstrap, sentences, [random.Random(1).choice(SENTENCES).encode() for _ in range(1500)])
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", sentences),
            timeout=240,
            what="spout committed to the end of the sentences topic",
        )

        # running: every component reports, and the source partitions match the broker's offsets
        def all_running():
            report = build_report(kafka_bootstrap, topology)
            running = len(report["components"]) == 4 and all(c["state"] == "running" for c in report["components"])
            return report if running else None

        report = _wait(all_running, timeout=60, what="four running components in the status report")
        print(render(report))
        assert {c["name"]: c["kind"] for c in report["components"]} == {
            acker.name: "acker",
            spout.name: "spout",
            split.name: "bolt",
            count.name: "bolt",
        }
        assert all(c["verdict"] != "DOWN" for c in report["components"])
        committed = committed_offsets(kafka_bootstrap, f"{topology}-spout", sentences)
        ends = end_offsets(kafka_bootstrap, sentences)
        rows = {p["partition"]: p for p in report["partitions"]}
        # a partition the sticky partitioner gave no record has no commit: None in the report, -1001
        # (OFFSET_INVALID) from the broker
        assert {p: row["committed"] for p, row in rows.items()} == {
            p: (None if offset < 0 else offset) for p, offset in committed.items()
        }
        assert {p: row["end"] for p, row in rows.items()} == ends
        assert all(row["component"] == spout.name and row["lag"] == 0 for row in rows.values())
        spout_row = next(c for c in report["components"] if c["name"] == spout.name)
        assert spout_row["latency"]["total_count"] <= spout.stats.completed
    # stopped: the last snapshot of each component carries its final counters
    snapshots = read_snapshots(kafka_bootstrap, topology)
    assert {name: s["state"] for name, s in snapshots.items()} == {c.name: "stopped" for c in components}
    spout_counters = snapshots[spout.name]["counters"]
    assert spout_counters["completed"] == spout.stats.completed == 1500
    assert spout_counters["read"] == spout.stats.read
    assert snapshots[spout.name]["latency"]["count"] == spout.tracker.complete_latency.count == 1500
    for bolt in (split, count):
        assert snapshots[bolt.name]["counters"]["acked"] == bolt.stats.acked
        assert snapshots[bolt.name]["counters"]["received"] == bolt.stats.received
        assert snapshots[bolt.name]["latency"]["count"] == bolt.stats.received
    assert snapshots[acker.name]["counters"]["completed"] == acker.stats.completed
    assert snapshots[acker.name]["pending_roots"] == acker.stats.pending == 0
    assert snapshots[split.name]["outputs"] == [f"{topology}-words"]
    report = build_report(kafka_bootstrap, topology)
    # stopped on purpose: STOPPED rows without rates, and a topology that is not DOWN
    assert all(c["verdict"] == "STOPPED" and c["reason"] == "stopped cleanly" for c in report["components"])
    assert all(c["rates"] == {} and c["latency"] is None for c in report["components"])
    assert report["verdict"] == "STOPPED" and all(p["verdict"] != "DOWN" for p in report["partitions"])
    assert report["ackers"]["workers"] == 0 and report["dead_letters"]["records"] == 0


def test_a_stalled_bolt_shows_stall_and_recovers_to_ok(kafka_bootstrap):
    topology, sentences, _, components = _word_count(
        kafka_bootstrap, "st-stall", tracking=Tracking(message_timeout_ms=120_000)
    )
    split = components[2]
    stalled, release = threading.Event(), threading.Event()
    original = split.handler

    def split_that_can_stall(sentence, collector):
        if stalled.is_set():
            release.wait(120)
        original(sentence, collector)

    split.handler = split_that_can_stall

    def verdict_of(name: str):
        report = build_report(kafka_bootstrap, topology)
        return next((c["verdict"] for c in report["components"] if c["name"] == name), None), report

    last = {}

    def split_is(verdict: str):
        found, last["report"] = verdict_of(split.name)
        return found == verdict

    detail = lambda: render(last["report"]) if "report" in last else "no report"  # noqa: E731
    with LocalCluster(*components) as cluster:
        produce_values(kafka_bootstrap, sentences, [b"the cow jumped over the moon"] * 200)
        spout_state = lambda: f"{components[1].stats}; {components[1].tracker.stats}"  # noqa: E731
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", sentences),
            timeout=240,
            what="the first sentences done",
            progress=spout_state,
        )
        _wait(lambda: split_is("OK"), timeout=60, what="split bolt OK before the stall", detail=detail)
        stalled.set()
        produce_values(kafka_bootstrap, sentences, [b"four score and seven years ago"] * 200)
        _wait(
            lambda: split_is("STALL"),
            timeout=max(60.0, 4 * STALL_BOUND_S),
            what=f"split bolt STALL (expected within about {STALL_BOUND_S:.1f} s)",
            detail=detail,
        )
        print(render(last["report"]))
        reason = next(c["reason"] for c in last["report"]["components"] if c["name"] == split.name)
        # the blocked handler call is seen by either STALL rule, whichever a slow report reaches first
        assert "no progress" in reason or "a handler call has been running" in reason, reason
        stalled.clear()
        release.set()
        _wait(lambda: split_is("OK"), timeout=120, what="split bolt back to OK after the stall", detail=detail)
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", sentences),
            timeout=240,
            what="every sentence done after the stall",
            progress=spout_state,
        )


def _scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def _value(samples, name, **labels) -> float:
    matching = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (name, labels, samples.get(name))
    return matching[0]


def test_metrics_over_http_carry_the_documented_names_with_plausible_values(kafka_bootstrap):
    topology, sentences, _, components = _word_count(kafka_bootstrap, "st-metrics")
    acker, spout, split, count = components
    for component in components:
        component.metrics_port = 0  # any free port; the reporter writes the bound one back
    produce_values(kafka_bootstrap, sentences, [random.Random(2).choice(SENTENCES).encode() for _ in range(800)])
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, f"{topology}-spout", sentences),
            timeout=240,
            what="spout committed to the end of the sentences topic",
        )
        assert all(c.metrics_port for c in components)
        on = {"topology": topology}
        spout_metrics = _scrape(spout.metrics_port)
        assert _value(spout_metrics, "rk_trees_total", outcome="completed", **on) == spout.stats.completed == 800
        assert _value(spout_metrics, "rk_complete_latency_seconds_count", **on) == 800
        latency_sum = _value(spout_metrics, "rk_complete_latency_seconds_sum", **on)
        assert 0 < latency_sum / 800 < 120  # seconds: a tree takes more than nothing, less than the timeout
        assert _value(spout_metrics, "rk_complete_latency_seconds_bucket", le="+Inf", **on) == 800
        assert _value(spout_metrics, "rk_pending_trees", **on) == 0
        assert _value(spout_metrics, "rk_records_read_total", **on) == spout.stats.read
        assert _value(spout_metrics, "rk_redeliveries_total", **on) == 0
        lags = [s.value for s in spout_metrics["rk_commit_lag_records"]]
        assert lags and all(lag >= 0 for lag in lags)
        bolt_metrics = _scrape(split.metrics_port)
        assert _value(bolt_metrics, "rk_bolt_tuples_total", result="acked", **on) == split.stats.acked == 800
        assert _value(bolt_metrics, "rk_process_latency_seconds_count", **on) == 800
        assert 0.0 <= _value(bolt_metrics, "rk_capacity_ratio", **on) <= 1.0
        assert _value(bolt_metrics, "rk_tuples_emitted_total", **on) == split.stats.emitted
        acker_metrics = _scrape(acker.metrics_port)
        assert _value(acker_metrics, "rk_acker_pending_roots", **on) == acker.stats.pending
        assert _value(acker_metrics, "rk_acker_table_bytes", **on) > 0
        assert _value(acker_metrics, "rk_acker_outcomes_total", outcome="completed", **on) == acker.stats.completed
        names = set(spout_metrics) | set(bolt_metrics) | set(acker_metrics)
        for name in (
            "rk_oldest_pending_age_seconds",
            "rk_dead_letters_total",
            "rk_quarantined_records_total",
            "rk_consumer_lag_records",
            "rk_component_info",
            "rk_component_start_time_seconds",
        ):
            # a family without samples (no dead letter yet) is not in the scrape's samples
            assert any(n.startswith(name) for n in names) or name == "rk_dead_letters_total", name
        for sample in spout_metrics["rk_trees_total"]:
            assert set(sample.labels) <= {"topology", "component", "outcome"}
    documented = Path(__file__).parents[2].joinpath("docs", "operations.md").read_text()
    assert [name for name in METRICS if name not in documented] == []
