"""Parallel bolts (docs/design.md section 6.1) on the in-memory Kafka: per-key order, a commit that never passes a
tuple not done, bounded in-flight, failure isolation, revoke and close mid-flight, async handlers
and a rich bolt acking from another thread. Calls are finished out of order by a seeded
:class:`SteppedCalls` (no timing), or run on the real thread pool and asyncio loop."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import defaultdict
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka import Connection, Loop, codec
from reliable_kafka.bolt import BasicBolt, Bolt, Parallel
from reliable_kafka.bolt.executors import RUNNING, SteppedCalls
from reliable_kafka.codec.ack_batch import decode_ack_batch
from reliable_kafka.core.commit_metadata import decode_done_above
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import ConfigError
from reliable_kafka.testing import ManualClock, MemoryKafka

TOPOLOGY = "t"


def _kafka(partitions: int = 2) -> MemoryKafka:
    kafka = MemoryKafka(clock=ManualClock())
    for topic in (f"{TOPOLOGY}.acks", f"{TOPOLOGY}.failures", f"{TOPOLOGY}.quarantine", "out"):
        kafka.create_topic(topic, 1)
    kafka.create_topic("in", partitions)
    return kafka


def _produce(kafka: MemoryKafka, records: list[tuple[int, bytes | None, dict[int, int] | None]]) -> None:
    """``(partition, key, anchors)`` records to ``in`` (anchors None: untracked)."""
    producer = kafka.producer({})
    for i, (partition, key, anchors) in enumerate(records):
        headers = [(codec.ANCHORS_HEADER, codec.encode_anchors(anchors))] if anchors else None
        producer.produce("in", b"v%d" % i, key, partition=partition, headers=headers)
    producer.flush()


def _bolt(kafka: MemoryKafka, handler, *, cls=BasicBolt, group: str = "g", batch_size: int = 500, **parallel):
    """A started bolt; ``parallel`` are :class:`Parallel`'s fields (the executor: SteppedCalls)."""
    parallel.setdefault("executor", SteppedCalls())
    bolt = cls(
        topology=TOPOLOGY,
        connection=Connection("memory", clients=kafka),
        loop=Loop(commit_interval_ms=0, clock=kafka.clock, batch_size=batch_size),
        source_topics="in",
        group_id=group,
        handler=handler,
        parallel=Parallel(**parallel),
    )
    bolt.start()
    return bolt


def _entries(kafka: MemoryKafka) -> list[tuple[int, int, int]]:
    out = []
    for message in kafka.messages(f"{TOPOLOGY}.acks"):
        batch = decode_ack_batch(message.value())
        out += zip(batch.kinds.tolist(), batch.roots.tolist(), batch.vals.tolist())
    return out


def _committed(kafka: MemoryKafka, partition: int, group: str = "g") -> int:
    got = kafka.committed(group, "in", partition)
    return -1 if got is None else got[0]


def test_bad_parallel_options_are_refused_at_construction_naming_the_parameter():
    kafka = _kafka()

    def make(**options):
        bolt_options = {k: options.pop(k) for k in ("handler", "batch_handler", "transactional") if k in options}
        return BasicBolt(
            topology=TOPOLOGY,
            connection=Connection("memory", clients=kafka),
            source_topics="in",
            group_id="g",
            parallel=Parallel(**options),
            **{"handler": lambda t, c: None, **bolt_options},
        )

    for options, named in [
        ({"parallelism": 0}, "parallelism"),
        ({"parallelism": 2.0}, "parallelism"),
        ({"parallelism": True}, "parallelism"),
        ({"ordering": "keys"}, "ordering"),
        ({"parallelism": 4, "max_in_flight": 3}, "max_in_flight"),
        ({"max_in_flight": "8"}, "max_in_flight"),
        ({"key_of": "key"}, "key_of"),
        ({"handler": 42}, "handler"),
        ({"parallelism": 2, "transactional": True}, "transactional"),
        ({"handler": None, "batch_handler": lambda b, c: None, "parallelism": 2}, "batch_handler"),
    ]:
        with pytest.raises(ConfigError, match=named):
            make(**options)


def test_parallelism_one_with_a_plain_handler_keeps_the_serial_loop():
    bolt = BasicBolt(topology=TOPOLOGY, connection="memory", source_topics="in", group_id="g", handler=print)
    assert bolt.parallelism == 1 and bolt._parallel is None and bolt.calls_in_flight() == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ordering=st.sampled_from(["key", "partition"]))
