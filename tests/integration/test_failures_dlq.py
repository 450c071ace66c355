"""Failure reasons, dead letters that say why, poison pills, the dead-letter guard, `dlq` commands."""

from __future__ import annotations

import json
import time

import pytest

from reliable_kafka import AckerWorker, Bolt, LocalCluster, Spout, Tracking, codec
from reliable_kafka.cli import main
from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import DeadLetterGuardTripped
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, lag
from reliable_kafka.ops.dlq import LINEAGE_HEADER
from reliable_kafka.ops.failures import decode_attempts, decode_failure
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

FAST_RETRY = Backoff(initial_ms=20, multiplier=2.0, max_ms=200)


def _topology(bootstrap, prefix, handler, *, acker_timeout_ms=20_000, transactional=False, **tracking):
    """``tracking``: the spout's Tracking fields (over a fast backoff and a 20 s timeout)."""
    topology = unique_name(prefix)
    source, middle = f"{topology}-src", f"{topology}-mid"
    create_topics(bootstrap, {source: 1, middle: 1})
    # created (with leaders) before the spout starts: it reads the outcome topic's end at once
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology))
    on = {"topology": topology, "connection": bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=middle,
        tracking=Tracking(**{"backoff": FAST_RETRY, "message_timeout_ms": 20_000, **tracking}),
        transactional=transactional,
        name="spout",
    )
    bolt = Bolt(**on, source_topics=middle, group_id=f"{topology}-bolt", handler=handler, name="checker")
    return (
        topology,
        source,
        [AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=acker_timeout_ms)), spout, bolt],
    )


def _checker(tuple_, collector):
    if tuple_.value == b"poison":
        collector.fail(tuple_, reason="cannot parse: not a number", retry=False)
    elif tuple_.value == b"bad":
        raise ValueError("bad value")  # the rich bolt fails it with the error as reason
    else:
        collector.ack(tuple_)


@pytest.fixture(scope="module")
def failed_run(kafka_bootstrap):
    """One run: 10 good records, a poison pill (fail(retry=False)) and a record whose bolt raises."""
    topology, source, components = _topology(kafka_bootstrap, "fail", _checker, max_retries=4)
    values = [b"ok"] * 10
    values[3], values[7] = b"poison", b"bad"
    placed = produce_values(kafka_bootstrap, source, values)
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, f"{topology}-spout", source) == 0,
            timeout=120,
            what="every record completed or dead-lettered",
            progress=lambda: str(components[1].stats),
        )
    dead = {m.value(): m for m in read_topic(kafka_bootstrap, TopologyTopics(topology).dlq)}
    return {"topology": topology, "source": source, "placed": placed, "dead": dead, "spout": components[1]}


def test_a_poison_pill_is_dead_lettered_at_once_with_its_reason(failed_run):
    assert set(failed_run["dead"]) == {b"poison", b"bad"}
    message = failed_run["dead"][b"poison"]
    headers = dict(message.headers())
    parked = codec.decode_parked(headers[codec.PARKED_HEADER])
    assert parked.attempts == 1, "fail(retry=False) must not be retried (max_retries=4)"
    assert (parked.source_topic, parked.source_offset) == (failed_run["source"], failed_run["placed"][3][1])
    assert "POISON_PILL" in parked.reason
    assert headers[REASON_HEADER] == b"cannot parse: not a number"
    [attempt] = decode_attempts(headers[ATTEMPTS_HEADER])
    [failure] = attempt.failures
    assert (failure["component"], failure["retry"], attempt.outcome) == ("checker", False, "FAILED")
    assert failure["tuple"]["topic"] == f"{failed_run['topology']}-mid"


