"""The shared worker loop raises CPython's young-generation GC threshold while it runs, for every
worker loop of the process together, and gives the process its own threshold back afterwards."""

from __future__ import annotations

import gc
import threading

import pytest

from reliable_kafka import lifecycle
from reliable_kafka.lifecycle import run_until_stopped


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
def _thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_the_loop_raises_the_young_threshold_and_restores_it_after(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    stop = threading.Event()
    worker = _Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)
    assert worker.seen == [lifecycle.YOUNG_GC_THRESHOLD] * 3
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_none_configured_is_left_alone(monkeypatch):
    monkeypatch.setattr(lifecycle.ops_reporter, "attach", lambda worker: None)
    gc.set_threshold(100_000, 10, 10)
    stop = threading.Event()
    worker = _Worker(stop)
    run_until_stopped(worker, stop, handle_signals=False)
    assert worker.seen == [100_000] * 3 and gc.get_threshold() == (100_000, 10, 10)
    gc.set_threshold(700, 10, 10)
    monkeypatch.setattr(lifecycle, "YOUNG_GC_THRESHOLD", None)
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
    assert gc.get_threshold()[0] == lifecycle.YOUNG_GC_THRESHOLD
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert first.seen == [lifecycle.YOUNG_GC_THRESHOLD] and second.seen == [lifecycle.YOUNG_GC_THRESHOLD] * 2
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
