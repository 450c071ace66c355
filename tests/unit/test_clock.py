"""Components read time only through their ``clock=``: the time module, or a ManualClock a test moves.

A tree whose tuple nobody reads is timed out by the acker, redelivered after the spout's backoff and
then dead-lettered: all on a ManualClock that starts years before today's wall time and moves only
when the test moves it, so each step shows which clock the component read.
"""

from __future__ import annotations

import time

from reliable_kafka import Connection, Loop, Tracking, codec
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.bolt.runner import BasicBolt
from reliable_kafka.core.clock import monotonic_ms
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.ops.failures import FailureRecord, decode_failure
from reliable_kafka.spout.spout import Spout
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink, step_until

START_MS = 1_000_000_000_000  # 2001: far from any wall clock of today
TIMEOUT_MS = 600_000  # ten minutes: a component on the wall clock would never see it pass here


def test_monotonic_ms_of_a_manual_clock_is_its_milliseconds_exactly():
    clock = ManualClock(start_ms=1_700_000_000_123)
    ms = monotonic_ms(clock)
    for step in (0, 1, 999, 1, 12_345):
        clock.advance(step)
        assert ms() == clock.now_ms
    assert abs(monotonic_ms()() - time.monotonic() * 1000) < 1000  # the time module's, in integer ms


def test_a_manual_clock_moves_when_a_component_sleeps_on_it():
    clock = ManualClock(start_ms=5_000)
    assert (clock.time(), clock.monotonic()) == (5.0, 5.0)
    clock.sleep(0.25)
    assert clock() == 5_250


def _on_one_clock() -> tuple[ManualClock, MemoryKafka, dict]:
    """A ManualClock, a MemoryKafka on it, and the keywords that put a component on both."""
    clock = ManualClock(start_ms=START_MS)
    kafka = MemoryKafka(clock=clock)
    return (
        clock,
        kafka,
        {
            "topology": "c",
            "connection": Connection("memory", clients=kafka),
            "loop": Loop(clock=clock),
        },
    )


def test_the_acker_times_out_and_the_spout_redelivers_and_dead_letters_on_their_clock():
    clock, kafka, on = _on_one_clock()
    kafka.create_topic("sentences")
    ListSource(kafka, "lines", [b"nobody reads this"])
    acker = AckerWorker(**on, tracking=Tracking(message_timeout_ms=TIMEOUT_MS))
    acker.start()
    spout = Spout(
        **on,
        source_topics="lines",
        group_id="c.spout",
        emit_to="sentences",
        tracking=Tracking(
            max_retries=1,
            backoff=Backoff(initial_ms=TIMEOUT_MS, max_ms=TIMEOUT_MS),
            message_timeout_ms=TIMEOUT_MS,
            backstop_grace_ms=TIMEOUT_MS,
            root_index=False,
        ),
    )
    spout.start()
    step_until(lambda: spout.stats.emitted == 1, spout, acker)
    for _ in range(20):  # real time passes, the clock does not: nothing times out
        spout.poll_once(0)
        acker.poll_once(0)
    assert acker.stats.timed_out == 0 and spout.tracker.stats.timed_out == 0

    # past the acker's timeout (its last bucket included), short of the spout's backstop
    clock.advance(TIMEOUT_MS * 5 // 4 + 1_000)
    step_until(lambda: spout.tracker.stats.timed_out == 1, spout, acker)
    assert spout.tracker.stats.backstop_expired == 0 and spout.stats.replayed == 0

    clock.advance(TIMEOUT_MS)  # the backoff: the redelivery is due now, on the spout's clock
    step_until(lambda: spout.stats.replayed == 1, spout, acker)
    clock.advance(TIMEOUT_MS * 5 // 4 + 1_000)  # the second attempt times out as well: retries spent
    step_until(lambda: spout.stats.dead_lettered == 1, spout, acker)

    [parked] = TopicSink(kafka, "c.dlq").messages()
    header = codec.decode_parked(dict(parked.headers())[codec.PARKED_HEADER])
    assert header.parked_at_ms == clock.now_ms  # stamped by the spout's clock, not the wall clock


def test_a_bolt_stamps_its_failure_records_with_its_clock():
    clock, kafka, on = _on_one_clock()
    AckerWorker(**on).start()
    ListSource(kafka, "words", [{"value": b"bad", "headers": [(codec.ANCHORS_HEADER, codec.encode_anchors({7: 9}))]}])

    def refuse(tuple_, collector):
        raise ValueError("not a word")

    options = {**on, "loop": Loop(commit_interval_ms=0, clock=clock)}
    bolt = BasicBolt(**options, source_topics="words", group_id="c.bolt", handler=refuse)
    bolt.start()
    step_until(lambda: bolt.stats.handler_errors == 1, bolt)
    bolt.poll_once(0)  # flushes the failure record with the commit
    [record] = [decode_failure(m.value()) for m in TopicSink(kafka, "c.failures").messages()]
    assert record is not None and record.at_ms == START_MS
    assert FailureRecord.of(roots=[1], component="b", clock=clock).at_ms == START_MS