def test_dead_letters_carry_the_reason_of_every_attempt(failed_run):
    headers = dict(failed_run["dead"][b"bad"].headers())
    assert codec.decode_parked(headers[codec.PARKED_HEADER]).attempts == 5
    attempts = decode_attempts(headers[ATTEMPTS_HEADER])
    assert [a.attempt for a in attempts] == [1, 2, 3, 4, 5]
    assert len({a.root for a in attempts}) == 5, "each attempt is a new tree"
    # the bolt flushes a failure record before it sends the FAIL: every FAILED attempt names it (a
    # busy machine may time an attempt out instead; that attempt has no failure record to name)
    failed = [a for a in attempts if a.outcome == "FAILED"]
    assert failed, f"no attempt failed: {attempts}"
    assert all(a.failures for a in failed), f"a FAILED attempt without its reason: {failed}"
    for attempt in failed:
        assert attempt.failures[0]["error_type"] == "ValueError"
        assert attempt.failures[0]["reason"] == "ValueError: bad value"
    assert headers[REASON_HEADER] in (b"ValueError: bad value", b"FAILED")


def test_failures_topic_holds_one_record_per_fail(failed_run):
    records = [
        decode_failure(m.value())
        for m in read_topic(failed_run["spout"].bootstrap_servers, f"{failed_run['topology']}.failures")
    ]
    by_reason = {}
    for record in records:
        by_reason[record.reason] = by_reason.get(record.reason, 0) + 1
        assert record.component == "checker" and record.roots and record.at_ms > 0
    assert by_reason == {"cannot parse: not a number": 1, "ValueError: bad value": 5}


