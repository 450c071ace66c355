"""``reliable-kafka status``: the status topic, the source offsets and the verdicts in one report.

:func:`read_snapshots` reads ``<topology>.status`` to its end and keeps the latest snapshot per
component; :func:`build_report` adds what only the broker knows (committed offsets and their
metadata, end offsets, dead-letter and quarantine counts) and judges each component and source
partition (:mod:`.verdict`); :func:`render` prints it. The report is the ``--json`` document, whose
fields are stable and listed in docs/operations.md (``schema`` changes when one changes meaning).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from reliable_kafka.core.commit_metadata import decode_done_ranges
from reliable_kafka.core.latency import quantile
from reliable_kafka.errors import DecodeError, TopologyError
from reliable_kafka.ops.verdict import (
    Judgement,
    Sample,
    Verdict,
    judge_component,
    judge_replaced,
    judge_window,
    roll_up,
)
from reliable_kafka.topology import TopologyTopics

__all__ = [
    "REPORT_SCHEMA",
    "read_snapshots",
    "build_report",
    "forget",
    "render",
    "RATE_COUNTERS",
    "FORGET_AFTER_S",
    "WINDOW_SAMPLES",
]

log = logging.getLogger(__name__)

REPORT_SCHEMA = 2  # 2: STOPPED, the topology's reason, lag and last errors per component, no rates when down
FORGET_AFTER_S = 3600.0  # stopped or silent components older than this are left out (``--all`` keeps them)
Snapshot = dict[str, Any]
"""A component's status snapshot as published (JSON; docs/operations.md lists its fields)."""

WINDOW_SAMPLES = 12  # the reporters keep this many samples (reporter.HISTORY): the verdict's window
SPOUT_KINDS = ("spout", "transactional-spout", "spark-spout")
RATE_COUNTERS = {
    "spout": ("read", "emitted", "completed", "failed", "timed_out", "replayed", "dead_lettered"),
    "transactional-spout": ("read", "emitted", "completed", "failed", "timed_out", "replayed", "dead_lettered"),
    "spark-spout": ("inputs", "outputs", "completed", "tracker_failed", "tracker_timed_out", "dead_lettered"),
    "bolt": ("received", "emitted", "acked", "failed", "quarantined", "handler_errors"),
    "spark-bolt": ("inputs", "outputs", "acked", "failed"),
    "acker": ("records", "entries_folded", "completed", "failed", "timed_out"),
}


def _consumer(bootstrap_servers: str, kafka_config: dict[str, Any] | None, group_id: str | None = None) -> Consumer:
    config = dict(kafka_config or {})
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.auto.commit": False,
            "group.id": group_id or f"reliable-kafka-status-{uuid.uuid4().hex[:8]}",
            "enable.partition.eof": False,
        }
    )
    return Consumer(config)


def read_snapshots(
    bootstrap_servers: str, topology: str, *, kafka_config: dict[str, Any] | None = None, timeout: float = 15.0
) -> dict[str, Snapshot]:
    """component name -> its latest snapshot, read from ``<topology>.status`` up to its end."""
    topic = TopologyTopics(topology).status
    consumer = _consumer(bootstrap_servers, kafka_config)
    try:
        try:
            described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise TopologyError(
                f"status: no answer from Kafka at {bootstrap_servers} within {timeout:.0f} s "
                f"({exc.args[0]}); check --bootstrap-servers and the security settings"
            ) from exc
        if described is None or described.error is not None or not described.partitions:
            raise TopologyError(
                f"status: topic {topic} does not exist; is topology {topology!r} running "
                f"(its components create it when they start), and is the name right?"
            )
        snapshots: dict[str, Snapshot] = {}
        partitions = sorted(described.partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in partitions}
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                partition, offset, value = message.partition(), message.offset(), message.value()
                if message.error() is not None or partition is None or offset is None:
                    continue
                key = (message.key() or b"").decode(errors="replace")
                if value is None:
                    snapshots.pop(key, None)
                else:
                    try:
                        snapshots[key] = json.loads(value)
                    except ValueError:
                        log.warning("status: %s[%d]@%d is not a snapshot; skipped", topic, partition, offset)
                if offset + 1 >= ends[partition]:
                    todo.discard(partition)
        return snapshots
    finally:
        consumer.close()


