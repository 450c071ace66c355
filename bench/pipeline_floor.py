"""The ``floor`` configuration of bench_pipeline: the tracking protocol's own work, written as plain
confluent-kafka loops, with no library around it.

What every tracked pipeline must do on this client API, whatever library runs it (docs/design.md section 3 and 4):
the spout gives each source record a root and an edge and writes them in the ``rk-anchors`` header
(v2), sends one INIT record a round, reads its outcome partition and commits a source offset only
once its tree completed; the split reads each sentence's header and writes each word with a new
edge in its own header; the split and the count send their ACK entries in ack records. The
library's protocol-level choices are kept, so that the difference is the library's own code: a
round takes what is fetched (``consume_batch``), sends its records when it ends (``send_polled``,
``linger.ms`` 50), a root's ACKs in a record are merged into one entry, and while a bolt is behind
its acks wait for a few batches (up to 8,000 entries or 20 ms). The acker is reliable-kafka's own
worker. Nothing else: no tracker, timeouts, redelivery, dead letters, stats, status, quarantine
or rebalance handling, so this is not a usable spout or bolt, only a measure of how much of the
tracked configuration's cost is the protocol on this client API (this floor) and how much is the
library (tracked minus floor).

The bench's own per-record work is the same as in the other configurations (the count bolt's
``probe.counted``, the spout's completion latency per record).
"""

from __future__ import annotations

import random
import struct
import time
from collections import deque
from typing import Any

import numpy as np

from reliable_kafka.codec import decode_outcomes, encode_ack_batch
from reliable_kafka.codec.anchors import encode_one_anchor
from reliable_kafka.core.ids import new_id, new_ids
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.clients import SENT_PER_POLL
from reliable_kafka.kafka.produce import send_polled
from reliable_kafka.lifecycle import young_collections_per_batch
from reliable_kafka.polling import consume_batch
from reliable_kafka.topology import TopologyTopics

__all__ = ["floor_role"]

HEADER = "rk-anchors"
PREFIX = encode_one_anchor(1, 1)[:2]  # version 2, 16 bytes of pairs: one (root, edge)
PAIR = struct.Struct(">qq")
ONE = struct.Struct(">BBqq")  # a whole one-pair value in one call: version 2, length byte 32, root, edge
INIT, ACK = int(EventKind.INIT), int(EventKind.ACK)
COMPLETED = int(OutcomeKind.COMPLETED)
COMMIT_INTERVAL_S = 1.0
BATCH = 500
ACK_HOLD_ENTRIES, ACK_HOLD_S = 8000, 0.02
OUTCOME_WAIT_S = 0.002  # the spout's wait for source records while trees are pending, as the library's


def _anchor(message) -> tuple[int, int]:
    """The (root, edge) of a record in one tree: its first header, read without any checks."""
    headers = message.headers()
    value = headers[0][1]
    return PAIR.unpack_from(value, len(PREFIX))


def _send_acks(producer, topic: str, sender: int, kind: int, roots, vals) -> None:
    kinds = np.full(len(roots), kind, dtype=np.uint8)
    producer.produce(topic, encode_ack_batch(sender, kinds, roots, vals), partition=0)  # 1 acker: 1 partition