def test_dlq_list_show_and_replay_round_trip_sends_each_letter_once(failed_run, capsys):
    bootstrap, topology = failed_run["spout"].bootstrap_servers, failed_run["topology"]
    on = ["--topology", topology, "--bootstrap-servers", bootstrap]

    assert main(["dlq", "list", *on, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(d["value"] for d in listed) == ["bad", "poison"]
    assert (
        main(
            [
                "dlq",
                "list",
                *on,
                "--json",
                "--reason",
                "PARSE",
                "--component",
                "check",
                "--source-topic",
                failed_run["source"],
                "--since",
                "1h",
            ]
        )
        == 0
    )
    [poison] = json.loads(capsys.readouterr().out)
    assert poison["value"] == "poison" and poison["source"]["offset"] == failed_run["placed"][3][1]
    assert main(["dlq", "list", *on, "--json", "--until", "1h"]) == 0
    assert json.loads(capsys.readouterr().out) == []

    assert main(["dlq", "show", str(poison["offset"]), *on]) == 0
    shown = capsys.readouterr().out
    assert "cannot parse: not a number" in shown and "failed by checker" in shown and "retry=False" in shown

    target = f"{topology}-fixed"
    create_topics(bootstrap, {target: 1})
    replay = ["dlq", "replay", *on, "--reason", "parse", "--to", target, "--json"]
    assert main([*replay, "--dry-run"]) == 0
    assert len(json.loads(capsys.readouterr().out)["sent"]) == 1
    assert read_topic(bootstrap, target, timeout=5) == []
    assert main(replay) == 0
    assert len(json.loads(capsys.readouterr().out)["sent"]) == 1
    assert main(replay) == 0  # the second time: recorded as replayed, nothing sent
    report = json.loads(capsys.readouterr().out)
    assert report["sent"] == [] and "already replayed" in report["skipped"][0]["why"]
    [copy] = read_topic(bootstrap, target)
    headers = dict(copy.headers())
    assert copy.value() == b"poison"
    assert headers[LINEAGE_HEADER] == f"{topology}.dlq[0]@{poison['offset']}".encode()
    assert codec.PARKED_HEADER not in headers and ATTEMPTS_HEADER not in headers

    assert main(["dlq", "show", str(poison["offset"]), *on]) == 0
    assert f"replayed to {target} at" in capsys.readouterr().out


def test_dlq_replay_sends_a_letter_back_to_its_source_partition(failed_run, capsys):
    bootstrap, topology, source = failed_run["spout"].bootstrap_servers, failed_run["topology"], failed_run["source"]
    on = ["--topology", topology, "--bootstrap-servers", bootstrap, "--json"]
    assert main(["dlq", "replay", *on, "--reason", "ValueError", "--rate", "50"]) == 0
    [sent] = json.loads(capsys.readouterr().out)["sent"]
    assert (sent["to"], sent["partition"]) == (source, failed_run["placed"][7][0])
    copy = read_topic(bootstrap, source)[-1]
    assert copy.value() == b"bad" and copy.offset() == len(failed_run["placed"])
    assert dict(copy.headers())[LINEAGE_HEADER].decode() == sent["dlq"]


def test_dlq_replay_refuses_to_replay_everything_unless_told(failed_run, capsys):
    on = ["--topology", failed_run["topology"], "--bootstrap-servers", failed_run["spout"].bootstrap_servers]
    assert main(["dlq", "replay", *on]) == 1
    assert "--all" in capsys.readouterr().err
    assert main(["dlq", "replay", *on, "--all", "--rate", "0"]) == 1
    assert "--rate must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_a_stream_of_failures_trips_the_dead_letter_guard(kafka_bootstrap, transactional):
    def fail_all(tuple_, collector):
        collector.fail(tuple_, reason="downstream rejects everything")

    topology, source, components = _topology(
        kafka_bootstrap,
        "guard",
        fail_all,
        transactional=transactional,
        max_retries=0,
        max_dead_letter_ratio=0.2,
        dead_letter_window=10,
    )
    produce_values(kafka_bootstrap, source, [b"x"] * 60)
    spout = components[1]
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: "spout" in cluster.errors,
            timeout=120,
            what="the guard stops the spout",
            progress=lambda: str(spout.stats),
        )
        error = cluster.errors["spout"]
    assert isinstance(error, DeadLetterGuardTripped)
    assert error.window == 10 and error.dead_letters == 3 and "dlq list" in str(error)
    dead = read_topic(kafka_bootstrap, TopologyTopics(topology).dlq)
    assert len(dead) == 2, "the guard refuses the dead letter that trips it, and every one after"
    committed = committed_offsets(kafka_bootstrap, spout.group_id, source)
    assert committed.get(0, 0) < 60, "records not dead-lettered stay uncommitted"


def _tracing_checker(tuple_, collector):
    if tuple_.value == b"ok":
        collector.reset_timeout(tuple_)
        collector.ack(tuple_)
    elif tuple_.value == b"bad":
        collector.fail(tuple_, reason="nope")
    elif tuple_.value == b"half":  # acked, but its child is never read: the tree times out after this ACK
        collector.emit(tuple_.topic.replace("-mid", "-out"), b"child", anchors=tuple_)
        collector.ack(tuple_)
    # b"lost": neither acked nor failed, so its tree times out


def test_trace_shows_a_completed_a_failed_and_a_timed_out_record(kafka_bootstrap, capsys):
    # the lost record times out after 8 s (ample for the others to complete on a busy machine)
    topology, source, components = _topology(
        kafka_bootstrap, "trace", _tracing_checker, max_retries=0, acker_timeout_ms=8000
    )
    create_topics(kafka_bootstrap, {f"{topology}-out": 1})
    placed = produce_values(kafka_bootstrap, source, [b"ok", b"bad", b"lost", b"half"])
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, f"{topology}-spout", source) == 0,
            timeout=120,
            what="all four records settled",
            progress=lambda: str(components[1].stats),
        )
        time.sleep(6)  # one more status snapshot (every 5 s), which names the components' task ids
    on = ["--topology", topology, "--bootstrap-servers", kafka_bootstrap, "--json"]

    def traced(index):
        assert main(["trace", f"{source}:{placed[index][0]}@{placed[index][1]}", *on]) == 0
        return json.loads(capsys.readouterr().out)

    def kinds(attempt):
        return [(e["kind"], e["from"]) for e in attempt["events"]]

    ok = traced(0)
    assert ok["attempts"] and ok["attempts"][-1]["outcome"]["kind"] == "COMPLETED"
    last = ok["attempts"][-1]
    assert ("INIT", "spout") in kinds(last) and ("RESET_TIMEOUT", "checker") in kinds(last)
    assert ("ACK", "checker") in kinds(last) and not last["outstanding"]
    assert ok["dead_letters"] == []

    bad = traced(1)
    [attempt] = bad["attempts"]
    assert attempt["outcome"]["kind"] == "FAILED" and ("FAIL", "checker") in kinds(attempt)
    assert [f["reason"] for f in attempt["failures"]] == ["nope"]
    assert [d["reason"] for d in bad["dead_letters"]] == ["nope"]

    lost = traced(2)
    [attempt] = lost["attempts"]
    assert attempt["outcome"]["kind"] == "TIMED_OUT"
    assert kinds(attempt) == [("INIT", "spout")], "nobody acked or failed it"
    assert attempt["last_ack"] is None and attempt["failures"] == []
    assert [d["reason"] for d in lost["dead_letters"]] == ["TIMED_OUT"]

    assert main(["trace", f"{source}:{placed[2][0]}@{placed[2][1]}", *on[:-1]]) == 0
    text = capsys.readouterr().out
    assert "TIMED_OUT" in text and "no ACK at all before the timeout" in text and "dead letter" in text

    half = traced(3)
    [attempt] = half["attempts"]
    assert attempt["outcome"]["kind"] == "TIMED_OUT" and attempt["last_ack"]["from"] == "checker"
    assert ("ACK", "checker") in kinds(attempt)
    dead_offset = half["dead_letters"][0]["offset"]
    assert main(["dlq", "show", str(dead_offset), *on[:-1]]) == 0
    assert "last ACK before the timeout: checker" in capsys.readouterr().out
    assert main(["dlq", "show", str(lost["dead_letters"][0]["offset"]), *on]) == 0
    [shown] = json.loads(capsys.readouterr().out)["attempts"]
    assert shown["last_ack"] is None