# --- judging --------------------------------------------------------------------------------------


# kind -> (counters whose sum is the records settled, the counter of those given up on, its words)
SETTLED = {
    "spout": (("completed", "dead_lettered"), "dead_lettered", "dead-lettered"),
    "transactional-spout": (("completed", "dead_lettered"), "dead_lettered", "dead-lettered"),
    "spark-spout": (("completed", "dead_lettered"), "dead_lettered", "dead-lettered"),
    "bolt": (("acked", "failed", "quarantined"), "failed", "failed"),
    "spark-bolt": (("acked", "failed"), "failed", "failed"),
}


def component_samples(snapshot: Snapshot) -> list[Sample]:
    """The verdict's samples; the last carries the age of the oldest call in flight (if told)."""
    settled_by, given_up_by, _ = SETTLED.get(snapshot.get("kind", ""), ((), "", ""))
    history = snapshot.get("history", [])
    samples = []
    for i, h in enumerate(history):
        counters = h.get("counters", {})
        samples.append(
            Sample(
                h["t"],
                h["progress"],
                h["backlog"],
                settled=sum(counters.get(k, 0) for k in settled_by),
                given_up=counters.get(given_up_by, 0) if given_up_by else 0,
                oldest_call_s=snapshot.get("oldest_call_s") if i == len(history) - 1 else None,
            )
        )
    return samples


def judge_snapshot(snapshot: Snapshot, now: float) -> Judgement:
    interval = snapshot.get("interval_s", 5.0)
    judgement = judge_component(
        component_samples(snapshot),
        now=now,
        interval_s=interval,
        stopped=snapshot.get("state") == "stopped",
        window_s=WINDOW_SAMPLES * interval,
        gave_up=SETTLED.get(snapshot.get("kind", ""), ((), "", "gave up on"))[2],
    )
    if snapshot.get("stopped_by") and judgement.verdict is Verdict.STOPPED:  # it stopped itself: say why
        return Judgement(judgement.verdict, f"stopped: {snapshot['stopped_by']}")
    return judgement


def _owned(snapshot: Snapshot) -> set[tuple[str, int]]:
    return {(p["topic"], p["partition"]) for p in snapshot.get("partitions", [])}


def _taken_over_by(name: str, snapshots: dict[str, Snapshot], judged: dict[str, Judgement]) -> list[str]:
    """The live members of ``name``'s group that own every partition it last reported (none: its
    work was not taken over, or it had no group)."""
    snap = snapshots[name]
    group = snap.get("group")
    if not group:
        return []
    members = [
        other
        for other, s in snapshots.items()
        if other != name
        and s.get("group") == group
        and s.get("kind") == snap.get("kind")
        and judged[other].verdict not in (Verdict.DOWN, Verdict.STOPPED)
    ]
    mine = _owned(snap)
    owned = set().union(*(_owned(snapshots[m]) for m in members)) if members else set()
    if not members or not mine <= owned:
        return []
    return sorted(m for m in members if _owned(snapshots[m]) & mine) or sorted(members)


def partition_samples(snapshot: Snapshot, topic: str, partition: int) -> list[Sample]:
    """The owner's own record of a partition's (committed, end): progress = committed, backlog = lag."""
    key, samples = f"{topic}:{partition}", []
    for h in snapshot.get("history", []):
        committed, end = (h.get("partitions") or {}).get(key, (None, None))
        if committed is not None and end is not None:
            samples.append(Sample(h["t"], committed, max(0, end - committed)))
    return samples


def _rates(snapshot: Snapshot) -> dict[str, float]:
    history = snapshot.get("history", [])
    if len(history) < 2:
        return {}
    first, last = history[0], history[-1]
    elapsed = last["t"] - first["t"]
    if elapsed <= 0:
        return {}
    return {
        key: round((last["counters"].get(key, 0) - first["counters"].get(key, 0)) / elapsed, 2)
        for key in RATE_COUNTERS.get(snapshot.get("kind", ""), ())
        if key in last["counters"]
    }


