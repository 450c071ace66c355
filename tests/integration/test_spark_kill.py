"""Kill the Spark driver (SIGKILL) mid-run and restart it on the same checkpoint (docs/design.md section 8.1, 8.4).

The driver is its own process (spark_driver_script.py). While it runs, the test samples the
job's committed offsets; at the end it checks that no record was lost (every source record has
an output) and that no sampled commit ever passed a record whose tree had not completed by the
time the sample was read (completion times are the ackers' outcome records' timestamps). It also
checks that the killed driver's JVM and Python workers die with it. The downstream lags behind
Spark and fails the first attempt of every 50th record, so trees are still open (or failed, waiting
for a redelivery the killed driver can no longer make) when the driver dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from spark_helpers import acked_downstream, driver_args, source_of, wait_for

from reliable_kafka import codec
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.offsets import end_offsets
from reliable_kafka.spark.checkpoint import read_resume_point
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).with_name("spark_driver_script.py")
RECORDS = 3000


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_leftovers(pids: set[int]) -> None:
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class CommitSampler(threading.Thread):
    """Reads the job's committed offsets every 0.3 s: [(wall ms when read, {partition: offset})]."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        super().__init__(name="commit-sampler", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self.samples: list[tuple[int, dict[int, int]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.wait(0.3):
                committed = {tp.partition: tp.offset for tp in self.consumer.committed(self.partitions, timeout=10)}
                self.samples.append((int(time.time() * 1000), committed))
        finally:
            self.consumer.close()

    def latest(self) -> dict[int, int]:
        return self.samples[-1][1] if self.samples else {}

    def reached(self, ends: dict[int, int]) -> bool:
        """The latest commit is at ``ends``; a partition that never held a record needs no commit."""
        latest = self.latest()
        return bool(latest) and all(max(latest.get(p, -1), 0) == end for p, end in ends.items())


def lagging_commit(committed: dict[int, int], checkpoint: Path, *, done_at_least: int) -> bool:
    """True once ``done_at_least`` records are committed and Spark's checkpoint is at least 300
    records further."""
    try:
        resume = read_resume_point(checkpoint)
    except Exception:  # a log file being written
        return False
    done = sum(max(offset, 0) for offset in committed.values())
    ahead = sum(resume.offsets.values()) - done if resume.exists else 0
    return done >= done_at_least and ahead >= 300


def checkpoint_offsets(checkpoint: Path) -> object:
    """Where Spark's checkpoint resumes, for a failure message."""
    try:
        return read_resume_point(checkpoint).offsets
    except Exception as exc:
        return f"unreadable ({exc})"


def start_driver(args: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab")
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=SCRIPT.parent,
        start_new_session=True,
    )


