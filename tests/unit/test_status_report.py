"""The status report's pure parts: judging a snapshot, latency over the window, text, CLI names."""

from reliable_kafka.cli import build_parser
from reliable_kafka.core.latency import BOUNDS_S
from reliable_kafka.ops.status import (
    _latency,
    _rates,
    _taken_over_by,
    component_samples,
    judge_snapshot,
    partition_samples,
    render,
)
from reliable_kafka.ops.verdict import Judgement, Verdict


def _snapshot(progress, backlog, *, state="running", t0=1000.0):
    zero = [0] * (len(BOUNDS_S) + 1)
    later = list(zero)
    later[3] = 10  # ten observations in (5 ms, 10 ms]
    history = [
        {
            "t": t0 + i,
            "progress": p,
            "backlog": b,
            "counters": {"received": 10 * i, "acked": 9 * i},
            "partitions": {"in:0": [100 + p, 100 + p + b]},
            "latency_counts": zero if i == 0 else later,
            "latency_sum_s": 0.0,
        }
        for i, (p, b) in enumerate(zip(progress, backlog))
    ]
    return {
        "kind": "bolt",
        "state": state,
        "interval_s": 1.0,
        "published_at": history[-1]["t"],
        "history": history,
        "latency_kind": "process",
        "latency": {"bounds": list(BOUNDS_S), "counts": later, "count": 10, "sum_s": 0.08},
    }


def test_a_snapshot_is_judged_over_its_own_history():
    assert judge_snapshot(_snapshot([1, 1, 1, 1], [2, 2, 2, 2]), now=1004.0).verdict is Verdict.STALL
    assert judge_snapshot(_snapshot([1, 2, 3, 4], [2, 0, 2, 2]), now=1004.0).verdict is Verdict.OK
    assert judge_snapshot(_snapshot([1, 2, 3, 4], [2, 0, 2, 2], state="stopped"), now=1004.0).verdict is Verdict.STOPPED
    assert judge_snapshot(_snapshot([1, 2, 3, 4], [2, 0, 2, 2]), now=2000.0).verdict is Verdict.DOWN


def test_partition_samples_are_the_owners_committed_offsets_and_lag():
    samples = partition_samples(_snapshot([1, 1, 2], [5, 6, 7]), "in", 0)
    assert [(s.progress, s.backlog) for s in samples] == [(101, 5), (101, 6), (102, 7)]
    assert partition_samples(_snapshot([1, 1, 2], [5, 6, 7]), "in", 1) == []


def test_rates_and_latency_come_from_the_window():
    snapshot = _snapshot([1, 2, 3], [0, 0, 0])
    assert _rates(snapshot) == {"received": 10.0, "acked": 9.0}
    latency = _latency(snapshot)
    assert latency["over"] == "window" and latency["count"] == 10
    assert 0.005 <= latency["p50_s"] <= 0.01 and latency["mean_s"] == 0.008


def test_render_names_every_component_and_partition():
    report = {
        "topology": "t",
        "generated_at": 1010.0,
        "verdict": "STALL",
        "components": [
            {
                "name": "bolt-1",
                "kind": "bolt",
                "verdict": "STALL",
                "host": "h",
                "pid": 7,
                "started_at": 1000.0,
                "age_s": 1.0,
                "rates": {"received": 5.0, "acked": 4.0},
                "latency": {"p50_s": 0.002, "p99_s": 0.2},
                "capacity": 0.5,
                "reason": "no progress for 10 s with 3 waiting",
            }
        ],
        "partitions": [
            {
                "topic": "in",
                "partition": 0,
                "verdict": "OK",
                "committed": 5,
                "end": 9,
                "lag": 4,
                "done_above_commit": 2,
                "pending": 3,
                "retrying": 1,
                "oldest_pending": {"topic": "in", "partition": 0, "offset": 5, "age_s": 3.0},
            }
        ],
        "ackers": {"workers": 1, "pending_roots": 3, "table_bytes": 2_000_000},
        "dead_letters": {"topic": "t.dlq", "records": 0},
        "quarantine": {"topic": "t.quarantine", "records": None},
    }
    text = render(report)
    assert "topology t: STALL" in text and "bolt-1" in text and "no progress" in text
    assert "in[0]" in text and "in[0]@5 (3s)" in text and "2.0ms" in text and "200ms" in text
    assert "1 live, 3 pending roots, 2.00 MB" in text


def test_status_and_ui_take_bootstrap_servers_with_bootstrap_as_an_alias():
    parser = build_parser()
    for flag in ("--bootstrap-servers", "--bootstrap"):
        args = parser.parse_args(["status", "--topology", "t", flag, "b:9092", "--json"])
        assert args.bootstrap_servers == "b:9092" and args.json and args.watch is None
    assert parser.parse_args(["status", "--topology", "t", "--bootstrap", "b", "--watch"]).watch == 5.0
    assert parser.parse_args(["ui", "--topology", "t", "--bootstrap", "b", "--port", "0"]).port == 0
    acker = parser.parse_args(["acker", "--topology", "t", "--bootstrap", "b", "--metrics-port", "9100"])
    assert acker.metrics_port == 9100


