"""Emits that would divert a stream silently: to a component's own source or a topology topic
(refused), to an ``emit_to`` that does not exist (said at start), and the dead-letter guard's
defaults (on)."""

from __future__ import annotations

import logging

import pytest

from reliable_kafka import Backoff, Connection, Loop, Tracking
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt, Bolt
from reliable_kafka.errors import AuthorizationError, ConfigError, OutputRefused
from reliable_kafka.spout.dead_letters import DEAD_LETTER_RATIO, DEAD_LETTER_WINDOW
from reliable_kafka.spout.spout import Spout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink, step_until


@pytest.fixture
def kafka() -> MemoryKafka:
    kafka = MemoryKafka(clock=ManualClock())
    kafka.create_topic("mid", 1)
    return kafka


def _acker(kafka: MemoryKafka) -> AckerWorker:
    acker = AckerWorker(topology="wc", connection=Connection("memory", clients=kafka), loop=Loop(commit_interval_ms=0))
    acker.start()
    return acker


def _spout(kafka: MemoryKafka, max_dead_letter_ratio=DEAD_LETTER_RATIO, **options) -> Spout:
    options.setdefault("emit_to", "mid")
    return Spout(
        topology="wc",
        connection=Connection("memory", clients=kafka),
        tracking=Tracking(backoff=Backoff(initial_ms=0), root_index=False, max_dead_letter_ratio=max_dead_letter_ratio),
        loop=Loop(commit_interval_ms=0),
        source_topics="lines",
        group_id="wc.spout",
        **options,
    )


@pytest.mark.parametrize("target", ["lines", "wc.acks", "wc.outcomes", "wc.dlq", "wc.status"])
def test_a_spout_handler_that_emits_to_its_source_or_a_topology_topic_stops_the_spout(kafka, target):
    ListSource(kafka, "lines", [b"a", b"b"])
    acker = _acker(kafka)
    sent_before = len(TopicSink(kafka, target).messages())

    def handler(record, collector):
        collector.emit(target, record.value)

    spout = _spout(kafka, emit_to=None, handler=handler)
    spout.start()
    with pytest.raises(OutputRefused) as refused:
        step_until(lambda: False, spout, acker, max_rounds=50)
    assert refused.value.resource == target and target in str(refused.value)
    assert isinstance(refused.value, AuthorizationError), "components stop on it, as on a broker's refusal"
    assert spout.stats.handler_errors == 0, "not a record's failure: nothing is retried or dead-lettered"
    assert len(TopicSink(kafka, target).messages()) == sent_before, "nothing was sent there"


@pytest.mark.parametrize("bolt_class", [Bolt, BasicBolt])
@pytest.mark.parametrize("target", ["mid", "wc.acks", "wc.failures"])
def test_a_bolt_that_emits_to_its_source_or_a_topology_topic_stops_before_sending(kafka, bolt_class, target):
    ListSource(kafka, "lines", [b"a"])
    acker = _acker(kafka)
    spout = _spout(kafka)
    spout.start()

    def handler(tuple_, collector):
        collector.emit(target, b"x", anchors=tuple_)
        if bolt_class is Bolt:
            collector.ack(tuple_)

    bolt = bolt_class(
        topology="wc",
        connection=Connection("memory", clients=kafka),
        loop=Loop(commit_interval_ms=0),
        source_topics="mid",
        group_id="wc.bolt",
        handler=handler,
    )
    bolt.start()
    with pytest.raises(OutputRefused, match=f"may not emit to '{target}'"):
        step_until(lambda: False, spout, bolt, acker, max_rounds=50)
    assert b"x" not in [m.value() for m in TopicSink(kafka, target).messages()], "nothing was sent there"


def test_a_bolt_emits_to_its_own_outputs_as_before(kafka):
    kafka.create_topic("out", 1)
    ListSource(kafka, "lines", [b"a", b"b"])
    acker = _acker(kafka)
    spout = _spout(kafka)

    def handler(tuple_, collector):
        collector.emit("out", tuple_.value)

    bolt = BasicBolt(
        topology="wc",
        connection=Connection("memory", clients=kafka),
        loop=Loop(commit_interval_ms=0),
        source_topics="mid",
        group_id="wc.bolt",
        handler=handler,
    )
    for component in (spout, bolt):
        component.start()
    step_until(lambda: len(TopicSink(kafka, "out").messages()) == 2, spout, bolt, acker)
    assert sorted(m.value() for m in TopicSink(kafka, "out").messages()) == [b"a", b"b"]


def test_emit_to_a_topology_topic_or_the_source_is_refused_at_construction(kafka):
    with pytest.raises(ConfigError, match="emit_to 'wc.acks' is a topic of topology 'wc'"):
        _spout(kafka, emit_to="wc.acks")
    with pytest.raises(ConfigError, match="emit_to 'lines' is this component's own source"):
        _spout(kafka, emit_to="lines")


def test_a_missing_emit_to_is_said_at_start(kafka, caplog):
    _acker(kafka)
    spout = _spout(kafka, emit_to="mdi")  # a typo of "mid"
    with caplog.at_level(logging.WARNING):
        spout.start()
    assert spout.emit_to_missing
    assert "emit_to topic 'mdi' does not exist" in caplog.text and "typo" in caplog.text
    caplog.clear()
    existing = _spout(kafka)
    with caplog.at_level(logging.WARNING):
        existing.start()
    assert not existing.emit_to_missing and "does not exist" not in caplog.text


def test_the_dead_letter_guard_is_on_by_default(kafka):
    spout = _spout(kafka)
    assert (spout.max_dead_letter_ratio, spout.dead_letter_window) == (DEAD_LETTER_RATIO, DEAD_LETTER_WINDOW)
    assert (DEAD_LETTER_RATIO, DEAD_LETTER_WINDOW) == (0.5, 200)
    assert _spout(kafka, max_dead_letter_ratio=None).max_dead_letter_ratio is None, "None still turns it off"


def test_status_shows_why_a_component_stopped_itself(kafka):
    from reliable_kafka.ops.status import judge_snapshot

    spout = _spout(kafka)
    assert spout.stopped_by is None
    judged = judge_snapshot({"state": "stopped", "history": [], "stopped_by": "guard tripped"}, now=0.0)
    assert judged.reason == "stopped: guard tripped"
    assert judge_snapshot({"state": "stopped", "history": []}, now=0.0).reason == "stopped cleanly"