@pytest.mark.parametrize("single_query", [False, True], ids=["foreach-batch", "single-query"])
def test_driver_killed_mid_run_loses_nothing_and_never_commits_past_an_incomplete_record(
    kafka_bootstrap, tmp_path, single_query
):
    """Either path: the foreachBatch spout, or the spout as one streaming query (``--single-query``),
    whose batches are registered when Spark commits them and whose commit is held back the same way
    by the trees still open downstream."""
    topology = unique_name("rk-spark-kill")
    source, output, group = f"{topology}.src", f"{topology}.out", f"{topology}.job"
    create_topics(kafka_bootstrap, {source: 2, output: 2})
    placed = produce_values(kafka_bootstrap, source, [f"rec-{i}".encode() for i in range(RECORDS)])
    ends = end_offsets(kafka_bootstrap, source)
    checkpoint = tmp_path / "ckpt"
    args = driver_args(kafka_bootstrap, topology, source, output, group, checkpoint, max_offsets_per_trigger=300)
    if single_query:
        args.append("--single-query")
    log_path = tmp_path / "driver.log"
    sampler = CommitSampler(kafka_bootstrap, group, source, len(ends))
    started: list[set[int]] = []
    with acked_downstream(
        kafka_bootstrap,
        topology,
        output,
        timeout_ms=10_000,
        delay_s=0.004,
        fail_first=lambda partition, offset: offset % 50 == 11,
    ):
        sampler.start()
        try:
            first = start_driver(args, log_path)
            try:
                # Kill while Spark's checkpoint is well ahead of the group commit: the restart must
                # then process again records that Spark will not re-read. A single query's commit
                # moves in jumps: its failed records are redelivered by batch jobs beside the
                # running query, by which time most of the other failures (every 50th record) are
                # due too, so the commit can leap from the first failure past the point where
                # Spark is 300 ahead. It is killed once anything is committed.
                done_at_least = 1 if single_query else RECORDS // 3
                try:
                    wait_for(
                        lambda: (
                            lagging_commit(sampler.latest(), checkpoint, done_at_least=done_at_least)
                            or first.poll() is not None
                        ),
                        timeout=240,
                        what=f"the first driver to commit {done_at_least} records, Spark 300 records ahead",
                    )
                except AssertionError as exc:
                    raise AssertionError(
                        f"{exc}; last group commit {sampler.latest()}, Spark's checkpoint at "
                        f"{checkpoint_offsets(checkpoint)}"
                    ) from None
                assert first.poll() is None, f"first driver exited early; see {log_path}"
                tree = descendants(first.pid)
                started.append(tree)
                assert any("java" in _cmdline(pid) for pid in tree), "no JVM below the driver"
                first.kill()  # SIGKILL: no shutdown hook, no final commit
                first.wait(30)
                wait_for(
                    lambda: not any(alive(pid) for pid in tree),
                    timeout=60,
                    what=f"the killed driver's JVM and workers {sorted(tree)} to exit",
                )
            finally:
                if first.poll() is None:
                    first.kill()
            killed_at = dict(sampler.latest())

            second = start_driver(args, log_path)
            try:
                wait_for(
                    lambda: sampler.reached(ends) or second.poll() is not None,
                    timeout=240,
                    what="the restarted driver to commit to the end of the topic",
                )
                assert second.poll() is None, f"restarted driver exited early; see {log_path}"
                tree = descendants(second.pid)
                started.append(tree)
                second.send_signal(signal.SIGTERM)
                out, _ = second.communicate(timeout=120)
                wait_for(
                    lambda: not any(alive(pid) for pid in tree),
                    timeout=60,
                    what="the stopped driver's JVM and workers to exit",
                )
            finally:
                if second.poll() is None:
                    second.kill()
                    second.wait(30)
        finally:
            sampler.stop.set()
            sampler.join(30)
            for tree in started:
                kill_leftovers(tree)

    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    recovered = lines[0]["recovered"]
    assert lines[0]["single_query"] is single_query, lines[0]
    print(f"killed with commits at {killed_at}; restart recovered {recovered} records; final {lines[-1]}")

    # No loss: every source record has an output.
    outputs = read_topic(kafka_bootstrap, output)
    produced = {(p, o) for p, o, _, _ in map(lambda m: source_of(m.value()), outputs)}
    missing = set(placed) - produced
    assert not missing, f"{len(missing)} records never produced an output, e.g. {sorted(missing)[:5]}"

    # No commit past an incomplete record: completion time of each record = its first COMPLETED.
    record_of_root = {}
    for message in outputs:
        partition, offset, _, _ = source_of(message.value())
        for root in codec.decode_anchors(dict(message.headers())[codec.ANCHORS_HEADER]):
            record_of_root[root] = (partition, offset)
    completed_at: dict[tuple[int, int], int] = {}
    for message in read_topic(kafka_bootstrap, TopologyTopics(topology).outcomes):
        batch = codec.decode_outcomes(message.value())
        for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
            record = record_of_root.get(root)
            if kind == OutcomeKind.COMPLETED and record is not None and record not in completed_at:
                completed_at[record] = message.timestamp()[1]
    violations = [
        (partition, offset, observed)
        for observed, committed in sampler.samples
        for partition, point in committed.items()
        for offset in range(max(point, 0))
        if completed_at.get((partition, offset), observed + 1) > observed
    ]
    assert not violations, f"commits passed incomplete records (partition, offset, sample time): {violations[:5]}"
    assert len(sampler.samples) > 10
    assert sampler.reached(ends), f"last commit {sampler.latest()}, ends {ends}"
    assert recovered > 0, "the restart processed nothing between the group commit and Spark's checkpoint"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
