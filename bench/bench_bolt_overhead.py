"""A basic bolt's own CPU per received tuple, without a broker: the word count's count bolt
(handler: one dict increment; also as a ``batch_handler``) over batches of consumed messages,
tracked (one ``rk-anchors`` pair, acked) and untracked, plus the ack records' encoding per batch;
and the split bolt's (8 anchored emits per received tuple, to a producer that drops them), per
emitted tuple.

Each figure is microseconds of CPU time of this process per tuple, best of ``--repeat`` rounds;
``bare`` is the same handler called in a plain loop over the same messages (what any consumer
pays). Prints figures, asserts nothing. Usage: ``./rk bench bolt_overhead [--batches N]``.
Compare versions by running this file with ``PYTHONPATH`` set to another checkout.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from reliable_kafka import codec
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.ids import new_id
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.testing.memory_broker import new_message

BATCH = 500
WORDS = [b"w%03d" % i for i in range(8)]


class _NullProducer:
    """Takes ack records and drops them (the figure is the bolt's Python, not librdkafka's)."""

    def produce(self, *args, **kwargs) -> None:
        pass


def _messages(tracked: bool) -> list:
    words = [b"w%d" % (i % 50) for i in range(BATCH)]
    return [
        new_message(
            topic="words",
            partition=0,
            offset=i,
            key=word,
            value=b"0 1.0",
            headers=[(codec.ANCHORS_HEADER, codec.encode_anchors({new_id(): new_id()}))] if tracked else None,
            timestamp=(1, 1),
        )
        for i, word in enumerate(words)
    ]


def _bolt(counts, *, split: bool = False, together: bool = False) -> BasicBolt:
    def count(word, collector) -> None:
        counts[word.key] += 1

    def count_batch(words, collector) -> None:  # the same count as a batch_handler
        for key in words.keys():
            counts[key] += 1

    def split_words(sentence, collector) -> None:
        for word in WORDS:
            collector.emit("words", sentence.value, key=word)

    bolt = BasicBolt(
        topology="bench",
        bootstrap_servers="unused:9092",
        source_topics="words",
        group_id="bench",
        **({"batch_handler": count_batch} if together else {"handler": split_words if split else count}),
    )
    producer: Any = _NullProducer()  # the Producer's produce() without librdkafka
    bolt._producer = producer
    bolt._acks = AckSender(producer, acks_topic="bench.acks", ack_partitions=1, sender=1)
    bolt._ends = {}
    return bolt


def per_tuple_us(run, batches: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(batches):
            run()
        best = min(best, time.process_time() - start)
    return best / (batches * BATCH) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    counts: dict[bytes, int] = defaultdict(int)
    bolt = _bolt(counts)
    try:  # a checkout from before batch_handler has none
        batch_bolt: BasicBolt | None = _bolt(counts, together=True)
    except TypeError:
        batch_bolt = None
    process = getattr(bolt, "_process_batch", None)
    acks = bolt._acks
    assert acks is not None
    print("us of CPU per tuple (best of rounds); the machine is shared, so figures wander")
    for tracked in (False, True):
        messages = _messages(tracked)

        def bare(messages=messages) -> None:
            for message in messages:
                counts[message.key()] += 1

        def ours(messages=messages) -> None:
            if process is not None:
                process(messages)
            else:  # a checkout from before _process_batch
                for message in messages:
                    bolt._process(message)
            acks.send()

        together: Callable[[], None] | None = None
        if batch_bolt is not None:
            batch_acks = batch_bolt._acks
            assert batch_acks is not None

            def batched(messages=messages, process=batch_bolt._process_batch, acks=batch_acks) -> None:
                process(messages)
                acks.send()

            together = batched

        label = "tracked" if tracked else "untracked"
        print(
            f"{label:>10}: bolt {per_tuple_us(ours, args.batches, args.repeat):6.2f}"
            f"   bare loop {per_tuple_us(bare, args.batches, args.repeat):6.2f}"
            + (f"   batch_handler {per_tuple_us(together, args.batches, args.repeat):6.2f}" if together else "")
        )
    splitter = _bolt(counts, split=True)
    split_process = splitter._process_batch
    split_acks = splitter._acks
    assert split_acks is not None
    for tracked in (False, True):
        messages = _messages(tracked)

        def split_batch(messages=messages) -> None:
            split_process(messages)
            split_acks.send()

        per_input = per_tuple_us(split_batch, max(1, args.batches // 8), args.repeat)
        label = "tracked" if tracked else "untracked"
        print(f"     split: {per_input / len(WORDS):6.2f} per emitted tuple (8 per {label} input)")


if __name__ == "__main__":
    main()