def _latency(snapshot: Snapshot) -> dict[str, Any] | None:
    """p50/p99 over the window (the history's first to last sample), else since the start."""
    latency = snapshot.get("latency")
    if latency is None:
        return None
    history = [h for h in snapshot.get("history", []) if "latency_counts" in h]
    bounds, counts = latency["bounds"], latency["counts"]
    over = "start"
    if len(history) >= 2:
        window = [b - a for a, b in zip(history[0]["latency_counts"], history[-1]["latency_counts"])]
        if sum(window) > 0:
            counts, over = window, "window"
    return {
        "kind": snapshot.get("latency_kind"),
        "over": over,
        "count": sum(counts),
        "p50_s": _round(quantile(bounds, counts, 0.5)),
        "p99_s": _round(quantile(bounds, counts, 0.99)),
        "total_count": latency["count"],
        "mean_s": _round(latency["sum_s"] / latency["count"]) if latency["count"] else None,
    }


def _broker_lags(
    bootstrap: str, kafka_config: dict[str, Any] | None, snapshots: dict[str, Snapshot], timeout: float
) -> dict[tuple[str, str, int], int]:
    """(group, topic, partition) -> records not yet done, as ``reliable-kafka lag`` computes them
    (the broker's end offset minus the group's commit, minus what a spout's commit metadata
    records as done above it), for every group and input topic the snapshots name."""
    from reliable_kafka.offsets import true_lag

    wanted = {
        (snap["group"], topic)
        for snap in snapshots.values()
        if snap.get("group") and snap.get("kind") in (*SPOUT_KINDS, "bolt", "acker")
        for topic in snap.get("inputs", [])
    }
    lags: dict[tuple[str, str, int], int] = {}
    for group, topic in sorted(wanted):
        try:
            rows = true_lag(bootstrap, group, topic, kafka_config=kafka_config, timeout=timeout)
        except KafkaException as exc:
            log.warning("status: lag of group %s on %s not read: %s", group, topic, exc)
            continue
        lags.update({(group, topic, row.partition): row.lag for row in rows})
    return lags


def _component_lag(snapshot: Snapshot, broker_lag: dict[tuple[str, str, int], int]) -> int | None:
    """Records waiting in the partitions the component owns (as of its last snapshot), from the
    broker; else as the component's own snapshot measured them (None: not known)."""
    group, partitions = snapshot.get("group"), snapshot.get("partitions", [])
    found = [broker_lag.get((group, p["topic"], p["partition"])) for p in partitions] if group else []
    if found and all(lag is not None for lag in found):
        return sum(lag for lag in found if lag is not None)
    lags = [p["lag"] for p in partitions if p.get("lag") is not None]
    return sum(lags) if lags else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# --- the report -----------------------------------------------------------------------------------


