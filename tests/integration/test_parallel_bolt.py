"""A parallel BasicBolt on a real broker (DESIGN 6.1): a spout, an acker and a bolt with
parallelism=16 whose handler (on threads, or ``async def`` on one asyncio loop) sleeps 2-5 ms and
sometimes raises; every record's tree completes,
nothing is lost or dead-lettered, and the calls of one key never overlap and run in offset order."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict

import pytest

from reliable_kafka import AckerWorker, BasicBolt, LocalCluster, Spout
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

RECORDS = 2_000


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_parallel_bolt_with_random_failures_completes_every_tree_in_key_order(kafka_bootstrap, kind):
    topology = unique_name("par")
    source, mid = f"{topology}-src", f"{topology}.mid"
    create_topics(kafka_bootstrap, {source: 4, mid: 4})
    keys = [b"key-%d" % (i % 50) for i in range(RECORDS)]
    produce_values(kafka_bootstrap, source, [b"%d" % i for i in range(RECORDS)], keys=keys)
    lock = threading.Lock()
    running: set[bytes] = set()
    overlaps: list[bytes] = []
    calls: dict[tuple[int, bytes], list[int]] = defaultdict(list)  # (mid partition, key) -> offsets, call order
    handled: set[bytes] = set()
    rng = random.Random(26)

    def begin(tuple_) -> tuple[float, bool]:
        with lock:
            if tuple_.key in running:
                overlaps.append(tuple_.key)
            running.add(tuple_.key)
            calls[(tuple_.partition, tuple_.key)].append(tuple_.offset)
            return 0.002 + 0.003 * rng.random(), rng.random() < 0.05

    def end(tuple_, fails: bool) -> None:
        with lock:
            running.discard(tuple_.key)
            if not fails:
                handled.add(tuple_.value)
        if fails:
            raise RuntimeError("transient failure")

    def handler(tuple_, collector):
        pause, fails = begin(tuple_)
        time.sleep(pause)
        end(tuple_, fails)

    async def async_handler(tuple_, collector):
        pause, fails = begin(tuple_)
        await asyncio.sleep(pause)
        end(tuple_, fails)

    on = {"topology": topology, "bootstrap_servers": kafka_bootstrap}
    chosen = handler if kind == "threads" else async_handler
    bolt = BasicBolt(**on, source_topics=mid, group_id=f"{topology}-bolt", handler=chosen, parallelism=16)
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=mid,
        max_retries=30,
        backoff=Backoff(initial_ms=20, multiplier=2.0, max_ms=200),
        message_timeout_ms=120_000,
    )
    components = [AckerWorker(**on, ackers=2, message_timeout_ms=120_000), spout, bolt]
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: (
                committed_offsets(kafka_bootstrap, f"{topology}-spout", source) == end_offsets(kafka_bootstrap, source)
            ),
            timeout=240,
            what="the spout committed to the end of its source (every tree completed)",
            progress=lambda: f"spout {spout.stats}, bolt {bolt.stats}",
        )
    assert spout.stats.completed == RECORDS and spout.stats.dead_lettered == 0
    assert handled == {b"%d" % i for i in range(RECORDS)}, "a record was never handled without a raise"
    assert bolt.stats.failed > 0 and bolt.stats.handler_errors == bolt.stats.failed  # the raises happened
    assert not overlaps, f"calls of one key overlapped: {overlaps[:5]}"
    for (partition, key), offsets in calls.items():
        assert offsets == sorted(offsets), f"{key!r} on {mid}[{partition}] ran out of offset order: {offsets}"
    stats = bolt.stats
    assert stats.received == stats.acked + stats.failed + stats.quarantined + stats.abandoned
