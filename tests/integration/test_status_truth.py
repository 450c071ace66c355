"""Operator tools that tell the truth, on a real broker: verdicts for a failing bolt, a killed and a
stopped component, true lag of a blocked bolt, counts that partition, the last error, ``status
--forget``, ``failures``.

Components report every second here (``status_interval_s``): the verdict's window is 12 s. Every
wait is bounded far above what it needs and fails with the last report; nothing asserts how long
anything took.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from examples.word_count import build
from reliable_kafka import AckerWorker, Bolt, LocalCluster, Spout, Tracking
from reliable_kafka.cli import main
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import TopologyError
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import lag, true_lag
from reliable_kafka.ops.failures import decode_failure
from reliable_kafka.ops.status import build_report, read_snapshots, render
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

INTERVAL_S = 1.0
FAST_RETRY = Backoff(initial_ms=20, multiplier=2.0, max_ms=200)


def _wait(condition, *, timeout: float, what: str, detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f} s: {what}\n{detail()}")
        time.sleep(0.25)


class Reports:
    """build_report over and over, keeping the last one for failure messages."""

    def __init__(self, bootstrap: str, topology: str) -> None:
        self.bootstrap, self.topology, self.last = bootstrap, topology, None

    def __call__(self, **options) -> dict:
        self.last = build_report(self.bootstrap, self.topology, **options)
        return self.last

    def row(self, name: str, **options) -> dict | None:
        return next((c for c in self(**options)["components"] if c["name"] == name), None)

    def detail(self) -> str:
        return render(self.last) if self.last else "no report yet"


def _pipeline(bootstrap, prefix, handler, *, max_retries: int):
    topology = unique_name(prefix)
    source, middle = f"{topology}-src", f"{topology}-mid"
    create_topics(bootstrap, {source: 1, middle: 1})
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology))
    on = {"topology": topology, "connection": bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=middle,
        tracking=Tracking(backoff=FAST_RETRY, message_timeout_ms=20_000, max_retries=max_retries),
        name="spout",
    )
    bolt = Bolt(**on, source_topics=middle, group_id=f"{topology}-bolt", handler=handler, name="checker")
    components = [AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=20_000)), spout, bolt]
    for component in components:
        component.status_interval_s = INTERVAL_S
    return topology, source, components


def _checks_values(tuple_, collector):
    if tuple_.value.startswith(b"bad"):
        raise ValueError(f"bad value {tuple_.value.decode()}")
    collector.ack(tuple_)


class Feeder:
    """Writes a few records every 0.2 s until stopped: the window always has records to settle."""

    def __init__(self, bootstrap: str, topic: str, value: bytes) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(bootstrap, topic, value), daemon=True)

    def _run(self, bootstrap, topic, value):
        while not self.stop.wait(0.2):
            produce_values(bootstrap, topic, [value] * 5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def test_a_bolt_failing_every_record_makes_the_topology_warn_with_its_last_error(kafka_bootstrap, capsys):
    topology, source, components = _pipeline(kafka_bootstrap, "truth-fail", _checks_values, max_retries=1)
    acker, spout, bolt = components
    reports = Reports(kafka_bootstrap, topology)
    with LocalCluster(*components) as cluster, Feeder(kafka_bootstrap, source, b"bad"):

        def warned():
            report = reports()
            rows = {c["name"]: c for c in report["components"]}
            return report if report["verdict"] == "WARN" and rows.get("checker", {}).get("verdict") == "WARN" else None

        report = _wait(warned, timeout=120, what="the failing bolt and the topology WARN", detail=reports.detail)
        cluster.check()
    rows = {c["name"]: c for c in report["components"]}
    checker = rows["checker"]
    assert "failed" in checker["reason"] and "(100%)" in checker["reason"], checker["reason"]
    assert "checker WARN" in report["reason"]
    error = checker["last_error"]
    assert error["type"] == "ValueError" and error["message"].startswith("bad value bad")
    assert error["pid"] == os.getpid() and error["host"] and error["count"] >= 1
    assert any("in _checks_values" in frame for frame in error["frames"]), error["frames"]
    # FAIL/S is the failed tuples' rate alone, not failed plus handler errors
    assert checker["rates"]["failed"] > 0
    text = render(report)
    row = next(line for line in text.splitlines() if line.startswith("checker"))
    assert f" {checker['rates']['failed']:.1f} " in row, row
    assert "last error of checker" in text and "ValueError: bad value bad" in text
    # the failure records say the same: host, pid and the stack's innermost frames
    failures = [decode_failure(m.value()) for m in read_topic(kafka_bootstrap, TopologyTopics(topology).failures)]
    assert failures and all(f.pid == os.getpid() and f.host for f in failures)
    assert all(any("in _checks_values" in frame for frame in f.frames or []) for f in failures)


def test_each_input_tuple_lands_in_exactly_one_result(kafka_bootstrap):
    topology, source, components = _pipeline(kafka_bootstrap, "truth-count", _checks_values, max_retries=2)
    bolt = components[2]
    values = [b"bad" if i % 4 == 0 else b"ok" for i in range(200)]
    produce_values(kafka_bootstrap, source, values)
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, f"{topology}-spout", source) == 0,
            timeout=180,
            what="every record completed or dead-lettered",
            progress=lambda: str(components[1].stats),
        )
    counters = read_snapshots(kafka_bootstrap, topology)["checker"]["counters"]
    results = counters["acked"] + counters["failed"] + counters["quarantined"]
    assert results == counters["received"] == bolt.stats.received, counters
    # every bad record was tried three times (max_retries=2), each try one failed tuple, one handler error
    assert counters["failed"] == counters["handler_errors"] == 3 * values.count(b"bad"), counters


def _word_count(bootstrap, prefix, **options):
    topology = unique_name(prefix)
    sentences, words = f"{topology}-sentences", f"{topology}-words"
    create_topics(bootstrap, {sentences: 2, words: 2, f"{topology}.sentences": 2})
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=2))
    counts, components = build(bootstrap, topology=topology, sentences=sentences, words=words, **options)
    for component in components:
        component.status_interval_s = INTERVAL_S
    return topology, sentences, components


def test_a_blocked_bolt_shows_its_true_lag_the_same_as_the_lag_command(kafka_bootstrap, capsys):
    topology, sentences, components = _word_count(
        kafka_bootstrap, "truth-lag", tracking=Tracking(message_timeout_ms=120_000)
    )
    split = components[2]
    blocked, release = threading.Event(), threading.Event()
    original = split.handler

    def split_that_blocks(sentence, collector):
        if blocked.is_set():
            release.wait(120)
        original(sentence, collector)

    split.handler = split_that_blocks
    reports = Reports(kafka_bootstrap, topology)
    group, topic = f"{topology}-split", f"{topology}.sentences"

    def lag_command() -> int:
        return sum(row.lag for row in true_lag(kafka_bootstrap, group, topic))

    try:
        with LocalCluster(*components) as cluster:
            produce_values(kafka_bootstrap, sentences, [b"the cow jumped over the moon"] * 50)
            cluster.wait_until(
                lambda: lag(kafka_bootstrap, f"{topology}-spout", sentences) == 0,
                timeout=180,
                what="the first sentences done",
            )
            blocked.set()
            produce_values(kafka_bootstrap, sentences, [b"four score and seven years ago"] * 200)

            def lag_shown():
                row = reports.row(split.name)
                return row if row and row["lag"] is not None and row["lag"] >= 100 else None

            _wait(lag_shown, timeout=120, what="the blocked bolt's lag in status", detail=reports.detail)

            def agrees():
                row, tool = reports.row(split.name), lag_command()
                return (row, tool) if row and row["lag"] == tool else None

            row, tool = _wait(
                agrees, timeout=60, what="status and `reliable-kafka lag` agree", detail=lambda: f"{reports.detail()}"
            )
            assert tool >= 100

            # the snapshot says the same (its figures go to /metrics): read by the reporter thread
            # from the broker while the bolt's own loop is blocked
            def snapshot_lag() -> int | None:  # None while a partition's lag is not read yet
                lags = [p["lag"] for p in read_snapshots(kafka_bootstrap, topology)[split.name]["partitions"]]
                return None if None in lags else sum(lags)

            _wait(
                lambda: snapshot_lag() == lag_command(),
                timeout=60,
                what="the blocked bolt's snapshot shows the lag the broker gives",
                detail=lambda: str(read_snapshots(kafka_bootstrap, topology)[split.name]["partitions"]),
            )
            assert main(["lag", "--group", group, "--topic", topic, "--bootstrap-servers", kafka_bootstrap]) == 0
            assert f"{tool:>10}" in capsys.readouterr().out.splitlines()[-1]
            print(render(reports.last))
            release.set()
    finally:
        release.set()


def _acker_process(bootstrap: str, topology: str, log_path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "reliable_kafka",
        "acker",
        "--topology",
        topology,
        "--bootstrap-servers",
        bootstrap,
        "--ackers",
        "2",
        "--status-interval",
        str(INTERVAL_S),
        # a killed member's partitions move after the session timeout: short here
        "--kafka-config",
        "session.timeout.ms=6000",
        "--kafka-config",
        "heartbeat.interval.ms=1000",
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))


def test_a_killed_acker_replaced_by_another_leaves_the_topology_ok(kafka_bootstrap, tmp_path):
    topology = unique_name("truth-kill")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=2))
    first = _acker_process(kafka_bootstrap, topology, tmp_path / "first.log")
    second = None
    reports = Reports(kafka_bootstrap, topology)
    logs = lambda: "".join(p.read_text()[-2000:] for p in tmp_path.glob("*.log"))  # noqa: E731
    try:

        def by_pid():
            try:
                snapshots = read_snapshots(kafka_bootstrap, topology)
            except TopologyError:  # the first acker has not made the status topic yet
                return {}
            return {s["pid"]: (name, s) for name, s in snapshots.items()}

        _wait(lambda: first.pid in by_pid(), timeout=120, what="the first acker reports", detail=logs)
        second = _acker_process(kafka_bootstrap, topology, tmp_path / "second.log")

        def split():
            found = by_pid()
            if first.pid not in found or second.pid not in found:
                return None
            mine, theirs = ({p["partition"] for p in found[pid][1]["partitions"]} for pid in (first.pid, second.pid))
            return found if mine and theirs and mine | theirs == {0, 1} and not mine & theirs else None

        found = _wait(split, timeout=120, what="two ackers sharing the two ack partitions", detail=logs)
        killed, survivor = found[first.pid][0], found[second.pid][0]
        first.send_signal(signal.SIGKILL)
        first.wait(30)

        def replaced():
            row = reports.row(killed, include_all=True)
            return row if row and row["verdict"] == "WARN" and survivor in row["reason"] else None

        row = _wait(replaced, timeout=180, what=f"{killed} WARN, its partitions moved", detail=reports.detail)
        assert row["rates"] == {} and row["latency"] is None and row["lag"] is None, row

        def ok_without_it():
            report = reports()
            names = {c["name"] for c in report["components"]}
            return report if report["verdict"] == "OK" and killed not in names and survivor in names else None

        report = _wait(
            ok_without_it, timeout=120, what="topology OK once the killed acker aged out", detail=reports.detail
        )
        print(render(report))
        assert reports.row(killed, include_all=True)["verdict"] == "WARN"  # still there for who asks
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(60)


def test_a_stopped_acker_is_stopped_the_topology_ok_and_forget_removes_it(kafka_bootstrap, capsys):
    topology = unique_name("truth-stop")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=2))
    on = {"topology": topology, "connection": kafka_bootstrap, "tracking": Tracking(ackers=2)}
    staying, leaving = AckerWorker(**on), AckerWorker(**on)
    for worker in (staying, leaving):
        worker.status_interval_s = INTERVAL_S
    reports = Reports(kafka_bootstrap, topology)
    cli = ["--topology", topology, "--bootstrap-servers", kafka_bootstrap]
    with LocalCluster(staying):
        with LocalCluster(leaving):
            _wait(
                lambda: reports.row(leaving.name) and reports.row(staying.name),
                timeout=120,
                what="both ackers report",
                detail=reports.detail,
            )

        def stopped():
            report = reports()
            row = next((c for c in report["components"] if c["name"] == leaving.name), None)
            return report if row and row["verdict"] == "STOPPED" and report["verdict"] == "OK" else None

        report = _wait(stopped, timeout=120, what="the stopped acker STOPPED, the topology OK", detail=reports.detail)
        row = next(c for c in report["components"] if c["name"] == leaving.name)
        assert row["rates"] == {} and row["latency"] is None and row["reason"] == "stopped cleanly"
        text = render(report)
        assert f"topology {topology}: OK" in text and "STOPPED" in text

        assert main(["status", *cli, "--forget", staying.name]) == 1  # running: it would publish again
        assert "is running" in capsys.readouterr().err
        assert main(["status", *cli, "--forget", leaving.name]) == 0
        assert f"forgot {leaving.name}" in capsys.readouterr().out
        names = {c["name"] for c in reports(include_all=True)["components"]}
        assert leaving.name not in names and staying.name in names
        assert main(["status", *cli, "--forget", "nobody"]) == 1
        assert "no component 'nobody'" in capsys.readouterr().err


def test_failures_lists_records_that_failed_and_then_completed(kafka_bootstrap, capsys):
    seen: set[bytes] = set()

    def fails_once(tuple_, collector):
        if tuple_.value.startswith(b"bad") or tuple_.value not in seen:
            seen.add(tuple_.value)
            raise ValueError(f"not yet: {tuple_.value.decode()}")
        collector.ack(tuple_)

    topology, source, components = _pipeline(kafka_bootstrap, "truth-retry", fails_once, max_retries=2)
    placed = produce_values(kafka_bootstrap, source, [b"a", b"b", b"bad", b"c"])
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, f"{topology}-spout", source) == 0,
            timeout=180,
            what="every record completed or dead-lettered",
            progress=lambda: str(components[1].stats),
        )
    cli = ["--topology", topology, "--bootstrap-servers", kafka_bootstrap, "--since", "10m"]
    assert main(["failures", *cli, "--json"]) == 0
    import json

    document = json.loads(capsys.readouterr().out)
    results = {(r["source"]["partition"], r["source"]["offset"]): r for r in document["records"]}
    for index in (0, 1, 3):
        record = results[placed[index]]
        assert record["result"] == "completed after retry", record
        assert [a["outcome"]["kind"] for a in record["attempts"]] == ["FAILED", "COMPLETED"]
        assert record["attempts"][0]["failures"][0]["error_type"] == "ValueError"
    bad = results[placed[2]]
    assert bad["result"] == "dead-lettered" and len(bad["attempts"]) == 3 and bad["dead_letter"]
    assert document["unplaced"] == []
    assert main(["failures", *cli]) == 0
    text = capsys.readouterr().out
    assert "completed after retry" in text and "3 completed after retry, 1 dead-lettered" in text


FROZEN_BOLT = """
import sys
from reliable_kafka import Bolt