def build_report(
    bootstrap_servers: str,
    topology: str,
    *,
    kafka_config: dict[str, Any] | None = None,
    snapshots: dict[str, Snapshot] | None = None,
    now: float | None = None,
    include_all: bool = False,
    timeout: float = 15.0,
) -> dict[str, Any]:
    """The ``status --json`` document (see docs/operations.md for every field)."""
    now = time.time() if now is None else now
    if snapshots is None:
        snapshots = read_snapshots(bootstrap_servers, topology, kafka_config=kafka_config, timeout=timeout)
    judged = {name: judge_snapshot(snap, now) for name, snap in snapshots.items()}
    broker_lag = _broker_lags(bootstrap_servers, kafka_config, snapshots, timeout)
    replaced = {
        name: _taken_over_by(name, snapshots, judged) for name, j in judged.items() if j.verdict is Verdict.DOWN
    }
    components = []
    for name, snap in sorted(snapshots.items(), key=lambda item: (item[1].get("kind", ""), item[0])):
        judgement = judge_replaced(judged[name], replaced.get(name, ()))
        last_seen = snap.get("published_at", 0.0)
        silent = now - last_seen
        window_s = WINDOW_SAMPLES * snap.get("interval_s", 5.0)
        if not include_all and (
            (judgement.verdict in (Verdict.DOWN, Verdict.STOPPED) and silent > FORGET_AFTER_S)
            or (replaced.get(name) and silent > window_s)  # replaced: shown for a window, then gone
        ):
            continue
        rated = RATE_COUNTERS.get(snap.get("kind", ""), ())
        running = judgement.verdict not in (Verdict.DOWN, Verdict.STOPPED) and not replaced.get(name)
        history = snap.get("history") or [{}]
        components.append(
            {
                "name": name,
                "kind": snap.get("kind"),
                "host": snap.get("host"),
                "pid": snap.get("pid"),
                "state": snap.get("state"),
                "started_at": snap.get("started_at"),
                "last_seen": last_seen,
                "age_s": round(max(0.0, now - last_seen), 1),
                "group": snap.get("group"),
                "inputs": snap.get("inputs", []),
                "outputs": snap.get("outputs", []),
                "verdict": judgement.verdict.value,
                "reason": judgement.reason,
                "running": running,
                # a row that no longer runs shows no rates: its last ones are not what happens now
                "rates": _rates(snap) if running else {},
                "latency": _latency(snap) if running else None,
                "capacity": snap.get("capacity") if running else None,
                "pending_roots": snap.get("pending_roots"),
                "table_bytes": snap.get("table_bytes"),
                "backlog": history[-1].get("backlog") if running else None,
                # what the broker says now waits in the partitions it owns (or owned last: a
                # killed or frozen component's lag keeps growing); none once stopped or replaced
                "lag": None
                if judgement.verdict is Verdict.STOPPED or replaced.get(name)
                else _component_lag(snap, broker_lag),
                "calls_in_flight": snap.get("calls_in_flight") if running else None,
                "oldest_call_s": snap.get("oldest_call_s") if running else None,
                "parallelism": snap.get("parallelism"),
                "last_error": snap.get("last_error"),
                "counters": snap.get("counters", {}),
                "metrics_port": snap.get("metrics_port"),
                "history": [
                    {"t": h["t"], **{k: h["counters"].get(k, 0) for k in rated}} for h in snap.get("history", [])
                ],
            }
        )
    live = {c["name"]: c for c in components}
    partitions = _partitions(bootstrap_servers, kafka_config, snapshots, live, now, timeout)
    topics = TopologyTopics(topology)
    counts = _topic_counts(bootstrap_servers, kafka_config, [topics.dlq, topics.quarantine], timeout)
    ackers = [c for c in components if c["kind"] == "acker" and c["running"]]
    rows = [(c["name"], Judgement(Verdict(c["verdict"]), c["reason"])) for c in components]
    rows += [(f"{p['topic']}[{p['partition']}]", Judgement(Verdict(p["verdict"]), p["reason"])) for p in partitions]
    topology_judgement = roll_up(rows)
    return {
        "schema": REPORT_SCHEMA,
        "topology": topology,
        "generated_at": round(now, 3),
        "verdict": topology_judgement.verdict.value,
        "reason": topology_judgement.reason,
        "components": components,
        "partitions": partitions,
        "dead_letters": {"topic": topics.dlq, "records": counts.get(topics.dlq)},
        "quarantine": {"topic": topics.quarantine, "records": counts.get(topics.quarantine)},
        "ackers": {
            "workers": len(ackers),
            "pending_roots": sum(c["pending_roots"] or 0 for c in ackers),
            "table_bytes": sum(c["table_bytes"] or 0 for c in ackers),
        },
    }


def _partitions(
    bootstrap: str,
    kafka_config: dict[str, Any] | None,
    snapshots: dict[str, Snapshot],
    live: dict[str, dict[str, Any]],
    now: float,
    timeout: float,
) -> list[dict[str, Any]]:
    """One row per source partition of every spout group that has a live-listed spout."""
    groups: dict[str, set[str]] = {}
    owners: dict[tuple[str, str, int], dict[str, Any]] = {}
    running: set[str] = set()  # groups with a spout not stopped on purpose
    for name, snap in snapshots.items():
        if snap.get("kind") not in SPOUT_KINDS or name not in live or not snap.get("group"):
            continue
        groups.setdefault(snap["group"], set()).update(snap.get("inputs", []))
        if snap.get("state") == "stopped":
            continue
        running.add(snap["group"])
        for p in snap.get("partitions", []):
            key = (snap["group"], p["topic"], p["partition"])
            if key not in owners or owners[key].get("published_at", 0) < snap.get("published_at", 0):
                owners[key] = {**p, "published_at": snap.get("published_at", 0), "component": name, "snapshot": snap}
    rows = []
    for group, topics in sorted(groups.items()):
        consumer = _consumer(bootstrap, kafka_config, group)
        try:
            tps = []
            for topic in sorted(topics):
                described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
                if described is not None and described.error is None:
                    tps += [TopicPartition(topic, p) for p in sorted(described.partitions)]
            committed = consumer.committed(tps, timeout=timeout) if tps else []
            for tp in committed:
                _, end = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout)
                owner = owners.get((group, tp.topic, tp.partition))
                rows.append(_partition_row(group, tp, end, owner, live, now, stopped=group not in running))
        except KafkaException as exc:
            raise TopologyError(f"status: cannot read the offsets of group {group}: {exc}") from exc
        finally:
            consumer.close()
    return rows


