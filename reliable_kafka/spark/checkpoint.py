"""Where a Spark streaming query will resume, read from its checkpoint (seed 004).

A micro-batch is planned in the offset log before it runs (``offsets/<id>``: the batch's *end*
offsets) and recorded in the commit log after its sink finished (``commits/<id>``). On restart
Spark compares the two: if the last planned batch is committed, the next batch starts at its end
offsets; if not, Spark re-runs it from its start offsets (the previous batch's end, or for batch 0
the initial offsets in ``sources/0/0``). Either way Spark resumes at the end offsets of the last
*committed* batch: every record below that point was handed to ``foreachBatch`` in a batch Spark
will not run again.

The logs are read through :class:`CheckpointFiles`: :class:`HadoopFiles` reads them with Hadoop's
FileSystem API in the Spark session's JVM, so any location Spark accepts as ``checkpointLocation``
(``file:``, ``hdfs:``, ``s3a:``, a scheme mapped by ``spark.hadoop.fs.<scheme>.impl``) is read
the way Spark wrote it; :class:`LocalFiles` reads local paths with no Spark (tests, tools).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from reliable_kafka.errors import DecodeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "KafkaOffsets",
    "ResumePoint",
    "parse_kafka_offsets",
    "read_log_entry",
    "read_resume_point",
    "log_batch_ids",
    "CheckpointFiles",
    "LocalFiles",
    "HadoopFiles",
]

KafkaOffsets = dict[tuple[str, int], int]
"""Kafka source offsets: ``(topic, partition) -> offset``."""


@dataclass(frozen=True)
class ResumePoint:
    """What a checkpoint says about a restart.

    ``offsets``: where Spark's next batch starts per source partition (empty when the checkpoint
    holds no batch). ``last_planned``/``last_committed``: the newest batch ids of the offset and
    commit logs (None: none). ``rerun``: True when the last planned batch was not committed, so
    Spark runs it again with the same offsets. ``initial``: the offsets the query first started
    from (``sources/0/0``), when present.
    """

    offsets: KafkaOffsets = field(default_factory=dict)
    last_planned: int | None = None
    last_committed: int | None = None
    initial: KafkaOffsets = field(default_factory=dict)

    @property
    def rerun(self) -> bool:
        return self.last_planned is not None and self.last_planned != self.last_committed

    @property
    def exists(self) -> bool:
        """True when Spark will resume from this checkpoint rather than start afresh."""
        return self.last_planned is not None


def parse_kafka_offsets(text: str) -> KafkaOffsets:
    """Parse Spark's Kafka source offset JSON, ``{"topic": {"0": 12, "1": 40}}``."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DecodeError("spark kafka offsets", f"not JSON: {exc}", text.encode()) from None
    if not isinstance(parsed, dict):
        raise DecodeError("spark kafka offsets", "expected a JSON object of topics", text.encode())
    offsets: KafkaOffsets = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise DecodeError("spark kafka offsets", f"topic {topic!r} has no partition map", text.encode())
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise DecodeError(
                    "spark kafka offsets", f"{topic}[{partition}] offset {offset!r} is not an integer", text.encode()
                )
            offsets[(topic, int(partition))] = offset
    return offsets


class CheckpointFiles(Protocol):
    """Read access to a checkpoint's files; paths are strings joined with ``/``."""

    def names(self, directory: str) -> list[str]:
        """Entry names in ``directory``; empty when it does not exist."""

    def read(self, path: str) -> bytes | None:
        """The content of file ``path``; None when it does not exist."""


