"""The Python spout's per-root path without Kafka (issue 11, target 1): a consumed batch forwarded by
the default handler, tracked, and, a few batches later, its outcome batch (all COMPLETED) acted on,
as ``Spout.poll_once`` does, with a RecordingProducer and no broker. Prints CPU us per root, median
of ``--repeats``, for the plain spout and one with a completion hook like bench_pipeline's.
Runs on code before ``complete_runs`` too (it then acts as that code did), for side-by-side runs.
Prints figures, asserts nothing.

Usage: ``PYTHONPATH=. python bench/bench_spout_path.py [--roots 60000] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, cast

from reliable_kafka import Tracking
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.spout import Spout
from reliable_kafka.testing.memory_broker import new_message
from reliable_kafka.testing.recording_producer import RecordingProducer

OUTCOME_LAG = 5  # batches in flight before the first outcome batch comes back


class HookedSpout(Spout):
    """With a per-batch completion hook that reads each record's value, as bench_pipeline's does."""

    def _completed_many(self, records) -> None:
        for record in records:
            record.value.split(b" ", 2)


def _spout(spout_class) -> tuple[Spout, RecordingProducer]:
    producer = RecordingProducer()
    spout = spout_class(
        topology="t",
        connection="127.0.0.1:1",
        tracking=Tracking(max_pending=None),
        source_topics="src",
        group_id="g",
        emit_to="out",
    )
    spout._producer = producer
    spout._acks = AckSender(cast(Any, producer), acks_topic="t.acks", ack_partitions=1, sender=spout.task_id)
    spout.tracker.assign(("src", 0), committed=0)
    return spout, producer


def us_per_root(spout_class, batch: int, roots: int) -> float:
    spout, producer = _spout(spout_class)
    owner, tracker = spout._roots, spout.tracker
    in_columns = hasattr(tracker, "complete_runs")
    offset, queue, cpu = 0, [], 0.0
    for round_ in range(roots // batch):
        messages = [
            new_message(topic="src", partition=0, offset=o, key=None, value=b"0 1 the cow", headers=None)
            for o in range(offset, offset + batch)
        ]
        offset += batch
        started = time.process_time()
        spout._process_messages(messages)
        assert spout._acks is not None  # set by _spout
        [(_, batch_roots, _)] = spout._acks._packer.drain().values()
        queue.append(batch_roots.tolist())
        if len(queue) > OUTCOME_LAG:
            done = queue.pop(0)
            if in_columns:
                owner._done_runs(tracker.complete_runs(done))
            else:
                cast(Any, owner)._done_many(tracker.complete_many(done))  # the code before complete_runs
        if round_ % 25 == 0:
            tracker.commit_points()  # about once a second in the pipeline
        cpu += time.process_time() - started
        producer.sent.clear()
    return cpu / (roots // batch * batch) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for spout_class in (Spout, HookedSpout):
        for batch in (40, 500):
            values = [us_per_root(spout_class, batch, args.roots) for _ in range(args.repeats)]
            print(
                f"{spout_class.__name__:<11} batch {batch:>3}: {statistics.median(values):5.2f} CPU us per root "
                f"(median of {args.repeats}; {min(values):.2f} to {max(values):.2f})"
            )


if __name__ == "__main__":
    main()