def _partition_row(
    group: str,
    tp: TopicPartition,
    end: int,
    owner: dict[str, Any] | None,
    live: dict[str, dict[str, Any]],
    now: float,
    *,
    stopped: bool = False,
) -> dict[str, Any]:
    committed = tp.offset if tp.offset >= 0 else None
    done_above: int | None = 0
    if committed is not None and tp.metadata:
        try:
            done_above = sum(len(r) for r in decode_done_ranges(committed, tp.metadata))
        except DecodeError:
            done_above = None  # not our metadata
    lag = end - (committed or 0)
    row = {
        "group": group,
        "topic": tp.topic,
        "partition": tp.partition,
        "committed": committed,
        "end": end,
        "lag": lag,
        "done_above_commit": done_above,
        "component": None,
        "pending": None,
        "retrying": None,
        "oldest_pending": None,
    }
    if owner is None or owner["component"] not in live or not live[owner["component"]]["running"]:
        if stopped:
            judgement = Judgement(Verdict.STOPPED, "its spouts were stopped")
        elif lag <= (done_above or 0):
            judgement = Judgement(Verdict.OK, "nothing to read")
        else:
            judgement = Judgement(Verdict.DOWN, "no live spout owns it")
    else:
        age = max(0.0, now - owner["published_at"])
        oldest = owner.get("oldest_pending")
        if oldest is not None and committed is not None and oldest["offset"] < committed:
            oldest = None  # completed since the owner's snapshot: the broker's commit is newer
        row.update(
            {
                "component": owner["component"],
                "pending": owner.get("pending"),
                "retrying": owner.get("retrying"),
                "oldest_pending": None
                if oldest is None
                else {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": oldest["offset"],
                    "age_s": round(oldest["age_s"] + age, 1),
                },
            }
        )
        judgement = judge_window(partition_samples(owner["snapshot"], tp.topic, tp.partition))
    row.update({"verdict": judgement.verdict.value, "reason": judgement.reason})
    return row


def _topic_counts(
    bootstrap: str, kafka_config: dict[str, Any] | None, topics: list[str], timeout: float
) -> dict[str, int]:
    """Records held by each topic (end minus start, summed over partitions)."""
    consumer = _consumer(bootstrap, kafka_config)
    try:
        counts = {}
        for topic in topics:
            described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if described is None or described.error is not None:
                continue
            total = 0
            for p in described.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                total += max(0, high - low)
            counts[topic] = total
        return counts
    finally:
        consumer.close()


def forget(
    bootstrap_servers: str,
    topology: str,
    name: str,
    *,
    kafka_config: dict[str, Any] | None = None,
    timeout: float = 15.0,
) -> dict[str, Any]:
    """Remove component ``name`` from ``<topology>.status`` (a tombstone: compaction drops its
    snapshots). Refused while it runs (it would publish again); returns its last snapshot."""
    from reliable_kafka.kafka.clients import new_producer

    snapshots = read_snapshots(bootstrap_servers, topology, kafka_config=kafka_config, timeout=timeout)
    if name not in snapshots:
        known = ", ".join(sorted(snapshots)) or "none"
        raise TopologyError(
            f"status --forget: no component {name!r} in {TopologyTopics(topology).status} (known: {known})"
        )
    snap = snapshots[name]
    judgement = judge_snapshot(snap, time.time())
    if judgement.verdict not in (Verdict.DOWN, Verdict.STOPPED):
        raise TopologyError(
            f"status --forget: {name} is running ({judgement.verdict.value}, last seen "
            f"{time.time() - snap.get('published_at', 0):.0f} s ago on {snap.get('host')}:{snap.get('pid')}); "
            f"it would publish again: stop it first"
        )
    producer = new_producer(bootstrap_servers, kafka_config)
    producer.produce(TopologyTopics(topology).status, key=name.encode(), value=None)
    if producer.flush(timeout) > 0:
        raise TopologyError(f"status --forget: the tombstone for {name} was not delivered within {timeout:.0f} s")
    return snap


