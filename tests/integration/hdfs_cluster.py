"""A one-datanode HDFS on 127.0.0.1 for the Spark checkpoint tests: Hadoop's MiniDFSCluster in a
JVM subprocess (hdfs/MiniHdfs.java, run by ``java`` as a source file), and WebHDFS reads of what
Spark wrote there.

The jars are Maven Central's ``org.apache.hadoop:hadoop-client-minicluster`` of the Hadoop version
pyspark ships (its ``jars/hadoop-client-api-<version>.jar``), resolved into the per-user jar cache.
The JVM serves until its stdin closes: :func:`mini_hdfs` closes it on exit, and a test process that
dies closes it too, so no name node outlives the test.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reliable_kafka.broker.node import find_java
from reliable_kafka.jars import resolve_jars

LAUNCHER = Path(__file__).parent / "hdfs" / "MiniHdfs.java"
READY = "READY "


def pyspark_hadoop_version() -> str:
    """The Hadoop client version pyspark ships (``hadoop-client-api-<version>.jar``)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise RuntimeError("pyspark ships no hadoop-client-api jar: cannot tell which HDFS to run")
    return jars[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def minicluster_jars() -> list[Path]:
    version = pyspark_hadoop_version()
    return resolve_jars(f"hadoop-minicluster-{version}", [f"org.apache.hadoop:hadoop-client-minicluster:{version}"])


@dataclass(frozen=True)
class MiniHdfs:
    uri: str  # hdfs://127.0.0.1:<rpc port>
    http_port: int  # the name node's web port (WebHDFS)
    log_path: Path


@contextmanager
def mini_hdfs(base: Path, *, timeout: float = 240.0) -> Iterator[MiniHdfs]:
    """Start the mini-cluster under ``base``; yield where it listens; shut it down on exit."""
    base.mkdir(parents=True, exist_ok=True)
    classpath = ":".join(sorted({str(jar.parent / "*") for jar in minicluster_jars()}))
    log_path = base / "minihdfs.log"
    log = open(log_path, "ab")
    process = subprocess.Popen(
        [find_java(), "-Xmx512m", "-cp", classpath, str(LAUNCHER), str(base / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
    )
    ready: list[str] = []

    def read_ready() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY):
                ready.append(line)
                return

    reader = threading.Thread(target=read_ready, name="minihdfs-ready", daemon=True)
    reader.start()
    try:
        reader.join(timeout)
        if not ready:
            raise AssertionError(
                f"the HDFS mini-cluster did not start within {timeout:.0f} s "
                f"(exit code {process.poll()}); see {log_path}"
            )
        _, uri, http_port = ready[0].split()
        yield MiniHdfs(uri=uri, http_port=int(http_port), log_path=log_path)
    finally:
        assert process.stdin is not None
        process.stdin.close()  # MiniHdfs shuts the cluster down at end of input
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
        log.close()


class WebHdfsFiles:
    """:class:`reliable_kafka.spark.checkpoint.CheckpointFiles` over WebHDFS: the test reads the
    checkpoint Spark wrote to HDFS without a Spark session of its own."""

    def __init__(self, hdfs: MiniHdfs) -> None:
        self._base = f"http://127.0.0.1:{hdfs.http_port}/webhdfs/v1"
        self._prefix = hdfs.uri

    def _url(self, path: str, op: str) -> str:
        local = path.removeprefix(self._prefix) or "/"
        return f"{self._base}{urllib.parse.quote(local)}?op={op}&user.name=rk-test"

    def names(self, directory: str) -> list[str]:
        try:
            with urllib.request.urlopen(self._url(directory, "LISTSTATUS"), timeout=30) as answer:
                statuses = json.load(answer)["FileStatuses"]["FileStatus"]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
        return [status["pathSuffix"] for status in statuses]

    def read(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self._url(path, "OPEN"), timeout=30) as answer:  # follows the redirect
                return answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