class LocalFiles:
    """A checkpoint on the local file system (a path, or a ``file:`` URI)."""

    @staticmethod
    def _local(path: str) -> Path:
        return Path(path.removeprefix("file:"))

    def names(self, directory: str) -> list[str]:
        try:
            return os.listdir(self._local(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read(self, path: str) -> bytes | None:
        local = self._local(path)
        return local.read_bytes() if local.is_file() else None


class HadoopFiles:
    """A checkpoint read through Hadoop's FileSystem API in ``spark``'s JVM, as Spark reads it.

    Uses the session's Hadoop configuration (``spark.hadoop.*`` included), so credentials and
    file-system implementations that Spark uses for the checkpoint apply here too.
    """

    def __init__(self, spark: SparkSession) -> None:
        from py4j.java_gateway import JavaClass

        # the class itself: reaching it as _jvm.org.apache... costs a py4j round trip a dotted step
        gateway = spark.sparkContext._gateway  # typed optional: set for a running session's context
        self._path_class = JavaClass("org.apache.hadoop.fs.Path", gateway._gateway_client)  # type: ignore[union-attr]
        self._conf = spark._jsparkSession.sessionState().newHadoopConf()

    def _fs_path(self, path: str) -> tuple[Any, Any]:  # Hadoop's FileSystem and Path, through py4j
        jpath = self._path_class(path)
        return jpath.getFileSystem(self._conf), jpath

    def names(self, directory: str) -> list[str]:
        fs, jpath = self._fs_path(directory)
        if not fs.exists(jpath) or not fs.getFileStatus(jpath).isDirectory():
            return []
        return [status.getPath().getName() for status in fs.listStatus(jpath)]

    def read(self, path: str) -> bytes | None:
        fs, jpath = self._fs_path(path)
        if not fs.exists(jpath) or not fs.getFileStatus(jpath).isFile():
            return None
        stream = fs.open(jpath)
        try:
            return bytes(stream.readAllBytes())
        finally:
            stream.close()


def _join(*parts: str) -> str:
    return "/".join([parts[0].rstrip("/"), *parts[1:]])


def log_batch_ids(log_dir: str | Path, *, files: CheckpointFiles | None = None) -> list[int]:
    """Batch ids present in a metadata log directory (``offsets/`` or ``commits/``), ascending.

    Only files named by a bare number count: Hadoop's ``.N.crc`` checksums and ``.N.tmp`` files
    of an interrupted write are ignored.
    """
    names = (files or LocalFiles()).names(str(log_dir))
    return sorted(int(name) for name in names if name.isdigit())


def read_log_entry(path: str | Path, *, files: CheckpointFiles | None = None) -> list[str]:
    """The lines of a metadata log file after its version line (``v1``, ``v2``...).

    The Kafka source's initial offset file starts with a NUL byte (kept by Spark for files written
    by Spark 2.1); it is skipped.
    """
    data = (files or LocalFiles()).read(str(path))
    if data is None:
        raise DecodeError("spark metadata log", f"{path}: no such file", None)
    text = data.lstrip(b"\x00").decode("utf-8")
    lines = text.split("\n")
    if not lines or not lines[0].startswith("v") or not lines[0][1:].isdigit():
        raise DecodeError("spark metadata log", f"{path}: no version line", text.encode())
    return lines[1:]


def _offsets_in_offset_log(path: str, source_index: int, files: CheckpointFiles) -> KafkaOffsets:
    # Layout: version line, batch metadata JSON, then one line per source ("-" when absent).
    lines = read_log_entry(path, files=files)
    if len(lines) < 2 + source_index:
        raise DecodeError("spark offset log", f"{path}: no line for source {source_index}", None)
    line = lines[1 + source_index].strip()
    return {} if line in ("", "-") else parse_kafka_offsets(line)


def read_resume_point(
    checkpoint_dir: str | Path,
    *,
    source_index: int = 0,
    spark: SparkSession | None = None,
    files: CheckpointFiles | None = None,
) -> ResumePoint:
    """Read ``offsets/``, ``commits/`` and ``sources/<i>/0`` of a checkpoint.

    ``spark``: read through that session's Hadoop FileSystem (:class:`HadoopFiles`), for any
    location Spark accepts; without it (and without ``files``) a local path or ``file:`` URI.
    ``source_index`` is the query's source number (0 for a query with one Kafka source).
    A missing checkpoint gives an empty :class:`ResumePoint`.
    """
    if files is None:
        files = HadoopFiles(spark) if spark is not None else LocalFiles()
    root = str(checkpoint_dir)
    planned = log_batch_ids(_join(root, "offsets"), files=files)
    committed = log_batch_ids(_join(root, "commits"), files=files)
    initial: KafkaOffsets = {}
    initial_file = _join(root, "sources", str(source_index), "0")
    if files.read(initial_file) is not None:
        lines = read_log_entry(initial_file, files=files)
        initial = parse_kafka_offsets(lines[0]) if lines and lines[0].strip() else {}
    if not planned:
        return ResumePoint(initial=initial)
    last_planned = planned[-1]
    last_committed = committed[-1] if committed else None
    if last_committed is not None and last_committed > last_planned:
        raise DecodeError(
            "spark checkpoint",
            f"{root}: commit log is ahead of the offset log ({last_committed} > {last_planned})",
            None,
        )
    if last_committed is None:
        offsets = dict(initial)
    else:
        offsets = _offsets_in_offset_log(_join(root, "offsets", str(last_committed)), source_index, files)
    return ResumePoint(offsets=offsets, last_planned=last_planned, last_committed=last_committed, initial=initial)
