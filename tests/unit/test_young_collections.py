"""With ``RK_GC_YOUNG_THRESHOLD`` set, the shared worker loop raises CPython's young-generation GC
threshold while it runs, for every worker loop of the process together, and gives the process its
own threshold back afterwards; unset (the default), it leaves the process's threshold alone."""

from __future__ import annotations

import gc
import threading

import pytest

from reliable_kafka import lifecycle
from reliable_kafka.errors import ConfigError
from reliable_kafka.lifecycle import YOUNG_GC_ENV, run_until_stopped

RAISED = 50_000


class _Worker:
    """Notes the GC threshold in each poll; stops itself after ``polls`` polls."""

    def __init__(self, stop: threading.Event, polls: int = 3, started=None, release=None) -> None:
        self.stop, self.polls = stop, polls
        self.seen: list[int] = []
        self.stats = None
        self.started, self.release = started, release

    def start(self) -> None:
        pass

    def poll_once(self) -> None:
        self.seen.append(gc.get_threshold()[0])
        if self.started is not None:
            self.started.set()
            assert self.release is not None
            self.release.wait(10)
        if len(self.seen) >= self.polls:
            self.stop.set()

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _thresholds(monkeypatch):
    monkeypatch.setenv(YOUNG_GC_ENV, str(RAISED))
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_the_loop_raises_the_young_threshold_and_restores_it_after(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    stop = threading.Event()
    worker = _Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)
    assert worker.seen == [RAISED] * 3
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_none_configured_is_left_alone(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    gc.set_threshold(100_000, 10, 10)
    stop = threading.Event()
    worker = _Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)
    assert worker.seen == [100_000] * 3 and gc.get_threshold() == (100_000, 10, 10)
    gc.set_threshold(700, 10, 10)
    monkeypatch.delenv(YOUNG_GC_ENV)
    stop = threading.Event()
    worker = _Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)
    assert worker.seen == [700] * 3


def test_threads_share_the_raise_and_the_last_loop_to_end_restores(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    first_stop, second_stop = threading.Event(), threading.Event()
    started, release = threading.Event(), threading.Event()
    first = _Worker(first_stop, polls=1, started=started, release=release)
    thread = threading.Thread(target=run_until_stopped, args=(first, first_stop), kwargs={"handle_signals": False})
    thread.start()
    assert started.wait(10), "the first worker loop did not start"
    second = _Worker(second_stop, polls=2)
    run_until_stopped(second, second_stop, handle_signals=False)  # ends while the first still runs
    assert gc.get_threshold()[0] == RAISED
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert first.seen == [RAISED] and second.seen == [RAISED] * 2
    assert gc.get_threshold() == (700, 10, 10)


def test_a_threshold_set_while_running_is_kept(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    stop = threading.Event()

    class _Tuner(_Worker):
        def poll_once(self) -> None:
            gc.set_threshold(5_000, 10, 10)  # the application's own choice, made while the loop runs
            stop.set()

    run_until_stopped(_Tuner(stop), stop, handle_signals=False)
    assert gc.get_threshold() == (5_000, 10, 10)


def test_unset_by_default_the_loop_leaves_the_threshold_alone(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    monkeypatch.delenv(YOUNG_GC_ENV)
    stop = threading.Event()
    worker = _Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)
    assert worker.seen == [700] * 3 and gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("value", ["many", "0", "-5", "1.5"])
def test_a_malformed_setting_fails_before_the_worker_starts(monkeypatch, value):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    monkeypatch.setenv(YOUNG_GC_ENV, value)
    started = []
    worker = _Worker(threading.Event())
    worker.start = lambda: started.append(True)  # type: ignore[method-assign]
    with pytest.raises(ConfigError, match=YOUNG_GC_ENV):
        run_until_stopped(worker, threading.Event(), handle_signals=False)
    assert not started
