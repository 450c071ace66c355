"""Reading where Spark resumes from a checkpoint's offset and commit logs (no Spark started).

Files are written in the exact layout Spark 4.2 writes (checked against a real checkpoint): a
version line, the batch metadata JSON, one line per source; the Kafka source's initial offsets
file starts with a NUL byte; Hadoop leaves ``.N.crc`` files beside each entry.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka.errors import DecodeError
from reliable_kafka.spark.checkpoint import log_batch_ids, parse_kafka_offsets, read_resume_point

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1795256261556,"conf":{"spark.sql.shuffle.partitions":"2"}}'


def kafka_json(offsets):
    by_topic = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(by_topic)


def write_checkpoint(root, *, initial=None, planned=(), committed=0):
    """``planned``: end offsets of batches 0..n-1; the first ``committed`` of them are committed."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"7c51fdca-f898-4e08-8b82-2f95a5f184f6"}')
    if initial is not None:
        (root / "sources" / "0").mkdir(parents=True)
        (root / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + kafka_json(initial).encode())
    for batch_id, offsets in enumerate(planned):
        (root / "offsets" / str(batch_id)).write_text(f"v1\n{METADATA}\n{kafka_json(offsets)}")
        (root / "offsets" / f".{batch_id}.crc").write_bytes(b"crc")
    for batch_id in range(committed):
        (root / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (root / "commits" / f".{batch_id}.crc").write_bytes(b"crc")


def test_missing_checkpoint_means_a_fresh_query(tmp_path):
    resume = read_resume_point(tmp_path / "nothing-here")
    assert not resume.exists and resume.offsets == {} and not resume.rerun


def test_all_planned_batches_committed_resumes_at_the_last_end(tmp_path):
    write_checkpoint(
        tmp_path,
        initial={("t", 0): 0, ("t", 1): 5},
        planned=[{("t", 0): 10, ("t", 1): 15}, {("t", 0): 20, ("t", 1): 30}],
        committed=2,
    )
    resume = read_resume_point(tmp_path)
    assert resume.exists and not resume.rerun
    assert (resume.last_planned, resume.last_committed) == (1, 1)
    assert resume.offsets == {("t", 0): 20, ("t", 1): 30}
    assert resume.initial == {("t", 0): 0, ("t", 1): 5}


def test_uncommitted_last_batch_is_rerun_from_its_start(tmp_path):
    write_checkpoint(
        tmp_path, initial={("t", 0): 0}, planned=[{("t", 0): 10}, {("t", 0): 20}, {("t", 0): 35}], committed=2
    )
    resume = read_resume_point(tmp_path)
    assert resume.rerun and (resume.last_planned, resume.last_committed) == (2, 1)
    assert resume.offsets == {("t", 0): 20}


def test_first_batch_never_committed_resumes_at_the_initial_offsets(tmp_path):
    write_checkpoint(tmp_path, initial={("t", 0): 3, ("u", 2): 7}, planned=[{("t", 0): 10, ("u", 2): 9}])
    resume = read_resume_point(tmp_path)
    assert resume.rerun and resume.last_committed is None
    assert resume.offsets == {("t", 0): 3, ("u", 2): 7}


def test_temporary_and_checksum_files_are_ignored(tmp_path):
    write_checkpoint(tmp_path, planned=[{("t", 0): 10}], committed=1)
    (tmp_path / "offsets" / ".1.tmp").write_text("v1\npartial")
    (tmp_path / "offsets" / "1.tmp").write_text("v1\npartial")
    assert log_batch_ids(tmp_path / "offsets") == [0]
    assert read_resume_point(tmp_path).offsets == {("t", 0): 10}


def test_file_uri_prefix_is_accepted(tmp_path):
    write_checkpoint(tmp_path, planned=[{("t", 0): 4}], committed=1)
    assert read_resume_point(f"file:{tmp_path}").offsets == {("t", 0): 4}


def test_commit_log_ahead_of_offset_log_is_refused(tmp_path):
    write_checkpoint(tmp_path, planned=[{("t", 0): 4}], committed=1)
    (tmp_path / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}')
    with pytest.raises(DecodeError):
        read_resume_point(tmp_path)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"t": 5}', '{"t": {"0": "x"}}', '{"t": {"0": true}}'])
def test_offsets_that_are_not_spark_kafka_offsets_are_refused(text):
    with pytest.raises(DecodeError):
        parse_kafka_offsets(text)


def test_entry_without_version_line_is_refused(tmp_path):
    write_checkpoint(tmp_path, planned=[{("t", 0): 4}], committed=1)
    (tmp_path / "offsets" / "0").write_text(kafka_json({("t", 0): 4}))
    with pytest.raises(DecodeError):
        read_resume_point(tmp_path)


@given(
    steps=st.lists(
        st.dictionaries(st.integers(0, 3), st.integers(0, 50), min_size=4, max_size=4), min_size=1, max_size=8
    ),
    uncommitted=st.booleans(),
)
@settings(deadline=None)  # file I/O per example: a busy machine must not fail it
def test_resume_point_is_the_end_of_the_last_committed_batch(tmp_path_factory, steps, uncommitted):
    root = tmp_path_factory.mktemp("ckpt")
    initial = {("t", p): 0 for p in range(4)}
    planned, ends = [], dict(initial)
    for step in steps:
        ends = {("t", p): ends[("t", p)] + step[p] for p in range(4)}
        planned.append(dict(ends))
    committed = len(planned) - 1 if uncommitted else len(planned)
    write_checkpoint(root, initial=initial, planned=planned, committed=committed)
    resume = read_resume_point(root)
    assert resume.offsets == (planned[committed - 1] if committed else initial)
    assert resume.rerun == uncommitted


def test_file_uri_forms(tmp_path):
    write_checkpoint(tmp_path, initial={("t", 0): 0}, planned=[{("t", 0): 4}, {("t", 0): 9}], committed=2)
    for form in (f"file://{tmp_path}", f"file:{tmp_path}", f"file://{tmp_path}/"):
        assert read_resume_point(form).offsets == {("t", 0): 9}, form


class DictFiles:
    """A checkpoint held in a dict: what a non-local file system looks like to the reader."""

    def __init__(self, files):
        self.files = files

    def names(self, directory):
        prefix = directory.rstrip("/") + "/"
        return sorted({path[len(prefix) :].split("/")[0] for path in self.files if path.startswith(prefix)})

    def read(self, path):
        return self.files.get(path)


def test_reads_through_any_checkpoint_files():
    root = "s3a://bucket/checkpoints/job"
    files = DictFiles(
        {
            f"{root}/sources/0/0": b"\x00v1\n" + kafka_json({("t", 0): 2}).encode(),
            f"{root}/offsets/0": f"v1\n{METADATA}\n{kafka_json({('t', 0): 5})}".encode(),
            f"{root}/offsets/.0.crc": b"crc",
            f"{root}/offsets/1": f"v1\n{METADATA}\n{kafka_json({('t', 0): 8})}".encode(),
            f"{root}/commits/0": b'v1\n{"nextBatchWatermarkMs":0}',
        }
    )
    resume = read_resume_point(root, files=files)
    assert (resume.last_planned, resume.last_committed, resume.rerun) == (1, 0, True)
    assert resume.offsets == {("t", 0): 5}
    assert resume.initial == {("t", 0): 2}
    assert not read_resume_point("s3a://bucket/elsewhere", files=files).exists
