"""A tracked SparkSpout job with its checkpoint on HDFS: kill the driver, restart it, lose nothing.

A multi-host deployment keeps Spark's checkpoint where every driver host can reach it (HDFS, S3A);
this is that case on one machine: Hadoop's MiniDFSCluster (a name node and a data node on
127.0.0.1, hdfs_cluster.py) holds ``hdfs://127.0.0.1:<port>/rk/<topology>``, the driver is its own
process (spark_driver_script.py, as in test_spark_kill.py) and is SIGKILLed while Spark's checkpoint
is well ahead of the group commit, so the restart must find on HDFS the records Spark will not read
again. At the end: every source record has an output and a completed tree, the group commit is at
the end offsets, and the checkpoint on HDFS resumes there.
"""

from __future__ import annotations

import json
import signal

import pytest
from hdfs_cluster import WebHdfsFiles, mini_hdfs
from spark_helpers import acked_downstream, driver_args, outcomes, source_of, wait_for
from test_spark_kill import RECORDS, CommitSampler, alive, descendants, kill_leftovers, start_driver

from reliable_kafka import codec
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.offsets import end_offsets
from reliable_kafka.spark.checkpoint import read_resume_point
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    with mini_hdfs(tmp_path_factory.mktemp("minihdfs")) as cluster:
        yield cluster


def checkpoint_ahead(committed: dict[int, int], checkpoint: str, files: WebHdfsFiles) -> bool:
    """True once a third is committed and the checkpoint on HDFS is at least 300 records further."""
    try:
        resume = read_resume_point(checkpoint, files=files)
    except Exception:  # a log file being written
        return False
    done = sum(max(offset, 0) for offset in committed.values())
    ahead = sum(resume.offsets.values()) - done if resume.exists else 0
    return done >= RECORDS // 3 and ahead >= 300


@pytest.mark.timeout(1200)  # a mini-cluster and two drivers on a shared machine: past the suite's 600 s
def test_driver_killed_and_restarted_recovers_from_an_hdfs_checkpoint(kafka_bootstrap, hdfs, tmp_path):
    topology = unique_name("rk-spark-hdfs")
    source, output, group = f"{topology}.src", f"{topology}.out", f"{topology}.job"
    create_topics(kafka_bootstrap, {source: 2, output: 2})
    placed = produce_values(kafka_bootstrap, source, [f"rec-{i}".encode() for i in range(RECORDS)])
    ends = end_offsets(kafka_bootstrap, source)
    checkpoint = f"{hdfs.uri}/rk/{topology}"
    files = WebHdfsFiles(hdfs)
    args = driver_args(kafka_bootstrap, topology, source, output, group, checkpoint, max_offsets_per_trigger=300)
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
                wait_for(
                    lambda: checkpoint_ahead(sampler.latest(), checkpoint, files) or first.poll() is not None,
                    timeout=300,
                    what="the first driver to commit a third, its HDFS checkpoint 300 records ahead",
                )
                assert first.poll() is None, f"first driver exited early; see {log_path}"
                tree = descendants(first.pid)
                started.append(tree)
                first.kill()  # SIGKILL: no shutdown hook, no final commit
                first.wait(30)
                wait_for(
                    lambda: not any(alive(pid) for pid in tree), timeout=60, what="the killed driver's JVM to exit"
                )
            finally:
                if first.poll() is None:
                    first.kill()
            killed_at = dict(sampler.latest())

            second = start_driver(args, log_path)
            try:
                wait_for(
                    lambda: sampler.reached(ends) or second.poll() is not None,
                    timeout=300,
                    what="the restarted driver to commit to the end of the topic",
                )
                assert second.poll() is None, f"restarted driver exited early; see {log_path}"
                started.append(descendants(second.pid))
                second.send_signal(signal.SIGTERM)
                out, _ = second.communicate(timeout=120)
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
    print(f"killed with commits at {killed_at}; restart recovered {recovered} records; final {lines[-1]}")

    # The checkpoint is on HDFS, where Spark resumes at the end of the topic.
    resume = read_resume_point(checkpoint, files=files)
    assert resume.offsets == {(source, p): end for p, end in ends.items()}, resume
    # The restart read from it the records Spark would not read again.
    assert recovered > 0, "the restart recovered nothing between the group commit and the HDFS checkpoint"

    # Nothing lost: every source record has an output and a completed tree.
    outputs = read_topic(kafka_bootstrap, output)
    record_roots: dict[tuple[int, int], set[int]] = {}
    for message in outputs:
        partition, offset, _, _ = source_of(message.value())
        roots = codec.decode_anchors(dict(message.headers())[codec.ANCHORS_HEADER])
        record_roots.setdefault((partition, offset), set()).update(roots)
    missing = set(placed) - set(record_roots)
    assert not missing, f"{len(missing)} records never produced an output, e.g. {sorted(missing)[:5]}"
    decided = outcomes(kafka_bootstrap, topology)
    incomplete = [
        record
        for record, roots in record_roots.items()
        if not any(OutcomeKind.COMPLETED in decided.get(root, []) for root in roots)
    ]
    assert not incomplete, f"{len(incomplete)} records' trees never completed, e.g. {sorted(incomplete)[:5]}"
    assert sampler.reached(ends), f"last commit {sampler.latest()}, ends {ends}"