def test_each_worker_kind_gets_its_view_subclasses_included():
    """``view_of`` dispatches on a worker's ``component`` (it cannot import the workers' classes:
    they import it through lifecycle): every shipped kind, a user's subclass, and nothing else."""
    from reliable_kafka.acker.worker import AckerWorker
    from reliable_kafka.bolt.runner import BasicBolt, Bolt
    from reliable_kafka.ops.snapshot import view_of
    from reliable_kafka.spark.bolt import SparkBolt
    from reliable_kafka.spark.spout import SparkSpout
    from reliable_kafka.spout.spout import Spout
    from reliable_kafka.spout.transactional import TransactionalSpout

    class UsersSpout(Spout):
        pass

    expected = {
        Spout: "spout",
        UsersSpout: "spout",
        TransactionalSpout: "transactional-spout",
        Bolt: "bolt",
        BasicBolt: "bolt",
        AckerWorker: "acker",
        SparkSpout: "spark-spout",
        SparkBolt: "spark-bolt",
    }
    for worker_class, kind in expected.items():
        view = view_of(object.__new__(worker_class))  # no constructor: the kind is the class's
        assert view is not None and view.kind == kind, worker_class
    assert view_of(object()) is None


def test_a_bolt_failing_every_tuple_it_settles_is_a_warning():
    snapshot = _snapshot([1, 2, 3, 4], [0, 0, 0, 0])
    for i, h in enumerate(snapshot["history"]):
        h["counters"] = {"received": 10 * i, "acked": 0, "failed": 10 * i, "handler_errors": 10 * i}
    judgement = judge_snapshot(snapshot, now=1004.0)
    assert judgement.verdict is Verdict.WARN and "failed 30 of 30" in judgement.reason


def test_the_oldest_call_age_is_read_from_the_snapshot_into_the_last_sample():
    snapshot = {**_snapshot([1, 2, 3], [0, 0, 0]), "oldest_call_s": 75.0}
    samples = component_samples(snapshot)
    assert samples[-1].oldest_call_s == 75.0 and samples[0].oldest_call_s is None
    assert judge_snapshot(snapshot, now=1003.0).verdict is Verdict.STALL  # window: 12 intervals of 1 s


def _member(name, partitions, group="t.ackers", kind="acker"):
    return {"kind": kind, "group": group, "partitions": [{"topic": "t.acks", "partition": p} for p in partitions]}


def test_a_silent_member_is_taken_over_only_when_live_members_own_all_its_partitions():
    snapshots = {"a1": _member("a1", [0, 1]), "a2": _member("a2", [0, 1, 2]), "a3": _member("a3", [3])}
    judged = {
        "a1": Judgement(Verdict.DOWN, "silent"),
        "a2": Judgement(Verdict.OK, ""),
        "a3": Judgement(Verdict.DOWN, "silent"),
    }
    assert _taken_over_by("a1", snapshots, judged) == ["a2"]
    assert _taken_over_by("a3", snapshots, judged) == []  # partition 3 has no live owner
    stopped = {**judged, "a2": Judgement(Verdict.STOPPED, "")}
    assert _taken_over_by("a1", snapshots, stopped) == []
    other_group = {**snapshots, "a2": _member("a2", [0, 1, 2], group="other")}
    assert _taken_over_by("a1", other_group, judged) == []


def test_render_shows_one_failed_rate_the_topology_reason_and_the_last_error():
    component = {
        "name": "validate",
        "kind": "bolt",
        "verdict": "WARN",
        "host": "h",
        "pid": 7,
        "started_at": 1000.0,
        "age_s": 1.0,
        "rates": {"received": 9.5, "acked": 0.0, "failed": 9.5, "handler_errors": 9.5},
        "latency": None,
        "capacity": None,
        "lag": 12,
        "oldest_call_s": None,
        "reason": "failed 95 of 95 settled in 10 s (100%)",
        "last_error": {
            "type": "ValueError",
            "message": "bad record",
            "frames": ["app.py:12 in validate: raise ValueError('bad record')"],
            "host": "h",
            "pid": 7,
            "at": 1009.0,
            "where": "in[0]@5",
            "count": 95,
        },
    }
    report = {
        "topology": "t",
        "generated_at": 1010.0,
        "verdict": "WARN",
        "reason": "validate WARN: failed 95 of 95 settled in 10 s (100%)",
        "components": [component],
        "partitions": [],
        "ackers": {"workers": 1, "pending_roots": 0, "table_bytes": 0},
        "dead_letters": {"topic": "t.dlq", "records": 0},
        "quarantine": {"topic": "t.quarantine", "records": 0},
    }
    text = render(report)
    row = next(line for line in text.splitlines() if line.startswith("validate"))
    assert " 9.5 " in row and "19.0" not in row
    assert text.splitlines()[0] == "topology t: WARN (validate WARN: failed 95 of 95 settled in 10 s (100%))"
    assert "ValueError: bad record" in text and "app.py:12 in validate" in text and "in[0]@5" in text
