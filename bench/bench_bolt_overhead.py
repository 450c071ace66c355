"""A basic bolt's own CPU per received tuple, without a broker: the word count's count bolt
(handler: one dict increment; also as a ``batch_handler``) over batches of consumed messages,
tracked (one ``rk-anchors`` pair, acked) and untracked, plus the ack records' encoding per batch;
and the split bolt's (8 anchored emits per received tuple, to a producer that drops them), per
emitted tuple.

Each figure is microseconds of CPU time of this process per tuple, best of ``--repeat`` rounds;
``bare`` is the same handler called in a plain loop over the same messages (what any consumer
pays). Prints figures, asserts nothing. Usage: ``./rk bench bolt_overhead [--batches N]``.
Compare versions by running this file with ``PYTHONPATH`` set to another checkout.

``--broker`` (an embedded broker; or ``--bootstrap-servers H:P``) measures what the in-process
figures leave out: one bolt process reading a prefilled topic (``--records`` words with one
``rk-anchors`` pair each, 8 words a root as the split writes them, or a split's sentences), the
count and split of the word count as ``plain`` confluent-kafka loops (``headers``: the same loop
over the tracked records, reading each one's headers), untracked (``off``) and tracked bolts, each
in a fresh process: us of CPU per input record of the loop's thread and of the whole process
(librdkafka's threads), and where the loop thread's went (consume, the batch loop with the
handler, the ack records, the flush) from ``thread_time`` around each step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reliable_kafka import codec
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.core.ids import new_id
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
            collector.emit("split-words", sentence.value, key=word)  # not its own source: refused

    bolt = BasicBolt(
        topology="bench",
        connection="unused:9092",
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
    parser.add_argument("--broker", action="store_true", help="bolt processes on a real broker (see above)")
    parser.add_argument("--bootstrap-servers", default=None, help="--broker on this broker instead of a new one")
    parser.add_argument("--records", type=int, default=200_000, help="--broker: words read by a count")
    parser.add_argument("--configs", default="plain,headers,off,tracked", help="--broker: of plain,headers,off,tracked")
    parser.add_argument("--roles", default="count,split", help="--broker: of count,split")
    parser.add_argument("--rounds", type=int, default=1, help="--broker: rounds of every role and config")
    args = parser.parse_args()
    if args.broker or args.bootstrap_servers:
        on_broker(args)
        return
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


# --- --broker: one bolt process on a prefilled topic ----------------------------------------------


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads: ``loop`` (the main thread) and librdkafka's, by name."""
    tick = os.sysconf("SC_CLK_TCK")
    figures: dict[str, float] = defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        name = "loop" if int(tid) == os.getpid() else name.split("/")[0].split(":")[0] + ":" + name.split(":")[-1][:5]
        figures[name] += (int(fields[11]) + int(fields[12])) / tick
    return figures


def _split_words(value: bytes) -> tuple[bytes, list[bytes]]:
    parts = value.split(b" ")
    return parts[0] + b" " + parts[1], parts[2:]


def _plain_loop(role: str, topic: str, out_topic: str, records: int, bootstrap: str, headers: bool = False) -> tuple:
    """The word count's plain confluent-kafka loop of ``role`` (bench_pipeline's), default settings;
    ``headers``: on tracked records, and each record's headers read as well (``Message.headers()``:
    what any consumer of a tracked topic pays to look at ``rk-anchors``, before decoding it)."""
    from confluent_kafka import Consumer, Producer

    counts: dict[bytes, int] = defaultdict(int)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"plain-{time.time()}", "auto.offset.reset": "earliest"}
    )
    producer: Any = Producer({"bootstrap.servers": bootstrap}) if role == "split" else None
    consumer.subscribe([topic])
    got, started = 0, None
    while got < records:
        messages: list[Any] = consumer.consume(500, 0.1)
        if started is None:
            if not messages:
                continue
            started = (time.thread_time(), time.process_time(), _thread_cpu())
        for message in messages:
            if message.error() is not None:
                continue
            got += 1
            if headers:
                message.headers()
            if role == "count":
                counts[message.key()] += 1
                continue
            prefix, words = _split_words(message.value())
            for word in words:
                while True:
                    try:
                        producer.produce(out_topic, prefix, key=word)
                        break
                    except BufferError:
                        producer.poll(0.01)
        if producer is not None:
            producer.poll(0)
    if producer is not None:
        producer.flush(30)
    ended = (time.thread_time(), time.process_time(), _thread_cpu())
    consumer.close()
    return started, ended, records, {}