# --- text -----------------------------------------------------------------------------------------


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f}ms"
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.0f}s"


def render(report: dict[str, Any]) -> str:
    """The report as text: one line per component, one per source partition, then totals."""
    now = report["generated_at"]
    reason = report.get("reason")
    lines = [
        f"topology {report['topology']}: {report['verdict']}" + (f" ({reason})" if reason else ""),
        "",
        f"{'COMPONENT':<22} {'KIND':<19} {'VERDICT':<7} {'HOST:PID':<20} {'UP':>5} {'SEEN':>5} "
        f"{'IN/S':>8} {'DONE/S':>8} {'FAIL/S':>7} {'P50':>7} {'P99':>7} {'CAP':>5} {'LAG':>7} {'CALL':>5}  REASON",
    ]
    for c in report["components"]:
        rates = c["rates"]
        kind = c["kind"]
        rate_in = rates.get("read", rates.get("received", rates.get("inputs", rates.get("entries_folded"))))
        rate_done = rates.get("completed", rates.get("acked"))
        # results that are failures, each counted once (a handler error is the cause of a failed
        # tuple, not another result)
        failing = [k for k in ("failed", "timed_out", "tracker_failed", "tracker_timed_out") if k in rates]
        rate_fail = sum(rates[k] for k in failing) if failing else None
        latency = c["latency"] or {}
        up = _ago(now - c["started_at"]) if c["started_at"] else "-"
        lines.append(
            f"{c['name'][:22]:<22} {kind:<19} {c['verdict']:<7} {(str(c['host']) + ':' + str(c['pid']))[:20]:<20} "
            f"{up:>5} {_ago(c['age_s']):>5} {_num(rate_in):>8} {_num(rate_done):>8} {_num(rate_fail):>7} "
            f"{_ms(latency.get('p50_s')):>7} {_ms(latency.get('p99_s')):>7} "
            f"{'-' if c['capacity'] is None else format(c['capacity'], '.2f'):>5} {_num(c.get('lag')):>7} "
            f"{_ago(c.get('oldest_call_s')):>5}  {c['reason']}"
        )
    errors = [c for c in report["components"] if c.get("last_error")]
    for c in errors:
        e = c["last_error"]
        where = f" on {e['where']}" if e.get("where") else ""
        lines += [
            "",
            f"last error of {c['name']} ({e['count']} so far; {_ago(now - e['at'])} ago on {e['host']}:{e['pid']}"
            f"{where}):",
            f"  {e['type']}: {e['message']}",
            *(f"    {frame}" for frame in e.get("frames", [])),
        ]
    if report["partitions"]:
        lines += [
            "",
            f"{'SOURCE PARTITION':<36} {'VERDICT':<6} {'COMMITTED':>10} {'END':>10} {'LAG':>8} "
            f"{'DONE>CMT':>8} {'PENDING':>8} {'RETRY':>6}  OLDEST PENDING",
        ]
        for p in report["partitions"]:
            oldest = p["oldest_pending"]
            where = (
                f"{oldest['topic']}[{oldest['partition']}]@{oldest['offset']} ({_ago(oldest['age_s'])})"
                if oldest
                else "-"
            )
            lines.append(
                f"{(p['topic'] + '[' + str(p['partition']) + ']')[-36:]:<36} {p['verdict']:<6} "
                f"{_num(p['committed']):>10} {p['end']:>10} {p['lag']:>8} {_num(p['done_above_commit']):>8} "
                f"{_num(p['pending']):>8} {_num(p['retrying']):>6}  {where}"
            )
    ackers = report["ackers"]
    lines += [
        "",
        f"ackers: {ackers['workers']} live, {ackers['pending_roots']} pending roots, "
        f"{ackers['table_bytes'] / 1e6:.2f} MB of tables",
        f"dead letters: {_num(report['dead_letters']['records'])} in {report['dead_letters']['topic']}; "
        f"quarantined: {_num(report['quarantine']['records'])} in {report['quarantine']['topic']}",
    ]
    return "\n".join(lines)


def _num(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    return str(value)
