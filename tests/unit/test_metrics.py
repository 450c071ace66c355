"""The Prometheus collectors on the in-memory Kafka: counts that partition, one vocabulary, the
verdict as a state set judged by `status`'s own function, no pid label, process metrics."""

from __future__ import annotations

import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reliable_kafka import Connection, Loop, Tracking
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.ops.metrics import (
    BOLT_RESULTS,
    METRICS,
    ComponentCollector,
    TopologyCollector,
    component_registry,
)
from reliable_kafka.ops.reasons import DEAD_LETTER_REASONS, OUTCOMES, reason_word
from reliable_kafka.ops.reporter import ComponentReporter
from reliable_kafka.ops.snapshot import view_of
from reliable_kafka.ops.status import judge_snapshot
from reliable_kafka.ops.verdict import Verdict
from reliable_kafka.spout.spout import Spout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, step_until

NAME = "mx"


def _scrape(*collectors) -> dict[str, list]:
    """name -> samples, through the exposition format a Prometheus server reads."""
    text = generate_latest(component_registry(*collectors)).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _samples(scraped: dict[str, list], sample_name: str, **labels) -> list:
    family = sample_name.removesuffix("_total").removesuffix("_bucket")
    return [
        s
        for s in scraped.get(family, [])
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def _value(scraped, sample_name: str, **labels) -> float:
    [sample] = _samples(scraped, sample_name, **labels)
    return sample.value


def _run(lines: list[bytes], handler, *, max_retries: int = 1):
    kafka = MemoryKafka(clock=ManualClock())
    kafka.create_topic("sentences", 1)
    ListSource(kafka, "lines", lines)
    on = {"topology": NAME, "connection": Connection("memory", clients=kafka), "loop": Loop(commit_interval_ms=0)}
    acker = AckerWorker(**on)
    spout = Spout(
        **on,
        source_topics="lines",
        group_id=f"{NAME}.spout",
        emit_to="sentences",
        tracking=Tracking(max_retries=max_retries, backoff=Backoff(initial_ms=0), root_index=False),
    )
    bolt = BasicBolt(**on, source_topics="sentences", group_id=f"{NAME}.bolt", handler=handler)
    for component in (acker, spout, bolt):
        component.start()
    settled = len(lines)
    step_until(lambda: spout.stats.completed + spout.stats.dead_lettered == settled, spout, bolt, acker)
    return spout, bolt, acker


def _collector(worker) -> ComponentCollector:
    return ComponentCollector(ComponentReporter(view_of(worker), publish=False))


def _fail_odd(tuple_, collector) -> None:
    if int(tuple_.value) % 2:
        raise ValueError(f"odd: {tuple_.value!r}")


def test_bolt_results_partition_the_tuples_received_and_handler_errors_are_counted_apart():
    spout, bolt, _ = _run([str(i).encode() for i in range(10)], _fail_odd, max_retries=1)
    scraped = _scrape(_collector(bolt))
    on = {"topology": NAME, "component": bolt.name}
    received = _value(scraped, "rk_bolt_tuples_received_total", **on)
    results = {r: _value(scraped, "rk_bolt_tuples_total", result=r, **on) for r in BOLT_RESULTS}
    # 5 even records acked once; 5 odd ones failed twice (one retry) before the dead-letter topic
    assert received == bolt.stats.received == 15
    assert results == {"acked": 5, "failed": 10, "quarantined": 0}
    assert sum(results.values()) == received, f"results overlap or miss tuples: {results} vs {received}"
    assert {s.labels["result"] for s in _samples(scraped, "rk_bolt_tuples_total", **on)} == set(BOLT_RESULTS)
    assert _value(scraped, "rk_bolt_handler_errors_total", **on) == 10
    assert _value(scraped, "rk_bolt_untracked_tuples_total", **on) == 0


def test_spout_outcomes_and_dead_letter_reasons_use_the_one_vocabulary():
    spout, _, _ = _run([b"1", b"2", b"3"], _fail_odd, max_retries=0)
    scraped = _scrape(_collector(spout))
    on = {"topology": NAME, "component": spout.name}
    outcomes = {s.labels["outcome"] for s in _samples(scraped, "rk_trees_total", **on)}
    assert outcomes == set(OUTCOMES)
    assert _value(scraped, "rk_trees_total", outcome="failed", **on) == 2
    assert _value(scraped, "rk_trees_total", outcome="completed", **on) == 1
    reasons = {s.labels["reason"]: s.value for s in _samples(scraped, "rk_dead_letters_total", **on)}
    assert reasons == {"failed": 2.0}  # the tracker says FAILED: the label says the vocabulary's word
    assert set(reasons) <= set(DEAD_LETTER_REASONS)


@pytest.mark.parametrize(
    ("spelling", "word"),
    [
        ("FAILED", "failed"),
        ("TIMED_OUT", "timed_out"),
        ("backstop timeout", "backstop_expired"),  # dead letters parked by earlier versions
        ("backstop_expired", "backstop_expired"),
        ("POISON_PILL", "poison_pill"),
        ("deleted from Kafka (retention) while in flight", "deleted"),
        ("ValueError: something a user wrote", "other"),
        (None, "other"),
    ],
)
def test_reason_word_reads_old_and_new_spellings(spelling, word):
    assert reason_word(spelling) == word


def test_the_spout_backstop_writes_the_vocabulary_word():
    from reliable_kafka.core.tracker import BACKSTOP_REASON

    assert BACKSTOP_REASON == "backstop_expired" == reason_word(BACKSTOP_REASON)


def test_component_info_has_no_pid_label_and_process_metrics_are_served():
    spout, bolt, acker = _run([b"2"], _fail_odd)
    for worker in (spout, bolt, acker):
        scraped = _scrape(_collector(worker))
        [info] = scraped["rk_component_info"]
        assert set(info.labels) == {"topology", "component", "kind", "host"}
        for name in ("process_cpu_seconds", "process_resident_memory_bytes", "python_info"):
            assert name in scraped, f"{name} missing from {worker.name}'s /metrics"


def _history(progress: list[int], backlog: list[int | None], *, now: float) -> list[dict]:
    return [
        {"t": now - (len(progress) - i), "progress": p, "backlog": b, "counters": {}, "partitions": {}}
        for i, (p, b) in enumerate(zip(progress, backlog))
    ]


@pytest.mark.parametrize(
    ("progress", "backlog"),
    [
        ([5, 5, 5, 5], [3, 3, 3, 3]),  # no progress with work waiting: STALL
        ([1, 2, 3, 4], [2, 3, 4, 5]),  # backlog grew at every step: WARN
        ([1, 2, 3, 4], [2, 0, 4, 5]),  # caught up once: OK
    ],
)
def test_the_verdict_is_a_state_set_judged_as_status_judges_the_component(progress, backlog):
    spout, _, _ = _run([b"2"], _fail_odd)
    reporter = ComponentReporter(view_of(spout), publish=False, interval_s=1.0)
    published = reporter.snapshot()
    published["history"] = _history(progress, backlog, now=time.time())
    reporter.last = published  # what the reporter thread last published
    expected = judge_snapshot(published, time.time()).verdict.value
    scraped = _scrape(ComponentCollector(reporter))
    states = {s.labels["verdict"]: s.value for s in scraped["rk_component_verdict"]}
    assert states == {v.value: float(v.value == expected) for v in Verdict}
    assert expected != "OK" or backlog[1] == 0


def _report(verdict: str, components: list[tuple[str, str, str]]) -> dict:
    return {
        "topology": NAME,
        "verdict": verdict,
        "components": [{"name": n, "kind": k, "verdict": v} for n, k, v in components],
        "dead_letters": {"topic": f"{NAME}.dlq", "records": 7},
        "quarantine": {"topic": f"{NAME}.quarantine", "records": None},
    }


def test_the_topology_collector_serves_status_verdicts_including_down_components():
    report = _report("DOWN", [("acker-1", "acker", "DOWN"), ("spout-1", "spout", "OK")])
    scraped = _scrape(TopologyCollector(lambda: report))
    overall = {s.labels["verdict"]: s.value for s in scraped["rk_topology_verdict"]}
    assert overall == {v.value: float(v.value == "DOWN") for v in Verdict}
    down = [s.labels["component"] for s in scraped["rk_topology_component_verdict"] if s.labels["verdict"] == "DOWN"]
    assert [s for s in scraped["rk_topology_component_verdict"] if s.value == 1 and s.labels["verdict"] == "DOWN"]
    assert sorted(down) == ["acker-1", "spout-1"]  # one series per verdict per component
    assert _value(scraped, "rk_topology_dead_letter_records", topology=NAME) == 7
    assert scraped["rk_topology_quarantined_records"] == []  # unknown: no sample, not a zero


def test_every_documented_metric_is_registered_under_its_type():
    spout, bolt, acker = _run([b"2"], _fail_odd)
    served: dict[str, str] = {}
    for worker in (spout, bolt, acker):
        text = generate_latest(component_registry(_collector(worker))).decode()
        served.update({f.name: f.type for f in text_string_to_metric_families(text)})
    for name, (kind, *_rest) in METRICS.items():
        family = name.removesuffix("_total")
        assert served.get(family) == kind, f"{name}: served as {served.get(family)}, documented as {kind}"


@pytest.mark.parametrize(
    ("attribute", "environment", "bound"),
    [
        (None, None, "127.0.0.1"),  # the library's default: loopback only
        (None, "127.0.0.2", "127.0.0.2"),  # RK_METRICS_HOST, as the container image sets it
        ("127.0.0.3", "127.0.0.2", "127.0.0.3"),  # the worker's own metrics_host wins
    ],
)
def test_metrics_listen_on_loopback_unless_told_otherwise(monkeypatch, attribute, environment, bound):
    from reliable_kafka.ops.reporter import METRICS_HOST_ENV, attach

    if environment is None:
        monkeypatch.delenv(METRICS_HOST_ENV, raising=False)
    else:
        monkeypatch.setenv(METRICS_HOST_ENV, environment)
    spout, _, _ = _run([b"2"], _fail_odd)
    spout.metrics_port = 0
    if attribute is not None:
        spout.metrics_host = attribute
    monkeypatch.setattr(ComponentReporter, "_publish", lambda self, snapshot: None)  # no broker here
    reporter = attach(spout)
    assert reporter is not None
    try:
        assert reporter._metrics_server is not None
        assert reporter._metrics_server.server_address[0] == bound
        assert spout.metrics_port and spout.metrics_port == reporter._metrics_server.server_port
    finally:
        reporter.close()


def test_the_acker_command_takes_metrics_host():
    from reliable_kafka.cli import build_parser

    command = ["acker", "--topology", "t", "--bootstrap-servers", "b:9092"]
    args = build_parser().parse_args([*command, "--metrics-port", "0", "--metrics-host", "0.0.0.0"])
    assert (args.metrics_port, args.metrics_host) == (0, "0.0.0.0")
