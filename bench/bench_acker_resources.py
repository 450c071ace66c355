"""What one acker worker process costs at a steady, moderate rate: resident memory and CPU.

The figures behind the Helm chart's default resources (deploy/helm/reliable-kafka/values.yaml).
One ``python -m reliable_kafka acker`` process (4 ack partitions, ``--metrics-port``) folds ack
events written by this process at ``--rate`` trees a second, each a tree of four tuples as a spout
and a bolt would send them (INIT from the spout; three ACKs from the bolt: the input anchored to
two outputs, then the two outputs), every 100 ms, one record per sender and partition. The acker's
own ``/metrics`` gives its ``process_resident_memory_bytes`` and ``process_cpu_seconds_total``;
the figures are taken idle (after start) and over ``--seconds`` of load after ``--warmup``
seconds. Prints figures, asserts nothing. Usage: ``./rk bench acker_resources [--rate 2000]
[--seconds 60] [--warmup 20] [--bootstrap-servers HOST:PORT]`` (without one, an embedded broker
is started and stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from reliable_kafka import codec
from reliable_kafka.core.ids import new_id, partition_for_root
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.testing.topics import unique_name

ACKERS = 4


def trees(count: int, spout: int, bolt: int) -> list[tuple[int, bytes]]:
    """``count`` complete trees as records: (partition, value), one per sender and partition."""
    inits: dict[int, list] = {}
    acks: dict[int, list] = {}
    for _ in range(count):
        root, a, b, c = new_id(), new_id(), new_id(), new_id()
        partition = partition_for_root(root, ACKERS)
        inits.setdefault(partition, []).append((EventKind.INIT, root, a))
        acks.setdefault(partition, []).extend(
            [(EventKind.ACK, root, a ^ b ^ c), (EventKind.ACK, root, b), (EventKind.ACK, root, c)]
        )
    records = []
    for sender, by_partition in ((spout, inits), (bolt, acks)):
        for partition, entries in by_partition.items():
            kinds, roots, vals = zip(*entries, strict=True)
            records.append((partition, codec.encode_ack_batch(sender, kinds, roots, vals)))
    return records


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("process_resident_memory_bytes", "process_cpu_seconds_total"):
                out[sample.name] = sample.value
            elif sample.name == "rk_acker_outcomes_total":
                out[f"outcomes_{sample.labels['outcome']}"] = sample.value
            elif sample.name == "rk_acker_entries_total":
                out["entries"] = sample.value
            elif sample.name == "rk_acker_table_bytes":
                out["table_bytes"] = sample.value
    return out


def wait_ready(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        time.sleep(0.5)
    raise SystemExit(f"the acker was not ready within {timeout:.0f} s")


def run(bootstrap: str, args: argparse.Namespace) -> None:
    topology = unique_name("resources")
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="acker-", suffix=".log", delete=False)
    acker = subprocess.Popen(
        [sys.executable, "-m", "reliable_kafka", "acker", f"--topology={topology}", f"--bootstrap-servers={bootstrap}",
         f"--ackers={ACKERS}", f"--metrics-port={port}", "--name=bench-acker"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    try:
        wait_ready(port, 120)
        time.sleep(5)
        idle = scrape(port)
        t0 = time.monotonic()
        time.sleep(10)
        idle_cpu = (scrape(port)["process_cpu_seconds_total"] - idle["process_cpu_seconds_total"]) / (
            time.monotonic() - t0
        )
        stop = threading.Event()
        spout, bolt = new_id(), new_id()

        def feed() -> None:
            while not stop.is_set():
                started = time.monotonic()
                for partition, value in trees(args.rate // 10, spout, bolt):
                    producer.produce(f"{topology}.acks", value, partition=partition)
                producer.poll(0)
                stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
            producer.flush(30)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(args.warmup)
        first, t1 = scrape(port), time.monotonic()
        peak_rss = first["process_resident_memory_bytes"]
        while time.monotonic() - t1 < args.seconds:
            time.sleep(2)
            peak_rss = max(peak_rss, scrape(port)["process_resident_memory_bytes"])
        last, t2 = scrape(port), time.monotonic()
        stop.set()
        feeder.join(timeout=30)
        elapsed = t2 - t1
        done = (last.get("outcomes_completed", 0) - first.get("outcomes_completed", 0)) / elapsed
        entries = (last.get("entries", 0) - first.get("entries", 0)) / elapsed
        cpu = (last["process_cpu_seconds_total"] - first["process_cpu_seconds_total"]) / elapsed
        mib = 1024 * 1024
        print(f"acker idle:   RSS {idle['process_resident_memory_bytes'] / mib:.0f} MiB, CPU {idle_cpu:.3f} cores")
        print(
            f"acker loaded: {done:.0f} trees/s completed, {entries:.0f} ack entries/s folded, "
            f"RSS {last['process_resident_memory_bytes'] / mib:.0f} MiB (peak {peak_rss / mib:.0f}), "
            f"CPU {cpu:.3f} cores, table {last.get('table_bytes', 0) / 1024:.0f} KiB "
            f"(fed {args.rate} trees/s over {elapsed:.0f} s after {args.warmup:.0f} s warm-up)"
        )
    finally:
        acker.terminate()
        acker.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000, help="trees a second (default: 2000)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--bootstrap-servers", default=None)
    args = parser.parse_args()
    if args.bootstrap_servers:
        run(args.bootstrap_servers, args)
        return
    from reliable_kafka.broker import EmbeddedKafka

    with EmbeddedKafka() as kafka:
        run(kafka.bootstrap_servers, args)


if __name__ == "__main__":
    main()