def floor_role(
    role: str, topics: dict, bootstrap: str, probe, stop, ready, *, client_config, split_words, now_ms
) -> None:
    """Run ``role`` (spout, split or count) until ``stop``. bench_pipeline passes its own helpers:
    ``client_config()`` (the statistics settings every client of the bench has), ``split_words``
    and ``now_ms``."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    acks = TopologyTopics(topics["topology"]).acks
    sender = random.getrandbits(62) + 1
    common = {"bootstrap.servers": bootstrap, **client_config()}
    source = {"spout": topics["source"], "split": topics["sentences"], "count": topics["words"]}[role]
    consumer = Consumer(
        {
            **common,
            "group.id": f"{topics['topology']}-{role}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": role != "spout",  # the bolts: stored offsets, committed every 5 s
            "enable.auto.offset.store": False,
        }
    )
    # an ack sender must be idempotent; a round's records go when it ends, as the library's do
    producer: Any = Producer({**common, "enable.idempotence": True, **SENT_PER_POLL})
    outcomes = None
    if role == "spout":
        out_topic = TopologyTopics(topics["topology"]).outcomes
        outcomes = Consumer({**common, "group.id": f"{topics['topology']}-floor-outcomes", "enable.auto.commit": False})
        partitions = outcomes.list_topics(out_topic, timeout=30).topics[out_topic].partitions
        partition = sender % len(partitions)
        _, high = outcomes.get_watermark_offsets(TopicPartition(out_topic, partition), timeout=30)
        outcomes.assign([TopicPartition(out_topic, partition, high)])
    consumer.subscribe([source], on_assign=lambda c, p: ready.set())
    try:
        with young_collections_per_batch():  # as the library's loops (reliable_kafka/lifecycle.py)
            if role == "spout":
                _spout(consumer, outcomes, producer, topics, acks, sender, probe, stop, now_ms)
            else:
                _bolt(role, consumer, producer, topics, acks, sender, probe, stop, split_words)
    finally:
        consumer.close()
        if outcomes is not None:
            outcomes.close()
        producer.flush(10)


def _bolt(role, consumer, producer, topics, acks, sender, probe, stop, split_words) -> None:
    """The library's protocol-level choices, written plainly: each round takes what is fetched
    (waiting only while nothing is), a root's ACKs of one record merged into one entry, and while
    full batches keep coming the acks wait up to 8,000 entries or 20 ms (ACK_HOLD_ENTRIES, _S)."""
    from confluent_kafka import TopicPartition

    counts: dict[bytes, int] = {}
    words_topic = topics["words"]
    held: dict[int, int] = {}  # root -> XOR of its ACK vals, not yet sent
    sent_at = time.monotonic()
    while probe.running(stop):
        messages: list[Any] = consume_batch(consumer, BATCH, 0.1)
        ends: dict[tuple[str, int], int] = {}
        for message in messages:
            if message.error() is not None:
                continue
            root, edge = _anchor(message)
            if role == "split":
                prefix, words = split_words(message.value())
                xor = edge
                for word in words:
                    child = new_id()
                    xor ^= child
                    while True:
                        try:
                            producer.produce(
                                words_topic, prefix, word, headers=[(HEADER, ONE.pack(2, 32, root, child))]
                            )
                            break
                        except BufferError:
                            producer.poll(0.01)
                held[root] = held.get(root, 0) ^ xor
            else:
                key = message.key()
                counts[key] = counts.get(key, 0) + 1
                probe.counted(message.value())
                held[root] = held.get(root, 0) ^ edge
            ends[(message.topic(), message.partition())] = message.offset() + 1
        if held and (
            len(messages) < BATCH or len(held) >= ACK_HOLD_ENTRIES or time.monotonic() - sent_at >= ACK_HOLD_S
        ):
            _send_acks(producer, acks, sender, ACK, list(held), list(held.values()))
            held = {}
            sent_at = time.monotonic()
        if ends:
            consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()])
        send_polled(producer)
        producer.poll(0)


def _spout(consumer, outcomes, producer, topics, acks, sender, probe, stop, now_ms) -> None:
    from confluent_kafka import TopicPartition

    sentences = topics["sentences"]
    pending: dict[int, tuple[int, int, bytes]] = {}  # root -> (partition, offset, value)
    order: dict[int, deque[int]] = {}  # partition -> offsets in flight, in order
    done: dict[int, set[int]] = {}  # partition -> offsets completed but not yet below the low point
    committed: dict[int, int] = {}
    next_commit = time.monotonic() + COMMIT_INTERVAL_S
    while probe.running(stop):
        for record in outcomes.consume(500, 0):
            if record.error() is not None:
                continue
            batch = decode_outcomes(record.value())
            now = now_ms()
            completed = 0
            for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
                entry = pending.pop(root, None)
                if entry is None or kind != COMPLETED:
                    continue  # never on this bench's runs (no failures, no timeouts)
                partition, offset, value = entry
                done[partition].add(offset)
                phase, stamp = value.split(b" ", 2)[:2]
                probe.completion[int(phase)].append(now - float(stamp))
                completed += 1
            probe.completed.value += completed
        messages: list[Any] = consume_batch(consumer, BATCH, OUTCOME_WAIT_S if pending else 0.1)
        if messages:
            ids = new_ids(2 * len(messages)).tolist()
            roots, edges = ids[: len(messages)], ids[len(messages) :]
            for message, root, edge in zip(messages, roots, edges):
                if message.error() is not None:
                    continue
                value = message.value()
                while True:
                    try:
                        producer.produce(
                            sentences, value, message.key(), headers=[(HEADER, ONE.pack(2, 32, root, edge))]
                        )
                        break
                    except BufferError:
                        producer.poll(0.01)
                partition, offset = message.partition(), message.offset()
                pending[root] = (partition, offset, value)
                if partition not in order:
                    order[partition], done[partition] = deque(), set()
                order[partition].append(offset)
            _send_acks(producer, acks, sender, INIT, roots, edges)
        send_polled(producer)
        producer.poll(0)
        if time.monotonic() >= next_commit:
            offsets = []
            for partition, offsets_in_flight in order.items():
                completed_here = done[partition]
                low = None
                while offsets_in_flight and offsets_in_flight[0] in completed_here:
                    low = offsets_in_flight.popleft()
                    completed_here.discard(low)
                if low is not None and committed.get(partition) != low + 1:
                    committed[partition] = low + 1
                    offsets.append(TopicPartition(topics["source"], partition, low + 1))
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=True)
            next_commit = time.monotonic() + COMMIT_INTERVAL_S