def test_tuples_of_one_key_run_one_at_a_time_in_offset_order_and_the_commit_never_passes_one_not_done(seed, ordering):
    rng = random.Random(seed)
    kafka = _kafka()
    _produce(kafka, [(rng.randrange(2), b"k%d" % rng.randrange(4), {rng.getrandbits(62) + 1: 5}) for _ in range(40)])
    calls: list[tuple[int, int, bytes]] = []
    bolt = _bolt(kafka, lambda t, c: calls.append((t.partition, t.offset, t.key)), parallelism=3, ordering=ordering)
    executor = bolt._parallel.executor
    for _ in range(400):
        bolt.poll_once(0)
        waiting = executor.waiting
        group = (lambda c: c.tuple_.key) if ordering == "key" else (lambda c: c.tuple_.partition)
        assert len({group(c) for c in waiting}) == len(waiting), "two calls of one key in flight"
        assert sum(c.state == RUNNING for c in waiting) == min(3, len(waiting)), "not parallelism calls running"
        not_done = defaultdict(list)
        for call in waiting:
            not_done[call.tuple_.partition].append(call.tuple_.offset)
        for partition, offsets in not_done.items():
            assert _committed(kafka, partition) <= min(offsets), "committed past a tuple not done"
        if waiting:
            executor.run_one(rng.randrange(executor.running_slots()))
        elif bolt.stats.acked == 40:
            break
    assert bolt.stats.acked == 40 and bolt.stats.received == 40
    by_key = defaultdict(list)
    for partition, offset, key in calls:
        by_key[key if ordering == "key" else partition].append((partition, offset))
    for ran in by_key.values():
        for partition in (0, 1):
            mine = [o for p, o in ran if p == partition]
            assert mine == sorted(mine), "a key's tuples ran out of offset order"
    bolt.poll_once(0)
    assert [_committed(kafka, p) for p in (0, 1)] == [kafka.log("in", p).end for p in (0, 1)]


def test_at_most_max_in_flight_tuples_are_held_however_slow_the_handler():
    kafka = _kafka()
    _produce(kafka, [(i % 2, b"k%d" % i, None) for i in range(100)])
    bolt = _bolt(kafka, lambda t, c: None, parallelism=2, max_in_flight=5, batch_size=3)
    for _ in range(50):
        bolt.poll_once(0)
        kafka.clock.advance(100)
    assert bolt.stats.received == 5 and bolt._parallel.held == 5 and bolt._parallel.paused
    # the first two calls started at the first round, 50 rounds of 100 ms ago
    assert bolt.calls_in_flight() == 2 and bolt.oldest_call_age(kafka.clock.monotonic() + 2) == pytest.approx(7.0)
    bolt._parallel.executor.run_one()
    for _ in range(5):
        bolt.poll_once(0)
    assert bolt.stats.received == 5 and bolt._parallel.held == 4  # paused: resumed at half room only
    for _ in range(2):
        bolt._parallel.executor.run_one()
    for _ in range(5):
        bolt.poll_once(0)
    assert not bolt._parallel.paused and bolt.stats.received == 8 and bolt._parallel.held == 5  # resumed, full again


def test_one_raising_tuple_fails_only_its_own_trees_with_its_reason():
    kafka = _kafka()
    _produce(kafka, [(0, b"a", {11: 1}), (0, b"b", {12: 2}), (1, b"c", {13: 3, 14: 4})])

    def handler(tuple_, collector):
        if tuple_.key == b"b":
            raise ValueError("bad b")
        collector.emit("out", b"child")

    bolt = _bolt(kafka, handler, parallelism=3)
    bolt.poll_once(0)
    executor = bolt._parallel.executor
    while executor.waiting:
        executor.run_one(len(executor.waiting) - 1)
    bolt.poll_once(0)
    entries = _entries(kafka)
    assert [(k, r) for k, r, _ in entries if k == EventKind.FAIL] == [(EventKind.FAIL, 12)]
    acks = {root: val for kind, root, val in entries if kind == EventKind.ACK}
    assert set(acks) == {11, 13, 14}
    children = [codec.decode_anchors(dict(m.headers())[codec.ANCHORS_HEADER]) for m in kafka.messages("out")]
    for root, edge in ((11, 1), (13, 3), (14, 4)):  # each tree's XOR closes: the emit came before the ack
        assert reduce(lambda a, b: a ^ b, [c[root] for c in children if root in c], edge ^ acks[root]) == 0
    assert (bolt.stats.acked, bolt.stats.failed, bolt.stats.handler_errors) == (2, 1, 1)
    [reason] = kafka.messages(f"{TOPOLOGY}.failures")
    assert b"bad b" in reason.value()


