"""The root-owning core every spout composes: outcomes, dead letters, their guard, commit points.

Driven with plain data and a recording producer (dead letters are only produced, never read back):
no broker, no listener.
"""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER
from reliable_kafka.config import Connection, Tracking
from reliable_kafka.core.commit_metadata import decode_done_above
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.tracker import Backoff, InFlightTracker
from reliable_kafka.errors import ArgumentError, ConfigError, DeadLetterGuardTripped
from reliable_kafka.ops.failures import FailureRecord, decode_attempts
from reliable_kafka.spout.roots import RootOwner
from reliable_kafka.testing import ManualClock
from reliable_kafka.topology import TopologyTopics

TP = ("src", 0)


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None = b"k"
    value: bytes | None = b"v"
    headers: list | None = None
    timestamp_ms: int = 1


class RecordingProducer:
    """Keeps what is produced; ``fail_next`` delivery reports an error for the next writes."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.fail_next = 0
        self.queued = 0  # what flush() reports as still queued

    def produce(self, topic, value, key=None, headers=None, on_delivery=None, **_):
        self.sent.append({"topic": topic, "value": value, "key": key, "headers": dict(headers or [])})
        if self.fail_next:
            self.fail_next -= 1
            on_delivery(_Error(), None)

    def flush(self, timeout=None) -> int:
        return self.queued


class _Error:
    def code(self):
        return -1

    def __str__(self):
        return "broker away"


def _owner(*, max_retries=5, ratio=None, window=1000, reread=None):
    owner = RootOwner(
        component="spout-t",
        topics=TopologyTopics("t"),
        connection=Connection("-"),
        tracking=Tracking(
            max_retries=max_retries,
            backoff=Backoff(initial_ms=0),
            max_dead_letter_ratio=ratio,
            dead_letter_window=window,
        ),
        clock=ManualClock(),
        reread=reread,
        read_failure_reasons=False,
    )  # no broker here: reasons come from local failures
    owner.use_producer(RecordingProducer())
    owner.restore(TP, 0, None)
    return owner


def _emit(owner, offset, root, attempt=1, *, keep=True):
    owner.track(TP, offset, root, attempt, Record(*TP, offset) if keep else None)


def test_a_poison_pill_is_dead_lettered_at_once_with_its_reason_and_done_only_once_confirmed():
    owner = _owner(max_retries=5)
    _emit(owner, 0, root=7)
    owner.fail_locally(7, FailureRecord.of(roots=[7], component="checker", reason="not a number", retry=False))
    assert owner.write_dead_letters() == 1
    [letter] = owner.producer.sent
    parked = codec.decode_parked(letter["headers"][codec.PARKED_HEADER])
    assert "POISON_PILL" in parked.reason and parked.attempts == 1 and parked.source_offset == 0
    assert letter["headers"][REASON_HEADER] == b"not a number"
    assert [a.attempt for a in decode_attempts(letter["headers"][ATTEMPTS_HEADER])] == [1]
    assert owner.offsets_to_commit() == [], "not committed past before the broker confirmed the write"
    owner.producer.queued = 1
    assert not owner.confirm_dead_letters(0.0) and owner.dead_letters_waiting
    owner.producer.queued = 0
    assert owner.confirm_dead_letters(0.0)
    assert owner.stats.dead_lettered == 1 and [tp.offset for tp in owner.offsets_to_commit()] == [1]


def test_a_dead_letter_whose_write_failed_is_written_again_and_blocks_the_commit_until_then():
    owner = _owner(max_retries=0)
    _emit(owner, 0, root=7)
    owner.on_outcome(7, OutcomeKind.TIMED_OUT)
    owner.producer.fail_next = 1
    owner.write_dead_letters()
    owner.confirm_dead_letters(0.0)
    assert owner.stats.dead_lettered == 0 and owner.dead_letters_waiting and owner.offsets_to_commit() == []
    assert owner.write_dead_letters() == 1 and owner.confirm_dead_letters(0.0)
    assert len(owner.producer.sent) == 2 and owner.stats.dead_lettered == 1
    assert (
        codec.decode_parked(owner.producer.sent[1]["headers"][codec.PARKED_HEADER]).reason
        == "TIMED_OUT after 1 attempts"
    )


def test_records_not_held_are_read_again_and_one_kafka_no_longer_has_is_skipped():
    asked = []

    def reread(keys):
        asked.extend(keys)
        owner.records[(TP, 1)] = Record(*TP, 1)  # offset 2 is gone: the reader marked it done
        owner.tracker.done_immediately(TP, 2)

    owner = _owner(max_retries=0, reread=reread)
    for offset, root in ((1, 11), (2, 12)):
        _emit(owner, offset, root, keep=False)
        owner.on_outcome(root, OutcomeKind.FAILED)
    assert owner.write_dead_letters() == 1 and sorted(asked) == [(TP, 1), (TP, 2)]
    assert codec.decode_parked(owner.producer.sent[0]["headers"][codec.PARKED_HEADER]).source_offset == 1


def test_a_failing_reread_keeps_the_dead_letters_bound():
    def reread(keys):
        raise RuntimeError("broker away")

    owner = _owner(max_retries=0, reread=reread)
    _emit(owner, 0, 7, keep=False)
    owner.on_outcome(7, OutcomeKind.FAILED)
    with pytest.raises(RuntimeError):
        owner.write_dead_letters()
    assert owner.bound_for_dead_letters() == [(TP, 0)]


def test_the_guard_trips_on_a_stream_of_dead_letters_and_refuses_the_rest():
    owner = _owner(max_retries=0, ratio=0.2, window=10)
    for offset in range(6):
        _emit(owner, offset, root=100 + offset)
        owner.on_outcome(100 + offset, OutcomeKind.FAILED)
    assert len(owner.bound_for_dead_letters()) == 2, "the one that trips it and every later one are refused"
    with pytest.raises(DeadLetterGuardTripped) as caught:
        owner.raise_if_guard_tripped()
    assert caught.value.dead_letters == 3 and caught.value.window == 10 and "dlq list" in str(caught.value)


def test_the_guard_lets_a_trickle_through():
    owner = _owner(max_retries=0, ratio=0.2, window=10)
    for offset in range(40):
        _emit(owner, offset, root=100 + offset)
        kind = OutcomeKind.FAILED if offset % 10 == 0 else OutcomeKind.COMPLETED
        owner.on_outcome(100 + offset, kind)
    owner.raise_if_guard_tripped()
    assert len(owner.bound_for_dead_letters()) == 4


def test_the_owner_builds_its_tracker_from_tracking_and_times_it_on_its_clock():
    clock = ManualClock(start_ms=0)
    tracking = Tracking(max_pending=2, max_retries=0, message_timeout_ms=1_000, backstop_grace_ms=0)
    owner = RootOwner(
        component="c", topics=TopologyTopics("t"), connection=Connection("-"), tracking=tracking, clock=clock
    )
    tracker = owner.tracker
    assert isinstance(tracker, InFlightTracker)
    assert (tracker.max_pending, tracker.max_retries) == (2, 0)
    owner.restore(TP, 0, None)
    owner.track(TP, 0, 7, 1, Record(*TP, 0))
    owner.track(TP, 1, 8, 1, Record(*TP, 1))
    assert tracker.over_max_pending()
    assert tracker.expire_backstop() == []  # timeout + grace not passed yet, on the owner's clock
    clock.advance(1_001)
    assert len(tracker.expire_backstop()) == 2  # the tracker reads the owner's clock


def test_a_spout_reaches_the_tracker_through_its_root_owner():
    from reliable_kafka import Spout

    spout = Spout(topology="t", connection="127.0.0.1:1", source_topics="in", group_id="g", emit_to="out")
    assert spout.tracker is spout._roots.tracker
    assert spout.tracker.max_pending == Tracking().max_pending


def test_guard_settings_are_checked():
    with pytest.raises(ConfigError, match="max_dead_letter_ratio"):
        _owner(ratio=1.0)
    with pytest.raises(ConfigError, match="dead_letter_window"):
        _owner(ratio=0.1, window=0)


def test_commits_carry_done_above_and_only_what_changed():
    owner = _owner()
    for offset in range(4):
        _emit(owner, offset, root=10 + offset)
    for root in (11, 13):
        owner.on_outcome(root, OutcomeKind.COMPLETED)
    [tp] = owner.offsets_to_commit()
    assert tp.offset == 0 and decode_done_above(0, tp.metadata) == [1, 3]
    owner.committed([tp])
    assert owner.offsets_to_commit() == [] and owner.stats.committed == {TP: 0}
    assert len(owner.offsets_to_commit(changed_only=False)) == 1
    owner.forget(TP)
    assert owner.offsets_to_commit() == [] and owner.records == {}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["ok", "fail", "poison", "timeout"])), max_size=60),
    st.integers(0, 2),
)
def test_never_commits_past_a_record_that_is_not_completed_or_confirmed_in_the_dlq(steps, max_retries):
    owner = _owner(max_retries=max_retries)
    roots: dict[int, int] = {}
    settled: set[int] = set()
    next_root = iter(range(1, 10_000))
    for offset in range(8):
        roots[offset] = next(next_root)
        _emit(owner, offset, roots[offset])
    for offset, what in steps:
        root = roots.get(offset)
        if root is None or offset in settled:
            continue
        if what == "ok":
            owner.on_outcome(root, OutcomeKind.COMPLETED)
        elif what == "poison":
            owner.fail_locally(root, FailureRecord.of(roots=[root], component="b", retry=False))
        else:
            owner.on_outcome(root, OutcomeKind.FAILED if what == "fail" else OutcomeKind.TIMED_OUT)
        for redelivery in owner.tracker.due_redeliveries():
            roots[redelivery.offset] = next(next_root)
            _emit(owner, redelivery.offset, roots[redelivery.offset], redelivery.attempt)
        written = {key[1] for key in owner.bound_for_dead_letters()}
        owner.write_dead_letters()
        owner.confirm_dead_letters(0.0)
        settled |= written
        if what == "ok":
            settled.add(offset)
        for tp in owner.offsets_to_commit():
            assert all(o in settled for o in range(tp.offset)), f"committed {tp.offset} past an unsettled record"
            owner.committed([tp])


class _BatchListener:
    """What :meth:`OutcomeListener.poll_batches` gives: ``(roots, kinds)`` per outcome record."""

    def __init__(self, batches) -> None:
        self.batches = batches

    def poll_batches(self, timeout=0.0, *, max_records=500):
        batches, self.batches = self.batches, []
        return [(roots, np.array(kinds, dtype=np.uint8)) for roots, kinds in batches]

    def close(self) -> None:
        pass


_KINDS = [OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.TIMED_OUT, OutcomeKind.RESET_TIMEOUT]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(
        st.lists(st.tuples(st.integers(-1, 11), st.sampled_from([0, 0, 0, 1, 2, 3])), max_size=8),
        max_size=5,
    ),
)
def test_outcome_records_in_columns_act_as_each_outcome_in_order(records, batches):
    # take_outcomes acts on an all-COMPLETED record with one complete_many and on a mixed one run by
    # run: the same as acting on each (root, kind) in order (-1: a root not held)
    by_batch, one_by_one = _owner(max_retries=1), _owner(max_retries=1)
    completed_by_batch: list = []
    completed_one_by_one: list = []
    by_batch._on_completed = completed_by_batch.extend
    one_by_one._on_completed = completed_one_by_one.extend
    roots = {}
    for offset in range(records):
        roots[offset] = by_batch.tracker.emitted(TP, offset)
        one_by_one.tracker.emitted(TP, offset, root=roots[offset])
        by_batch.records[(TP, offset)] = one_by_one.records[(TP, offset)] = Record(TP[0], TP[1], offset)
    by_batch.listener = _BatchListener(
        [([roots.get(offset, 12345) for offset, _ in batch], [kind for _, kind in batch]) for batch in batches]
    )
    by_batch.take_outcomes()
    for batch in batches:
        for offset, kind in batch:
            one_by_one.on_outcome(roots.get(offset, 12345), _KINDS[kind])
    assert by_batch.tracker.stats == one_by_one.tracker.stats
    assert by_batch.stats == one_by_one.stats
    assert by_batch.tracker.commit_points() == one_by_one.tracker.commit_points()
    assert by_batch.tracker.pending_offsets(TP) == one_by_one.tracker.pending_offsets(TP)
    assert [r.offset for r in completed_by_batch] == [r.offset for r in completed_one_by_one]
    assert sorted(by_batch.records) == sorted(one_by_one.records)
    assert [(a.offset, a.kind) for a in by_batch._bound] == [(a.offset, a.kind) for a in one_by_one._bound]
    assert by_batch.tracker.due_redeliveries() == one_by_one.tracker.due_redeliveries()


def test_a_completed_outcome_hands_the_record_kept_with_its_offset_to_the_completion_hook():
    """``on_outcome(root, COMPLETED)`` is done as ``take_outcomes`` does it: the record the tracker
    kept in its columns (``track_many(records=...)``, the default handler's batch path) reaches the hook."""
    owner = _owner()
    completed: list = []
    owner._on_completed = completed.extend
    owner.track_many(TP, [0, 1], [10, 11], 1, [Record(*TP, 0), Record(*TP, 1)])
    owner.on_outcome(11, OutcomeKind.COMPLETED)
    assert [r.offset for r in completed] == [1]
    assert owner.stats.completed == 1 and owner.tracker.pending_offsets(TP) == [0]
    owner.on_outcome(10, int(OutcomeKind.COMPLETED))  # a kind as the decoder's int
    assert [r.offset for r in completed] == [1, 0] and owner.tracker.commit_points() == {TP: 2}
    owner.on_outcome(10, OutcomeKind.COMPLETED)  # again (a replayed acker): nothing held, nothing done
    assert owner.stats.completed == 2 and len(completed) == 2


def test_act_refuses_a_done_action_whose_record_the_tracker_let_go():
    # the tracker's DONE action comes after it dropped the kept record: acting on it would count
    # the root done without the completion hook ever seeing its record
    owner = _owner()
    owner.track_many(TP, [0], [10], 1, [Record(*TP, 0)])
    with pytest.raises(ArgumentError, match="on_outcome"):
        owner.act(owner.tracker.on_outcome(10, OutcomeKind.COMPLETED))
