"""On the real broker: a stream is never diverted to the DLQ silently. The dead-letter guard, on by
default, stops a spout whose bolt fails everything (and status says why); an emit to the spout's
own source is refused; an emit_to that does not exist is said at start."""

from __future__ import annotations

import logging
import time

import pytest

from reliable_kafka import AckerWorker, BasicBolt, LocalCluster, Spout, Tracking
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.errors import ConfigError, DeadLetterGuardTripped, OutputRefused
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.ops.status import build_report
from reliable_kafka.spout.dead_letters import DEAD_LETTER_WINDOW
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

FAST_RETRY = Backoff(initial_ms=20, max_ms=200)


def _spout_and_acker(bootstrap: str, prefix: str, *, emit_to=..., handler=None, **tracking):
    """``tracking``: the spout's Tracking fields; ``emit_to``: the middle topic unless given."""
    topology = unique_name(prefix)
    source, middle = f"{topology}-src", f"{topology}-mid"
    create_topics(bootstrap, {source: 1, middle: 1})
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology))
    on = {"topology": topology, "connection": bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        name="spout",
        emit_to=middle if emit_to is ... else emit_to,
        handler=handler,
        tracking=Tracking(**tracking),
    )
    acker = AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=20_000))
    return topology, source, middle, spout, acker


def test_the_default_guard_stops_a_spout_whose_bolt_fails_everything(kafka_bootstrap):
    def fail_all(tuple_, collector):
        raise RuntimeError("a bad deploy: every tuple fails")

    # the guard's threshold and window are the defaults: only retries are cut short
    topology, source, middle, spout, acker = _spout_and_acker(
        kafka_bootstrap, "guard-default", max_retries=0, backoff=FAST_RETRY
    )
    bolt = BasicBolt(
        topology=topology,
        connection=kafka_bootstrap,
        source_topics=middle,
        group_id=f"{topology}-bolt",
        handler=fail_all,
        name="bolt",
    )
    for component in (spout, acker, bolt):
        component.status_interval_s = 0.5  # type: ignore[attr-defined]  # read by ops.reporter
    produce_values(kafka_bootstrap, source, [b"x"] * 400)
    with LocalCluster(acker, spout, bolt) as cluster:
        cluster.wait_until(
            lambda: "spout" in cluster.errors,
            timeout=180,
            what="the default dead-letter guard stops the spout",
            progress=lambda: str(spout.stats),
        )
        error = cluster.errors["spout"]
    assert isinstance(error, DeadLetterGuardTripped), repr(error)
    assert error.window == DEAD_LETTER_WINDOW and error.dead_letters == DEAD_LETTER_WINDOW // 2 + 1
    assert "max_dead_letter_ratio=0.5" in str(error) and "dlq list" in str(error)
    dead = read_topic(kafka_bootstrap, TopologyTopics(topology).dlq)
    assert len(dead) == DEAD_LETTER_WINDOW // 2, "the guard refuses the dead letter that trips it, and every later one"
    assert committed_offsets(kafka_bootstrap, spout.group_id, source).get(0, 0) < 400, "the rest stays uncommitted"

    # status says why the spout stopped (its last snapshot, published as it closed)
    stopped = None
    deadline = time.monotonic() + 30
    while stopped is None and time.monotonic() < deadline:
        report = build_report(kafka_bootstrap, topology)
        stopped = next((c for c in report["components"] if c["name"] == "spout" and c["state"] == "stopped"), None)
        time.sleep(0.2)
    assert stopped is not None, "the spout's stopped snapshot did not reach the status topic within 30 s"
    assert stopped["reason"].startswith("stopped: spout: 101 of the last 200 settled records"), stopped["reason"]


def test_an_emit_to_the_spouts_own_source_is_refused(kafka_bootstrap):
    topology = unique_name("emit-source")
    source = f"{topology}-src"
    with pytest.raises(ConfigError, match=f"emit_to '{source}' is this component's own source"):
        Spout(topology=topology, connection=kafka_bootstrap, source_topics=source, group_id="g", emit_to=source)

    def loop_back(record, collector):
        collector.emit(source, record.value)  # would read itself forever

    topology, source, _, spout, acker = _spout_and_acker(
        kafka_bootstrap, "emit-source", emit_to=None, handler=loop_back
    )
    produce_values(kafka_bootstrap, source, [b"a", b"b"])
    with LocalCluster(acker, spout) as cluster:
        cluster.wait_until(lambda: "spout" in cluster.errors, timeout=120, what="the refused emit stops the spout")
        error = cluster.errors["spout"]
    assert isinstance(error, OutputRefused) and error.resource == source, repr(error)
    assert end_offsets(kafka_bootstrap, source) == {0: 2}, "nothing was written back to the source"
    assert read_topic(kafka_bootstrap, TopologyTopics(topology).dlq) == [], "and nothing dead-lettered"


def test_an_emit_to_that_does_not_exist_is_said_at_start(kafka_bootstrap, caplog):
    # ackers=0: nothing tracked, so no acker is needed to start the spout
    typo = f"{unique_name('typo')}-no-such-topic"
    _, _, _, spout, _ = _spout_and_acker(kafka_bootstrap, "emit-typo", emit_to=typo, ackers=0)
    try:
        with caplog.at_level(logging.WARNING, logger="reliable_kafka.spout.spout"):
            spout.start()
        assert spout.emit_to_missing
        assert f"emit_to topic {typo!r} does not exist" in caplog.text
    finally:
        spout.close()
