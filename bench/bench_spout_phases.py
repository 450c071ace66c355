"""Where the tracked spout's CPU goes in the word-count pipeline: ``bench_pipeline``'s run, with the
tracked spout's phases timed (thread CPU, ``time.thread_time``) and every thread of its process
read from ``/proc`` over the spout's life, each librdkafka thread named by the client that made it.

Printed by each tracked spout process when it closes (the warm-up bursts' too), per root:
the spout thread, and each phase of ``poll_once`` (acting on outcomes, of it the outcome consume
and decode; the consumed batch: forward, track, INIT entries; the source consume; the INIT record;
the flush; commits ...); the rounds that found neither a record nor an outcome ("idle": the
spout waits up to 2 ms for records while trees are pending), their count and CPU a round with
their parts; then every thread's CPU in ms over the spout's life. The timers cost about 0.8 us
each (two a phase): idle rounds read about 20 us high. Prints figures, asserts nothing.

Usage: ``./rk bench spout_phases [bench_pipeline arguments]``, e.g.
``./rk bench spout_phases --no-latency --no-threads --configs tracked --sentences 20000 --rounds 2``.
``RK_SPOUT_PRODUCER_CONFIG='{"linger.ms": 5}'`` overrides the spout producer's settings.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_pipeline as pipeline  # noqa: E402  (a sibling file, found by the line above)

_CLIENT_THREADS: dict[int, str] = {}  # tid -> the client that made it (spawned per process)
_PHASES = {
    "take_outcomes": "acting on outcomes (all)",
    "poll_batches": "  of it: outcome consume + decode",
    "_process_messages": "consumed batch (forward, track, INIT entries)",
    "consume_batch": "source consume (with the wait)",
    "send": "INIT record",
    "send_polled": "flush (send_polled)",
    "_commit": "commit",
    "_redeliver_due": "redeliveries due",
    "_apply_backpressure": "backpressure",
    "send_due": "root index",
}


def _thread_cpu() -> dict[int, tuple[str, float]]:
    """tid -> (thread name, CPU s) of this process's threads."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        found[int(tid)] = (stat[stat.index("(") + 1 : stat.rindex(")")], cpu)
    return found


def _naming(make, client: str):
    """``make`` (a client factory) that notes the threads the client starts (its broker threads
    come once it has metadata: a second's wait, at start only)."""

    def made(*args, **kwargs):
        if client == "producer" and os.environ.get("RK_SPOUT_PRODUCER_CONFIG"):
            kwargs.update(json.loads(os.environ["RK_SPOUT_PRODUCER_CONFIG"]))
        before = set(_thread_cpu())
        made_client = make(*args, **kwargs)
        time.sleep(1.0)
        _CLIENT_THREADS.update(dict.fromkeys(set(_thread_cpu()) - before, client))
        return made_client

    return made


def _timed(function, spent: dict[str, float], phase: str):
    clock = time.thread_time

    def timed(*args, **kwargs):
        started = clock()
        try:
            return function(*args, **kwargs)
        finally:
            spent[phase] += clock() - started

    return timed


def _largest_first(spent: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(spent.items(), key=lambda item: -item[1])


_tracked_spout_class = pipeline._tracked_spout_class


def _phased_spout_class(hops: bool = False):
    import reliable_kafka.kafka.outcomes as outcomes
    import reliable_kafka.spout.shell as shell
    import reliable_kafka.spout.spout as spout_module

    if not getattr(shell, "_threads_named", False):
        shell._threads_named = True  # type: ignore[attr-defined]
        # patches the names shell.py and outcomes.py imported (mypy sees no re-export)
        shell.new_producer = _naming(shell.new_producer, "producer")  # type: ignore[attr-defined]
        shell.new_consumer = _naming(shell.new_consumer, "source consumer")  # type: ignore[attr-defined]
        outcomes.new_consumer = _naming(outcomes.new_consumer, "outcome consumer")  # type: ignore[attr-defined]

    class PhasedSpout(_tracked_spout_class(hops)):  # type: ignore[misc]
        def start(self) -> None:
            super().start()
            self._spent: dict[str, float] = collections.defaultdict(float)
            self._idle_spent: dict[str, float] = collections.defaultdict(float)
            self._rounds = self._idle_rounds = 0
            spent, roots = self._spent, self._roots
            for owner, name in (
                (roots, "take_outcomes"),
                (roots.listener, "poll_batches"),
                (self, "_process_messages"),
                (self._acks, "send"),
                (self, "_commit"),
                (self, "_redeliver_due"),
                (self, "_apply_backpressure"),
                (roots.root_index, "send_due"),
            ):
                if owner is not None:
                    setattr(owner, name, _timed(getattr(owner, name), spent, _PHASES[name]))
            for name in ("consume_batch", "send_polled"):
                setattr(spout_module, name, _timed(getattr(spout_module, name), spent, _PHASES[name]))
            self._tid = threading.get_native_id()
            self._threads_at_start = _thread_cpu()
            self._cpu_at_start = time.thread_time()

        def poll_once(self, timeout: float = 0.1) -> None:
            before, read, completed = dict(self._spent), self.stats.read, self.stats.completed
            started = time.thread_time()
            try:
                super().poll_once(timeout)
            finally:
                self._spent["poll_once"] += time.thread_time() - started
                self._rounds += 1
                if self.stats.read == read and self.stats.completed == completed:
                    self._idle_rounds += 1
                    for phase, spent in self._spent.items():
                        self._idle_spent[phase] += spent - before.get(phase, 0.0)

        def close(self) -> None:
            thread = time.thread_time() - self._cpu_at_start
            threads = _thread_cpu()
            super().close()
            roots = max(1, self.stats.emitted)
            lines = [
                f"spout phases: {roots} roots, {self._rounds} rounds ({self._idle_rounds} idle); "
                f"spout thread {thread / roots * 1e6:.2f} us a root"
            ]
            for phase, spent in _largest_first(self._spent):
                lines.append(f"  {phase:<48} {spent / roots * 1e6:6.2f} us a root")
            idle = max(1, self._idle_rounds)
            lines.append(
                f"  idle rounds: {self._idle_spent['poll_once'] / idle * 1e6:.0f} us a round, "
                f"{self._idle_spent['poll_once'] / roots * 1e6:.2f} us a root; a round's parts: "
                + ", ".join(
                    f"{phase.strip()} {spent / idle * 1e6:.1f}"
                    for phase, spent in _largest_first(self._idle_spent)
                    if phase != "poll_once"
                )
            )
            used = []
            for tid, (name, cpu) in sorted(threads.items()):
                delta = cpu - self._threads_at_start.get(tid, (name, 0.0))[1]
                if delta > 0:
                    owner = "spout thread" if tid == self._tid else _CLIENT_THREADS.get(tid, "")
                    used.append(f"{name}{f' ({owner})' if owner else ''} {delta * 1000:.0f}")
            lines.append("  threads over the spout's life, CPU ms: " + ", ".join(used))
            print("\n".join(lines), file=sys.stderr, flush=True)

    return PhasedSpout


# module level: the spawned component processes import this file as their main module too
pipeline._tracked_spout_class = _phased_spout_class

if __name__ == "__main__":
    pipeline.main()