def _bolt_loop(role: str, topic: str, out_topic: str, records: int, bootstrap: str, topology: str) -> tuple:
    """The same as a ``BasicBolt`` with a per-tuple handler, its steps timed on its thread."""
    import reliable_kafka.bolt.runner as runner
    import reliable_kafka.kafka.ack_sender as ack_sender
    from reliable_kafka.core.ack_packer import AckPacker
    from reliable_kafka.lifecycle import young_collections_per_batch

    counts: dict[bytes, int] = defaultdict(int)

    def count(word, collector) -> None:
        counts[word.key] += 1

    def split(sentence, collector) -> None:
        prefix, words = _split_words(sentence.value)
        for word in words:
            collector.emit(out_topic, prefix, key=word)

    steps: dict[str, float] = defaultdict(float)

    def timed(step: str, function):
        def call(*args, **kwargs):
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                steps[step] += time.thread_time() - started

        return call

    # patches the names runner.py imported (mypy sees no re-export)
    runner.consume_batch = timed("consume", runner.consume_batch)  # type: ignore[attr-defined]
    runner.send_polled = timed("flush (send_polled)", runner.send_polled)  # type: ignore[attr-defined]
    ack_sender.merge_acks = timed("ack records: merge", ack_sender.merge_acks)
    AckPacker.drain = timed("ack records: drain", AckPacker.drain)  # type: ignore[method-assign]
    bolt = BasicBolt(
        topology=topology,
        connection=bootstrap,
        source_topics=topic,
        group_id=f"bolt-{time.time()}",
        handler=count if role == "count" else split,
    )
    bolt.start()
    assert bolt._acks is not None
    bolt._process_batch = timed("batch loop with handler", bolt._process_batch)  # type: ignore[method-assign]
    bolt._acks.send = timed("ack records", bolt._acks.send)  # type: ignore[method-assign]
    poll = timed("round", bolt.poll_once)
    started, first = None, 0
    with young_collections_per_batch():  # as run_until_stopped runs a worker loop
        while bolt.stats.received < records:
            if started is None and bolt.stats.received:
                steps.clear()
                started, first = (time.thread_time(), time.process_time(), _thread_cpu()), bolt.stats.received
            poll()
        poll(0)
        assert bolt._producer is not None
        bolt._producer.flush(30)
    ended = (time.thread_time(), time.process_time(), _thread_cpu())
    bolt.close()
    return started, ended, records - first, dict(steps)


def _measured(config, role, topic, out_topic, records, bootstrap, topology, queue) -> None:
    if config in ("plain", "headers"):
        started, ended, counted, steps = _plain_loop(role, topic, out_topic, records, bootstrap, config == "headers")
    else:
        started, ended, counted, steps = _bolt_loop(role, topic, out_topic, records, bootstrap, topology)
    us = 1e6 / counted
    threads = {name: (ended[2][name] - started[2].get(name, 0.0)) * us for name in ended[2]}
    queue.put(
        {
            "loop": (ended[0] - started[0]) * us,
            "process": (ended[1] - started[1]) * us,
            "threads": {name: cpu for name, cpu in threads.items() if cpu > 0},
            "steps": {step: cpu * us for step, cpu in steps.items()},
        }
    )


def _prefill(bootstrap: str, topic: str, role: str, tracked: bool, records: int) -> None:
    """Words as the split writes them (key a word, value the sentence's prefix, 8 words a root,
    partitioned by key), or sentences of 8 words; one ``rk-anchors`` pair each when tracked."""
    import random

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(1)
    vocabulary = [b"w%03d" % i for i in range(1000)]
    root = 0
    for i in range(records):
        if i % 8 == 0:
            root = new_id()
        key: bytes | None = None
        if role == "count":
            key, value = rng.choice(vocabulary), b"1 1764000000000.000"
        else:
            value = b"1 1764000000000.000 " + b" ".join(rng.choice(vocabulary) for _ in range(8))
        headers: Any = [(codec.ANCHORS_HEADER, codec.encode_one_anchor(root, new_id()))] if tracked else None
        while True:
            try:
                producer.produce(topic, value, key=key, partition=hash(key) % 2 if key else i % 2, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)


def on_broker(args) -> None:
    import multiprocessing as mp

    from reliable_kafka.kafka.admin import admin_client, ensure_topics
    from reliable_kafka.testing.topics import create_topics, unique_name
    from reliable_kafka.topology import TopologyTopics

    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from reliable_kafka.broker import EmbeddedKafka

            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        topology = unique_name("bolt-overhead")
        ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=1))
        roles, configs = args.roles.split(","), args.configs.split(",")
        topics = {}
        for role in roles:
            records = args.records if role == "count" else args.records // 8
            for tracked in (False, True):
                name = f"{topology}-{role}-{'tracked' if tracked else 'untracked'}"
                create_topics(bootstrap, {name: 2, f"{name}-out": 2})
                _prefill(bootstrap, name, role, tracked, records)
                topics[(role, tracked)] = (name, records)
        print(
            f"us of CPU per input record (a word for count, a sentence for split), one process each, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        ctx = mp.get_context("spawn")
        for _ in range(args.rounds):
            for role in roles:
                for config in configs:
                    name, records = topics[(role, config in ("tracked", "headers"))]
                    queue = ctx.Queue()
                    process = ctx.Process(
                        target=_measured, args=(config, role, name, f"{name}-out", records, bootstrap, topology, queue)
                    )
                    process.start()
                    result = queue.get(timeout=600)
                    process.join(60)
                    threads = "  ".join(
                        f"{n} {cpu:.2f}" for n, cpu in sorted(result["threads"].items(), key=lambda t: -t[1])
                    )
                    loop, whole = result["loop"], result["process"]
                    print(f"{role:>5} {config:<8} loop thread {loop:6.2f}  process {whole:6.2f}  ({threads})")
                    if result["steps"]:
                        steps = ", ".join(f"{step} {cpu:.3f}" for step, cpu in result["steps"].items())
                        print(f"{'':15}loop thread: {steps}")
        print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
