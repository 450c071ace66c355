"""A local SparkSession with Spark's Kafka connector on its classpath.

The connector (``spark-sql-kafka-0-10``) is resolved with Maven into the reliable-kafka jar cache
(apart from the broker's jars) and handed to Spark through ``spark.jars`` before the JVM starts;
``spark.jars.packages`` (Ivy at run time) is avoided on purpose.

Maven Central lacks ``spark-token-provider-kafka-0-10_2.13:4.2.0``, which the 4.2.0 connector
declares as a dependency, so the full transitive resolution fails. The connector jar is therefore
copied on its own and its three runtime dependencies are resolved beside it, with the token
provider taken from 4.0.0 (the same small API; verified by the integration tests). Only those four
jars are passed to Spark: everything else they pull in (scala-library, hadoop, compression
codecs) is already in ``pyspark/jars``, and a second copy on the classpath only invites conflicts.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from reliable_kafka.errors import ConfigError, JarResolutionError
from reliable_kafka.jars import SPARK_KAFKA_ARTIFACT, artifacts_digest, cache_dir, is_resolved, resolve_jars

__all__ = ["SPARK_KAFKA_DEPENDENCIES", "connector_jars", "spark_session", "DEFAULT_SPARK_CONF"]

SPARK_KAFKA_DEPENDENCIES = [
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0",
    "org.apache.kafka:kafka-clients:3.9.2",
    "org.apache.commons:commons-pool2:2.13.1",
]
"""Runtime dependencies of the connector that ``pyspark/jars`` does not ship."""

_DEPENDENCY_JAR_PREFIXES = ("spark-token-provider-kafka-0-10_2.13-", "kafka-clients-", "commons-pool2-")

DEFAULT_SPARK_CONF: dict[str, str] = {
    # Sized for a 2-core machine shared with other processes; override through ``extra_conf``.
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.streaming.metricsEnabled": "false",
    "spark.python.worker.reuse": "true",
    "spark.pyspark.python": sys.executable,
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def connector_jars(*, cache: Path | None = None) -> list[Path]:
    """The jars Spark needs for ``format("kafka")``, resolved on first use (Maven), then cached."""
    root = cache if cache is not None else cache_dir()
    connector = _copy_single_artifact("spark-kafka-connector-4.2.0", SPARK_KAFKA_ARTIFACT, root)
    dependencies = resolve_jars("spark-kafka-deps-4.2.0", SPARK_KAFKA_DEPENDENCIES, cache_dir=cache)
    kept = [jar for jar in dependencies if jar.name.startswith(_DEPENDENCY_JAR_PREFIXES)]
    if len(kept) != len(SPARK_KAFKA_DEPENDENCIES):
        raise JarResolutionError(
            f"spark connector dependencies incomplete: expected jars starting with "
            f"{_DEPENDENCY_JAR_PREFIXES}, found {[jar.name for jar in dependencies]}; delete "
            f"{root / 'jars' / 'spark-kafka-deps-4.2.0'} and try again"
        )
    return [connector, *kept]


def _copy_single_artifact(name: str, artifact: str, root: Path) -> Path:
    """Copy one artifact without its dependencies into ``<root>/jars/<name>`` (stamped)."""
    target = root / "jars" / name
    if not is_resolved(target, [artifact]):
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not is_resolved(target, [artifact]):
                _run_maven_copy(name, artifact, root, target)
    return next(iter(sorted(target.glob("*.jar"))))


def _run_maven_copy(name: str, artifact: str, root: Path, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            f"cannot resolve {artifact}: Maven ('mvn') is not on PATH; install Maven 3.6+ or put "
            f"the jar in {target} yourself"
        )
    print(f"reliable-kafka: fetching {artifact} with Maven (first run only)...", file=sys.stderr, flush=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    command = [
        mvn, "-B", "-q", "dependency:copy", f"-Dartifact={artifact}",
        f"-DoutputDirectory={staging}", f"-Dmaven.repo.local={root / 'm2'}",
    ]
    with tempfile.TemporaryDirectory(prefix="rk-mvn-") as work:
        done = subprocess.run(command, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=1800)
    if done.returncode != 0 or not any(staging.glob("*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join("    " + line for line in (done.stdout or "").strip().splitlines()[-15:])
        raise JarResolutionError(
            f"cannot fetch {artifact} (Maven exit code {done.returncode}); check access to Maven "
            f"Central and retry.\n  Maven output (last lines):\n{tail}"
        )
    (staging / ".resolved").write_text(artifacts_digest([artifact]) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


def spark_session(
    app_name: str,
    *,
    master: str = "local[2]",
    extra_conf: dict[str, str] | None = None,
    log_level: str = "WARN",
):
    """A SparkSession with the Kafka connector, small memory settings and the UI off.

    ``master`` defaults to ``local[2]``; use ``local[2,3]`` to let failed tasks be retried (local
    mode ignores ``spark.task.maxFailures``). ``extra_conf`` overrides :data:`DEFAULT_SPARK_CONF`;
    its ``spark.jars`` entries are added to the connector's. A session already active in the
    process is returned as it is if it has the connector, refused otherwise. JVM settings
    (``spark.driver.memory``) only apply when this call starts the JVM.
    """
    from pyspark.sql import SparkSession

    # Spark otherwise picks the host's first non-loopback address and warns about it.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter (its site-packages hold reliable_kafka and
    # confluent_kafka); Spark's default is whatever "python3" is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    conf = {**DEFAULT_SPARK_CONF, **(extra_conf or {})}
    jars = [str(jar) for jar in connector_jars()]
    if conf.get("spark.jars"):
        jars.extend(j for j in conf["spark.jars"].split(",") if j)
    conf["spark.jars"] = ",".join(jars)
    if active is not None:
        loaded = active.sparkContext.getConf().get("spark.jars", "")
        if not all(jar in loaded for jar in jars):
            raise ConfigError(
                "spark_session: a SparkSession without the Kafka connector is already running in "
                "this process; stop it first (spark.stop()) or create it with spark_session()"
            )
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
