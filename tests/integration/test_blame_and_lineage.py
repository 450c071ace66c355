"""Blame and lineage on a real broker: ``trace`` and ``dlq show`` name the last hop that acked before
the outcome (an ACK logged after it is late), and dead letters show where they were replayed from.

The ack, outcome and root-index records are written here by hand, in the order a slow hop would
give them (the ack topic takes the broker's append time, so the late ACK is written after the
outcome), so the order is exactly the one under test.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

from reliable_kafka import codec
from reliable_kafka.cli import main
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.ops import dlq as dlq_module
from reliable_kafka.ops.trace import last_acks, render, trace
from reliable_kafka.spout.root_index import RootIndex
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

_U64 = (1 << 64) - 1
SPOUT, FIRST_HOP, LATE_HOP = 77, 101, 202
ROOT = 0x1234_5678_9ABC


def _partitions(bootstrap: str, topic: str) -> int:
    return len(admin_client(bootstrap).list_topics(topic, timeout=30).topics[topic].partitions)


def test_trace_and_dlq_show_blame_the_last_ack_before_the_timeout_not_one_after_it(kafka_bootstrap, capsys):
    topology = unique_name("blame")
    topics = TopologyTopics(topology)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    source = f"{topology}-src"
    create_topics(kafka_bootstrap, {source: 1})
    [(partition, offset)] = produce_values(kafka_bootstrap, source, [b"slow"])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    index = RootIndex(producer, topic=topics.roots, spout_id=SPOUT)
    index.add((source, partition), offset, ROOT)
    index.send()
    acks = (ROOT & _U64) % _partitions(kafka_bootstrap, topics.acks)
    edge_1, edge_2 = 11, 22

    def ack_entry(sender, kind, val):
        producer.produce(topics.acks, codec.encode_ack_batch(sender, [kind], [ROOT], [val]), partition=acks)
        assert producer.flush(30) == 0

    ack_entry(SPOUT, EventKind.INIT, edge_1)
    ack_entry(FIRST_HOP, EventKind.ACK, edge_1 ^ edge_2)  # acked; its child never was
    timed_out_at = int(time.time() * 1000) + 1
    while time.time() * 1000 <= timed_out_at:  # the outcome strictly after the first hop's ACK
        time.sleep(0.005)
    outcome = codec.encode_outcomes(SPOUT, [ROOT], [int(OutcomeKind.TIMED_OUT)])
    outcomes = (SPOUT & _U64) % _partitions(kafka_bootstrap, topics.outcomes)
    producer.produce(topics.outcomes, outcome, partition=outcomes, timestamp=timed_out_at)
    assert producer.flush(30) == 0
    while time.time() * 1000 <= timed_out_at + 1:  # the late ACK strictly after the outcome
        time.sleep(0.005)
    ack_entry(LATE_HOP, EventKind.ACK, edge_2)  # the slow hop acks after the tree timed out

    document = trace(kafka_bootstrap, topology, source, partition, offset, timeout=60)
    [attempt] = document["attempts"]
    assert attempt["outcome"]["kind"] == "TIMED_OUT"
    assert attempt["last_ack"]["task_id"] == FIRST_HOP, attempt
    late = [e for e in attempt["events"] if e["task_id"] == LATE_HOP]
    assert (
        late
        and late[0]["after_outcome"]
        and not any(e["after_outcome"] for e in attempt["events"] if e["task_id"] != LATE_HOP)
    )
    text = render(document)
    assert f"last ack before the timeout: {FIRST_HOP}" in text and "too late to count" in text

    # dlq show reads the same: the last ACK at or before the attempt's outcome
    assert last_acks(kafka_bootstrap, topology, {ROOT: timed_out_at})[ROOT]["task_id"] == FIRST_HOP
    assert (
        main(["trace", f"{source}:{partition}@{offset}", "--topology", topology, "--bootstrap", kafka_bootstrap]) == 0
    )
    assert f"last ack before the timeout: {FIRST_HOP}" in capsys.readouterr().out


def _records(bootstrap: str, topic: str, count: int) -> list:
    """The committed records of ``topic`` once there are ``count`` (a transaction's markers land
    a moment after its commit returns)."""
    deadline = time.monotonic() + 60
    while True:
        found = read_topic(bootstrap, topic)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.25)


def _park(bootstrap: str, topology: str, source: str, *, lineage: list[str]) -> None:
    parked = codec.ParkedRecord(
        reason="FAILED", attempts=2, source_topic=source, source_partition=0, source_offset=3, component="checker"
    )
    headers = [("app", b"kept"), (codec.PARKED_HEADER, codec.encode_parked(parked))]
    headers += [(dlq_module.LINEAGE_HEADER, hop.encode()) for hop in lineage]
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(TopologyTopics(topology).dlq, b"payload", key=b"k", headers=headers)
    assert producer.flush(30) == 0


def test_replay_lineage_shows_in_show_and_list_and_grows_with_each_replay(kafka_bootstrap, capsys):
    topology = unique_name("lineage")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology))
    source, again = f"{topology}-src", f"{topology}-again"
    create_topics(kafka_bootstrap, {source: 1, again: 1})
    _park(kafka_bootstrap, topology, source, lineage=[f"{topology}.dlq[0]@0-earlier"])
    on = ["--topology", topology, "--bootstrap-servers", kafka_bootstrap]

    assert main(["dlq", "list", *on, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["replayed_from"] == [f"{topology}.dlq[0]@0-earlier"]
    assert main(["dlq", "show", "0", *on]) == 0
    assert f"lineage   replayed from {topology}.dlq[0]@0-earlier" in capsys.readouterr().out
    assert main(["dlq", "list", *on]) == 0
    assert "[replayed from" in capsys.readouterr().out

    assert main(["dlq", "replay", *on, "--offset", "0", "--to", again]) == 0
    assert "1 sent" in capsys.readouterr().out
    [copy] = _records(kafka_bootstrap, again, 1)
    hops = [v.decode() for k, v in copy.headers() if k == dlq_module.LINEAGE_HEADER]
    assert hops == [f"{topology}.dlq[0]@0-earlier", f"{topology}.dlq[0]@0"]
    assert ("app", b"kept") in copy.headers()

    # a second replay is skipped, saying when and by whom in words; --force sends it again
    assert main(["dlq", "replay", *on, "--offset", "0", "--to", again]) == 0
    out = capsys.readouterr().out
    assert "already replayed to" in out and " UTC by " in out and "at_ms" not in out and "{" not in out
    assert main(["dlq", "show", "0", *on]) == 0
    assert " UTC by " in capsys.readouterr().out
    assert main(["dlq", "replay", *on, "--offset", "0", "--to", again, "--force"]) == 0
    assert "1 sent" in capsys.readouterr().out
    assert len(_records(kafka_bootstrap, again, 2)) == 2


def test_replay_to_a_missing_topic_fails_before_reading_the_dlq(kafka_bootstrap, capsys, monkeypatch):
    topology = unique_name("missing")
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology))
    _park(kafka_bootstrap, topology, f"{topology}-src", lineage=[])

    def no_scan(*args, **kwargs):
        raise AssertionError("the DLQ was read before the target topic was checked")

    monkeypatch.setattr(dlq_module, "read_dead_letters", no_scan)
    on = ["--topology", topology, "--bootstrap-servers", kafka_bootstrap]
    assert main(["dlq", "replay", *on, "--all", "--to", f"{topology}-nowhere"]) == 1
    captured = capsys.readouterr()
    assert f"topic '{topology}-nowhere' does not exist" in captured.err and captured.out == ""