def test_a_transactional_spout_dead_letters_a_poison_pill_at_once_in_its_transaction(kafka_bootstrap, capsys):
    topology, source, components = _topology(kafka_bootstrap, "txfail", _checker, transactional=True, max_retries=4)
    spout = components[1]
    placed = produce_values(kafka_bootstrap, source, [b"ok", b"poison", b"ok"])
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: lag(kafka_bootstrap, spout.group_id, source) == 0,
            timeout=120,
            what="every record completed or dead-lettered",
            progress=lambda: str(components[1].stats),
        )
    [dead] = read_topic(kafka_bootstrap, TopologyTopics(topology).dlq)
    headers = dict(dead.headers())
    assert dead.value() == b"poison" and codec.decode_parked(headers[codec.PARKED_HEADER]).attempts == 1
    assert headers[REASON_HEADER] == b"cannot parse: not a number"

    # its roots are derived from the group and the coordinates: trace finds them without an index
    assert (
        main(
            [
                "trace",
                f"{source}:{placed[1][0]}@{placed[1][1]}",
                "--topology",
                topology,
                "--bootstrap-servers",
                kafka_bootstrap,
                "--transactional-group",
                spout.group_id,
                "--json",
            ]
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    [attempt] = document["attempts"]
    assert attempt["outcome"]["kind"] == "FAILED" and [e["kind"] for e in attempt["events"]] == ["INIT", "FAIL"]
    assert [f["reason"] for f in attempt["failures"]] == ["cannot parse: not a number"]
    assert len(document["dead_letters"]) == 1


def test_a_bolt_of_a_topology_without_a_failures_topic_fails_tuples_without_reasons(kafka_bootstrap, caplog):
    from reliable_kafka.bolt.runner import Tuple
    from reliable_kafka.core.anchors import Anchored

    topology = unique_name("oldtopo")
    topics = TopologyTopics(topology)
    create_topics(kafka_bootstrap, {topics.acks: 1, topics.outcomes: 1, f"{topology}-in": 1})  # as before .failures
    bolt = Bolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=f"{topology}-in",
        group_id=f"{topology}-bolt",
        handler=lambda t, c: None,
        name="old",
    )
    bolt.start()
    try:
        assert "failure reasons are not recorded" in caplog.text
        bolt.collector.fail(Tuple(f"{topology}-in", 0, 0, None, b"v", [], 0, Anchored({5: 9})), reason="r")
        bolt._acks.send()
        assert bolt._producer.flush(30) == 0, "nothing waits for a topic that does not exist"
    finally:
        bolt.close()