def test_a_revoke_mid_flight_commits_the_done_prefix_and_the_next_owner_skips_what_was_done_above_it():
    kafka = _kafka(partitions=2)
    _produce(kafka, [(p, b"k%d" % i, None) for p in (0, 1) for i in range(6)])
    ran: dict[str, list[tuple[int, int]]] = defaultdict(list)
    first = _bolt(kafka, lambda t, c: ran["first"].append((t.partition, t.offset)), parallelism=12, ordering="none")
    first.revoke_wait_s = 0
    first.poll_once(0)
    executor = first._parallel.executor
    assert len(executor.waiting) == 12
    for offset in (0, 1, 3, 5):
        for partition in (0, 1):
            at = (partition, offset)
            executor.run_one([(c.tuple_.partition, c.tuple_.offset) for c in executor.waiting].index(at))
    late = list(executor.waiting)  # offsets 2 and 4 of each partition still run when the revoke comes
    second = _bolt(kafka, lambda t, c: ran["second"].append((t.partition, t.offset)), parallelism=2)
    for _ in range(5):  # the second bolt joins: one partition moves to it
        second.poll_once(0)
        first.poll_once(0)
    [moved] = [tp.partition for tp in second._consumer.assignment()]
    committed, metadata = kafka.committed("g", "in", moved)
    assert committed == 2 and decode_done_above(2, metadata) == [3, 5]
    for call in late:  # calls abandoned by the revoke that end late change no commit of the moved partition
        executor.run_one(executor.waiting.index(call))
    first.poll_once(0)
    assert kafka.committed("g", "in", moved)[0] == 2, "a late call moved the commit of a partition gone elsewhere"
    for _ in range(5):
        for bolt in (first, second):  # the first bolt reads its partition again too (an eager rebalance)
            bolt.poll_once(0)
            while bolt._parallel.executor.waiting:
                bolt._parallel.executor.run_one()
    assert sorted(ran["second"]) == [(moved, 2), (moved, 4)]  # 3 and 5 were done: not run again
    assert kafka.committed("g", "in", moved)[0] == 6
    assert kafka.committed("g", "in", 1 - moved)[0] == 6


def test_close_mid_flight_commits_the_done_prefix_and_counts_the_abandoned_calls():
    kafka = _kafka(partitions=1)
    _produce(kafka, [(0, b"k", None), (0, b"j", None), (0, b"k", None)])
    bolt = _bolt(kafka, lambda t, c: None, parallelism=2, revoke_wait_s=0)
    bolt.poll_once(0)
    executor = bolt._parallel.executor
    executor.run_one(1)  # offset 1 ends; 0 runs on, 2 waits for key k
    bolt.close()
    committed, metadata = kafka.committed("g", "in", 0)
    assert committed == 0 and decode_done_above(0, metadata) == [1]
    stats = bolt.stats
    assert (stats.received, stats.acked, stats.abandoned) == (3, 1, 2)


def test_a_freed_slot_takes_the_next_queued_call_at_once_and_a_close_drops_the_queued_ones():
    kafka = _kafka(partitions=1)
    _produce(kafka, [(0, b"k%d" % i, None) for i in range(6)])
    ran: list[int] = []
    bolt = _bolt(kafka, lambda t, c: ran.append(t.offset), parallelism=2, ordering="none", revoke_wait_s=0)
    bolt.poll_once(0)
    executor = bolt._parallel.executor
    assert len(executor.waiting) == 6 and bolt.calls_in_flight() == 2  # all handed over, two running
    executor.run_one(0)
    # the pool's free slot took offset 2 without a round of the bolt's loop
    assert bolt.calls_in_flight() == 2 and [c.tuple_.offset for c in executor.waiting[:2]] == [1, 2]
    bolt.close()  # 1 and 2 run on (abandoned after the wait), 3 to 5 never begin
    while executor.waiting:
        executor.run_one()
    assert ran == [0]
    assert (bolt.stats.received, bolt.stats.acked, bolt.stats.abandoned) == (6, 1, 5)
    assert kafka.committed("g", "in", 0)[0] == 1


def test_a_round_with_nothing_new_waits_for_calls_queued_in_the_executor_instead_of_spinning():
    kafka = _kafka(partitions=1)
    _produce(kafka, [(0, b"k%d" % i, None) for i in range(3)])
    bolt = _bolt(kafka, lambda t, c: None, parallelism=1, ordering="none", executor=SteppedCalls(size=0))
    bolt.poll_once(0)  # all three handed over; none has begun (the executor's thread has not run yet)
    assert bolt._parallel.handed_over() == 3 and bolt.calls_in_flight() == 0
    waits: list[float] = []
    apply = bolt._parallel.apply
    bolt._parallel.apply = lambda wait=0.0: waits.append(wait) or apply(0.0)
    bolt.poll_once(0.5)
    assert any(wait > 0 for wait in waits), "the loop spun instead of waiting for a queued call to end"


