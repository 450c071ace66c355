"""The transaction helper's policy: when an abort is enough and when only a new producer helps.

A recording stand-in for the producer: only the calls and the errors they raise matter here (the
transactional spout and bolts run it against the broker in tests/integration)."""

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from reliable_kafka.kafka.transactions import StuckCall, Transactions


class Producer:
    def __init__(self, number: int, abort_error: KafkaError | None = None) -> None:
        self.number = number
        self.calls: list[str] = []
        self.abort_error = abort_error
        self.begin_error: KafkaError | None = None
        self.block_commit = threading.Event()  # set: commit_transaction never returns
        self.released = threading.Event()

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")
        if self.begin_error is not None:
            raise KafkaException(self.begin_error)

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append("send_offsets")

    def commit_transaction(self, timeout):
        self.calls.append("commit")
        if self.block_commit.is_set():
            self.released.wait(5)

    def abort_transaction(self, timeout):
        self.calls.append("abort")
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)


def _helper(**producer_options):
    made: list[Producer] = []
    handed: list[Producer] = []

    def new_producer():
        made.append(Producer(len(made), **producer_options))
        return made[-1]

    helper = Transactions(new_producer, component="t", on_new_producer=handed.append, deadline_s=0.5)
    helper.start()
    return helper, made, handed


RETRIABLE = KafkaException(KafkaError(KafkaError._TIMED_OUT, "coordinator slow", retriable=True))
FENCED = KafkaError(KafkaError._FENCED, "fenced", fatal=True)


def test_start_inits_transactions_and_hands_the_producer_over():
    helper, made, handed = _helper()
    assert made[0].calls == ["init"] and handed == made and helper.producer is made[0]


def test_a_commit_adds_the_offsets_then_commits():
    helper, made, _ = _helper()
    helper.begin()
    helper.commit([], "group")
    assert made[0].calls == ["init", "begin", "send_offsets", "commit"] and helper.committed == 1


def test_one_retriable_failure_aborts_a_second_in_a_row_replaces_the_producer():
    helper, made, handed = _helper()
    assert helper.abort(RETRIABLE) is False and made[0].calls[-1] == "abort" and len(made) == 1
    assert helper.abort(RETRIABLE) is True and len(made) == 2 and handed[-1] is made[1]
    assert helper.producer is made[1] and made[1].calls == ["init"], "the new producer fences the old one"


def test_a_commit_in_between_resets_the_count():
    helper, made, _ = _helper()
    helper.abort(RETRIABLE)
    helper.begin()
    helper.commit([], "group")
    assert helper.abort(RETRIABLE) is False and len(made) == 1


def test_fatal_errors_and_stuck_calls_get_a_new_producer_without_an_abort():
    helper, made, _ = _helper()
    assert helper.abort(KafkaException(FENCED)) is True and "abort" not in made[0].calls
    assert helper.abort(StuckCall("commit_transaction did not return")) is True
    assert len(made) == 3 and helper.producers_replaced == 2


def test_fenced_while_aborting_gets_a_new_producer_and_other_abort_errors_are_raised():
    helper, made, _ = _helper(abort_error=FENCED)
    assert helper.abort(RETRIABLE) is True and len(made) == 2
    helper, made, _ = _helper(abort_error=KafkaError(KafkaError._INVALID_ARG, "bug"))
    with pytest.raises(KafkaException):
        helper.abort(RETRIABLE)


def test_a_commit_that_does_not_return_raises_stuck_call():
    helper, made, _ = _helper()
    made[0].block_commit.set()
    helper.begin()
    try:
        with pytest.raises(StuckCall):
            helper.commit([], "group")
    finally:
        made[0].released.set()
    assert helper.abort(StuckCall("stuck")) is True and helper.producer is made[1]


def test_a_producer_gone_fatal_between_transactions_is_replaced_before_the_next_begins():
    helper, made, handed = _helper()
    made[0].begin_error = FENCED
    helper.begin()
    assert len(made) == 2 and handed == made and helper.producer is made[1]
    assert made[1].calls == ["init", "begin"] and helper.producers_replaced == 1


def test_a_begin_that_fails_without_a_fatal_error_is_raised_to_the_caller():
    helper, made, _ = _helper()
    made[0].begin_error = KafkaError(KafkaError._STATE, "not ready")
    with pytest.raises(KafkaException):
        helper.begin()
    assert len(made) == 1
