"""The count bolt of tests/integration/test_parallel_bolt.py, as a process the test can SIGKILL.

``python parallel_bolt_script.py --bootstrap H:P --topology T --words TOPIC --effects TOPIC
--calls FILE [--async] [--mutant NAME]``

Each word tuple's value is ``"<sentence>:<j>"``, its key the word. The handler waits a few ms (a
service call), raises on about 2% of calls at random, and otherwise writes the effect (the value,
unanchored) to the effects topic. Every call appends ``pid key partition offset start end ok`` to
the calls file, where ``start`` and ``end`` are this process's call sequence numbers taken as the
call began and as it ended: per-key order is judged from them.

``--mutant`` makes a deliberately wrong bolt, to show the test's checks can fail:
``unordered`` (``ordering="none"``), ``ack-first`` (a rich Bolt that acks, then writes the effect, 2 s
later for 2% of the tuples), ``drop`` (acks about 1% of tuples without writing their effect).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import threading
import time

from reliable_kafka import Connection, Loop, Parallel
from reliable_kafka.bolt import BasicBolt, Bolt

PARALLELISM = 32
FAILURE_RATE = 0.02
WAIT_S = (0.002, 0.012)


class CallLog:
    """Per-call lines in a file, written at the end of each call (a killed process loses at most the
    calls in flight, whose tuples are replayed anyway)."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1)  # line-buffered: a SIGKILL keeps every finished line
        self.lock = threading.Lock()
        self.sequence = itertools.count()
        self.pid = os.getpid()

    def begin(self) -> int:
        return next(self.sequence)  # itertools.count is atomic under the GIL

    def end(self, tuple_, start: int, ok: bool) -> None:
        key = (tuple_.key or b"").decode()
        line = f"{self.pid} {key} {tuple_.partition} {tuple_.offset} {start} {next(self.sequence)} {int(ok)}\n"
        with self.lock:
            self.file.write(line)


def build(args) -> Bolt:
    calls = CallLog(args.calls)
    effects = args.effects
    on = {
        "topology": args.topology,
        "connection": Connection(
            args.bootstrap, kafka_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
        ),
        "source_topics": args.words,
        "group_id": f"{args.topology}-count",
        "name": "count",
        "loop": Loop(commit_interval_ms=250),
        "parallel": Parallel(PARALLELISM, ordering="none" if args.mutant == "unordered" else "key"),
    }

    def outcome(tuple_, collector) -> None:
        if random.random() < FAILURE_RATE:
            raise RuntimeError(f"the service refused {tuple_.value!r}")
        if args.mutant == "drop" and random.random() < 0.01:
            return
        collector.emit(effects, tuple_.value, key=tuple_.key, anchors=())

    if args.mutant == "ack-first":

        def count_acking_first(tuple_, collector) -> None:
            start, ok = calls.begin(), False
            try:
                time.sleep(random.uniform(*WAIT_S))
                if random.random() < FAILURE_RATE:
                    raise RuntimeError(f"the service refused {tuple_.value!r}")
                collector.ack(tuple_)
                if random.random() < 0.02:  # the tree completes, the spout commits, then the effect exists
                    time.sleep(2.0)
                collector.emit(effects, tuple_.value, key=tuple_.key, anchors=())
                ok = True
            finally:
                calls.end(tuple_, start, ok)

        return Bolt(**on, handler=count_acking_first)

    if args.use_async:

        async def count_async(tuple_, collector) -> None:
            start, ok = calls.begin(), False
            try:
                await asyncio.sleep(random.uniform(*WAIT_S))
                outcome(tuple_, collector)
                ok = True
            finally:
                calls.end(tuple_, start, ok)

        return BasicBolt(**on, handler=count_async)

    def count(tuple_, collector) -> None:
        start, ok = calls.begin(), False
        try:
            time.sleep(random.uniform(*WAIT_S))
            outcome(tuple_, collector)
            ok = True
        finally:
            calls.end(tuple_, start, ok)

    return BasicBolt(**on, handler=count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--words", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--calls", required=True)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--mutant", choices=["unordered", "ack-first", "drop"], default=None)
    args = parser.parse_args()
    build(args).run(handle_signals=True)


if __name__ == "__main__":
    main()