def test_an_async_handler_runs_on_one_loop_with_at_most_parallelism_calls_at_once():
    kafka = _kafka()
    _produce(kafka, [(i % 2, b"k%d" % (i % 10), {i + 1: i}) for i in range(60)])
    running, most = 0, 0

    async def handler(tuple_, collector):
        nonlocal running, most
        running += 1  # one loop thread: no lock needed
        most = max(most, running)
        await asyncio.sleep(0.001)
        collector.emit("out", tuple_.value)
        running -= 1

    bolt = _bolt(kafka, handler, parallelism=4, executor=None)
    try:
        for _ in range(2000):
            bolt.poll_once(0.01)
            if bolt.stats.acked == 60:
                break
        assert bolt.stats.acked == 60 and 1 <= most <= 4
        assert threading.active_count() < 20  # one loop thread, not one per call
    finally:
        bolt.close()


def test_thread_pool_calls_keep_key_order_and_ack_every_tuple():
    kafka = _kafka()
    _produce(kafka, [(i % 2, b"k%d" % (i % 5), {i + 1: i}) for i in range(200)])
    seen: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    lock = threading.Lock()
    rng = random.Random(3)

    def handler(tuple_, collector):
        threading.Event().wait(rng.random() / 2000)
        with lock:
            seen[tuple_.key].append((tuple_.partition, tuple_.offset))

    bolt = _bolt(kafka, handler, parallelism=8, executor=None)
    try:
        for _ in range(5000):
            bolt.poll_once(0.01)
            if bolt.stats.acked == 200:
                break
        assert bolt.stats.acked == 200
        for ran in seen.values():
            for partition in (0, 1):
                mine = [o for p, o in ran if p == partition]
                assert mine == sorted(mine)
    finally:
        bolt.close()


def test_a_rich_bolt_acks_from_another_thread_after_its_call_returned():
    kafka = _kafka(partitions=1)
    _produce(kafka, [(0, b"a", {21: 7}), (0, b"b", {22: 8})])
    held = []

    def handler(tuple_, collector):
        collector.emit("out", b"child", anchors=tuple_)
        held.append((tuple_, collector))

    bolt = _bolt(kafka, handler, cls=Bolt, parallelism=2)
    bolt.poll_once(0)
    while bolt._parallel.executor.waiting:
        bolt._parallel.executor.run_one()
    acker = threading.Thread(target=lambda: [collector.ack(t) for t, collector in held])
    acker.start()
    acker.join(10)
    for _ in range(3):
        bolt.poll_once(0)
    acks = {root: val for kind, root, val in _entries(kafka) if kind == EventKind.ACK}
    children = [codec.decode_anchors(dict(m.headers())[codec.ANCHORS_HEADER]) for m in kafka.messages("out")]
    for root, edge in ((21, 7), (22, 8)):
        child = next(c[root] for c in children if root in c)
        assert edge ^ acks[root] ^ child == 0
    assert bolt.stats.acked == 2


def test_a_rich_bolt_that_fails_its_tuple_and_raises_counts_it_once():
    kafka = _kafka(partitions=1)
    _produce(kafka, [(0, b"a", {31: 1})])

    def handler(tuple_, collector):
        collector.fail(tuple_, reason="no")
        raise RuntimeError("and raised")

    for options in ({}, {"parallelism": 2}):  # the serial loop and the parallel one
        bolt = _bolt(kafka, handler, cls=Bolt, group=f"g{len(options)}", **options)
        for _ in range(3):
            bolt.poll_once(0)
            if bolt._parallel is not None:
                while bolt._parallel.executor.waiting:
                    bolt._parallel.executor.run_one()
        assert (bolt.stats.failed, bolt.stats.acked, bolt.stats.handler_errors) == (1, 0, 1)


def test_a_key_of_that_raises_fails_only_that_tuple_and_reset_timeout_reaches_the_ack_log():
    kafka = _kafka(partitions=1)
    _produce(kafka, [(0, b"a", {41: 1}), (0, b"bad", {42: 2})])

    def key_of(tuple_):
        if tuple_.key == b"bad":
            raise KeyError("no key")
        return tuple_.key

    def handler(tuple_, collector):
        collector.reset_timeout(tuple_)

    bolt = _bolt(kafka, handler, parallelism=2, key_of=key_of)
    for _ in range(3):
        bolt.poll_once(0)
        while bolt._parallel.executor.waiting:
            bolt._parallel.executor.run_one()
    kinds = sorted((kind, root) for kind, root, _ in _entries(kafka))
    assert kinds == sorted([(EventKind.RESET_TIMEOUT, 41), (EventKind.ACK, 41), (EventKind.FAIL, 42)])
    assert (bolt.stats.acked, bolt.stats.failed, bolt.stats.handler_errors) == (1, 1, 1)