bootstrap, topology, source = sys.argv[1:4]
bolt = Bolt(
    topology=topology,
    connection=bootstrap,
    source_topics=source,
    group_id=f"{topology}-frozen",
    handler=lambda tuple_, collector: collector.ack(tuple_),
    name="frozen",
)
bolt.status_interval_s = 1.0
bolt.run(handle_signals=True)
"""


def test_a_sigstopped_bolt_is_down_with_its_lag_growing_as_the_lag_command_says(kafka_bootstrap, tmp_path):
    topology = unique_name("truth-frozen")
    source = f"{topology}-in"
    create_topics(kafka_bootstrap, {source: 2})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology))
    produce_values(kafka_bootstrap, source, [b"x"] * 50)
    log = open(tmp_path / "frozen.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-c", FROZEN_BOLT, kafka_bootstrap, topology, source], stdout=log, stderr=log
    )
    reports = Reports(kafka_bootstrap, topology)
    detail = lambda: f"{reports.detail()}\n{(tmp_path / 'frozen.log').read_text()[-2000:]}"  # noqa: E731

    def lag_command() -> int:
        return sum(row.lag for row in true_lag(kafka_bootstrap, f"{topology}-frozen", source))

    def row_is(verdict, lag_at_least=0):
        def check():
            try:
                row = reports.row("frozen")
            except TopologyError:  # no status topic yet
                return None
            if row and row["verdict"] == verdict and row["lag"] is not None and row["lag"] >= lag_at_least:
                return row
            return None

        return check

    try:
        _wait(row_is("OK"), timeout=120, what="the bolt running", detail=detail)
        _wait(lambda: lag_command() == 0, timeout=120, what="the first records committed", detail=detail)
        process.send_signal(signal.SIGSTOP)
        produce_values(kafka_bootstrap, source, [b"y"] * 200)
        row = _wait(row_is("DOWN", 200), timeout=120, what="the frozen bolt DOWN with 200 waiting", detail=detail)
        assert row["lag"] == lag_command() == 200 and row["rates"] == {}
        process.send_signal(signal.SIGCONT)
        _wait(
            lambda: (r := row_is("OK")()) and r["lag"] == 0, timeout=120, what="the bolt back, caught up", detail=detail
        )
    finally:
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        log.close()
