"""Acker rebuild from its own log: how long a fresh acker worker takes to hold M pending roots.

An acker's table is never saved: a restarted or rebalanced worker replays its ack partition from
the committed low point and folds it again (docs/design.md section 4). This bench writes INIT entries for
``--roots`` distinct roots into a one-partition ack topic (records of 2000 packed entries, as
spouts send them; writing is not timed), then times fresh :class:`AckerWorker` s, each in its own
consumer group (so it replays from the start), from ``run()`` until all M roots are pending:

* cold: the first rebuild of the log; warm: a second rebuild of the same log, side by side;
* in memory: decode + fold of the same record values with no Kafka at all (the CPU floor),
  record by record and in groups of the worker's ``FOLD_GROUP`` records per vectorised fold.

Prints figures, asserts nothing. The default (1M roots) runs in well under two minutes on a
shared 2-core machine, broker start included. Usage:
``python bench/bench_acker_recovery.py [--roots N] [--bootstrap-servers HOST:PORT]`` (without
``--bootstrap-servers`` an embedded broker is started and stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from confluent_kafka import Producer

from reliable_kafka import AckerWorker, Tracking, codec
from reliable_kafka.acker.worker import FOLD_GROUP
from reliable_kafka.core.acker_table import AckerTable
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics

ENTRIES_PER_RECORD = 2000  # MAX_ENTRIES_PER_RECORD until 2026-11-24 (now 8000): kept, so figures compare
SPOUT_TASK = 0x5EED  # the INITs' sender (owner)
TIMEOUT_MS = 3_600_000  # nothing may expire during the bench
REBUILD_LIMIT_S = 600.0  # give up on a rebuild after this long


@dataclass
class Rebuild:
    """One timed rebuild: wall seconds from start to assignment and to all roots pending, and
    the process's CPU seconds over the whole of it (all threads, librdkafka's included)."""

    name: str
    assigned_s: float | None
    total_s: float
    cpu_s: float
    pending: int
    table_bytes: int


@contextlib.contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from reliable_kafka.broker import EmbeddedKafka

    started = time.perf_counter()
    with EmbeddedKafka() as broker:
        print(f"embedded broker at {broker.bootstrap_servers} (started in {time.perf_counter() - started:.1f}s)")
        yield broker.bootstrap_servers


def distinct_roots(count: int, seed: int) -> np.ndarray:
    """``count`` distinct non-zero random int64 root ids, in random order."""
    rng = np.random.default_rng(seed)
    roots = np.unique(rng.integers(1, 2**63 - 1, size=count + count // 1000 + 16, dtype=np.int64))
    if len(roots) < count:
        raise RuntimeError("too many id collisions; try another seed")
    return rng.permutation(roots)[:count]


def init_records(count: int, seed: int) -> list[bytes]:
    """Ack-record values holding one INIT for each of ``count`` distinct roots."""
    roots = distinct_roots(count, seed)
    edges = np.random.default_rng(seed + 1).integers(1, 2**63 - 1, size=count, dtype=np.int64)
    kinds = np.full(ENTRIES_PER_RECORD, EventKind.INIT, np.uint8)
    return [
        codec.encode_ack_batch(
            SPOUT_TASK,
            kinds[: len(roots[s : s + ENTRIES_PER_RECORD])],
            roots[s : s + ENTRIES_PER_RECORD],
            edges[s : s + ENTRIES_PER_RECORD],
        )
        for s in range(0, count, ENTRIES_PER_RECORD)
    ]


def write_log(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
    errors: list = []
    for value in values:
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=lambda e, m: errors.append(e) if e else None)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    if remaining or errors:
        raise RuntimeError(f"writing {topic}: {remaining} records not flushed, errors {errors[:3]}")


def rebuild(name: str, bootstrap: str, topology: str, roots: int) -> Rebuild:
    """Time a fresh worker (new group: it replays the whole partition) until ``roots`` are pending."""
    worker = AckerWorker(
        topology=topology,
        connection=bootstrap,
        tracking=Tracking(ackers=1, message_timeout_ms=TIMEOUT_MS),
        group_id=unique_name(f"{topology}.rebuild"),
        create_topics=False,
    )
    stop = threading.Event()
    gc.collect()
    started, cpu_started = time.perf_counter(), time.process_time()
    thread = threading.Thread(target=worker.run, args=(stop,), name=name, daemon=True)
    thread.start()
    assigned_s = None
    try:
        while worker.stats.pending < roots:
            now = time.perf_counter() - started
            if assigned_s is None and worker.ready.is_set():
                assigned_s = now
            if now > REBUILD_LIMIT_S or not thread.is_alive():
                raise RuntimeError(
                    f"{name}: {worker.stats.pending:,} of {roots:,} roots pending after "
                    f"{now:.0f}s (worker alive: {thread.is_alive()}); stats {worker.stats}"
                )
            time.sleep(0.002)
        total_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        table_bytes, pending = worker.stats.table_bytes, worker.stats.pending
    finally:
        stop.set()
        thread.join(60)
    return Rebuild(name, assigned_s, total_s, cpu_s, pending, table_bytes)


def in_memory(values: list[bytes], *, group: int) -> Rebuild:
    """Decode + fold of the same record values into one table, ``group`` records per fold call,
    no Kafka: the CPU floor of a rebuild."""
    table = AckerTable(message_timeout_ms=TIMEOUT_MS)
    gc.collect()
    started, cpu_started = time.perf_counter(), time.process_time()
    for start in range(0, len(values), group):
        records = []
        for offset in range(start, min(start + group, len(values))):
            batch = codec.decode_ack_batch(values[offset])
            records.append((batch.kinds, batch.roots, batch.vals, batch.sender, 0, offset))
        table.fold_records(records)
    return Rebuild(
        f"in memory, {group}/fold",
        None,
        time.perf_counter() - started,
        time.process_time() - cpu_started,
        table.pending,
        table.nbytes,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, default=1_000_000, help="pending roots to rebuild (default 1M)")
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",
        default=None,
        help="use this Kafka (default: start an embedded broker)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    values = init_records(args.roots, args.seed)
    size_mb = sum(map(len, values)) / 1e6
    with kafka(args.bootstrap) as bootstrap:
        topics = TopologyTopics(unique_name("bench-rebuild"), ackers=1)
        ensure_topics(admin_client(bootstrap), topics)
        started = time.perf_counter()
        write_log(bootstrap, topics.acks, values)
        print(
            f"log: {args.roots:,} INIT entries in {len(values):,} records of {ENTRIES_PER_RECORD} "
            f"({size_mb:.1f} MB) on {topics.acks}, written in {time.perf_counter() - started:.1f}s (not timed)"
        )
        runs = [
            rebuild("cold", bootstrap, topics.topology, args.roots),
            rebuild("warm", bootstrap, topics.topology, args.roots),
        ]
    runs += [in_memory(values, group=1), in_memory(values, group=FOLD_GROUP)]

    print()
    millions = args.roots / 1e6
    print(
        f"{'rebuild':<20}{'to assigned s':>14}{'replay+fold s':>15}{'total s':>9}{'cpu s':>7}"
        f"{'M entries/s':>13}{'s per M pending':>17}{'bytes/root':>12}"
    )
    for run in runs:
        fold_s = run.total_s - (run.assigned_s or 0.0)
        assigned = f"{run.assigned_s:.2f}" if run.assigned_s is not None else "-"
        print(
            f"{run.name:<20}{assigned:>14}{fold_s:>15.2f}{run.total_s:>9.2f}{run.cpu_s:>7.2f}"
            f"{millions / run.total_s:>13.2f}{run.total_s / millions:>17.2f}"
            f"{run.table_bytes / max(run.pending, 1):>12.1f}"
        )
    print(
        f"total: wall seconds from AckerWorker.run() to {args.roots:,} roots pending (connect, join the "
        f"group, fetch, decode, fold); 'to assigned' is the part before the partition was assigned; "
        f"cpu: this process's CPU seconds (the machine is shared: wall can exceed cpu)"
    )


if __name__ == "__main__":
    main()
