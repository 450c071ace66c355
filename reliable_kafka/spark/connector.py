"""Spark's Kafka connector for the installed PySpark, resolved with Maven into the jar cache.

``format("kafka")`` needs ``spark-sql-kafka-0-10`` of the installed Spark's own version (its
classes implement Spark's internal source and sink interfaces, which change between minor
releases) and three runtime dependencies that ``pyspark/jars`` does not ship: Spark's Kafka token
provider, ``kafka-clients`` and ``commons-pool2``, at the versions the connector's POM declares
(:data:`CLIENT_DEPENDENCIES`, per Spark minor release). Each Spark version gets its own cache
entries (``jars/spark-kafka-connector-<version>``, ``jars/spark-kafka-deps-<version>-token-<its version>``).

The connector is copied on its own rather than resolved with its dependency graph: Maven Central
lacks the token provider of some releases (4.1.3, and 4.2.0 when it came out), which fails a full
resolution. The token provider of the connector's own version is tried first and, when Maven cannot
get it, :data:`TOKEN_PROVIDER_FALLBACK` (the same small API, used by the connector only for
delegation tokens; verified by the integration tests). Only these four jars are passed to Spark:
everything else they pull in (scala-library, compression codecs) is already in ``pyspark/jars``,
and a second copy on the classpath only invites conflicts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from reliable_kafka.errors import ConfigError, JarResolutionError
from reliable_kafka.jars import cache_dir, is_resolved, resolve_jars

__all__ = [
    "CONNECTOR",
    "TOKEN_PROVIDER",
    "TOKEN_PROVIDER_FALLBACK",
    "CLIENT_DEPENDENCIES",
    "spark_version",
    "spark_release",
    "connector_artifact",
    "dependency_candidates",
    "connector_jars",
]

CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13"
TOKEN_PROVIDER_FALLBACK = "4.0.0"
"""The token provider taken when Maven cannot get the connector's own (proven with 4.1 and 4.2)."""

CLIENT_DEPENDENCIES: dict[tuple[int, int], tuple[str, ...]] = {
    (4, 1): ("org.apache.kafka:kafka-clients:3.9.1", "org.apache.commons:commons-pool2:2.12.1"),
    (4, 2): ("org.apache.kafka:kafka-clients:3.9.2", "org.apache.commons:commons-pool2:2.13.1"),
}
"""The connector's other runtime dependencies as its POM declares them, per Spark (major, minor);
a release outside the table takes the nearest older entry's (else the oldest)."""

_DEPENDENCY_JAR_PREFIXES = ("spark-token-provider-kafka-0-10_2.13-", "kafka-clients-", "commons-pool2-")


def spark_version() -> str:
    """The installed PySpark's version (the Spark the session's JVM runs)."""
    import pyspark

    return str(pyspark.__version__)


def spark_release(version: str) -> tuple[int, int, int]:
    """``"4.1.3"`` as ``(4, 1, 3)``; a suffix (``4.2.0.dev1``) is dropped. :class:`ConfigError`
    for a version that does not start with three numbers."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version.strip())
    if found is None:
        raise ConfigError(
            f"Spark version {version!r}: expected MAJOR.MINOR.PATCH, the release whose Kafka "
            f"connector ({CONNECTOR}) to resolve"
        )
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def connector_artifact(version: str) -> str:
    """The connector's coordinates for Spark ``version``."""
    return f"{CONNECTOR}:{'.'.join(map(str, spark_release(version)))}"


def dependency_candidates(version: str) -> list[list[str]]:
    """The dependency sets to try, in order: with the connector's own token provider, then with
    :data:`TOKEN_PROVIDER_FALLBACK` (when that differs)."""
    release = spark_release(version)
    minor = release[:2]
    older = [known for known in CLIENT_DEPENDENCIES if known <= minor]
    clients = list(CLIENT_DEPENDENCIES[max(older) if older else min(CLIENT_DEPENDENCIES)])
    own = ".".join(map(str, release))
    tokens = [own] if own == TOKEN_PROVIDER_FALLBACK else [own, TOKEN_PROVIDER_FALLBACK]
    return [[f"{TOKEN_PROVIDER}:{token}", *clients] for token in tokens]


def connector_jars(*, cache: Path | None = None, version: str | None = None) -> list[Path]:
    """The jars Spark ``version`` (default: the installed PySpark's) needs for ``format("kafka")``,
    resolved on first use (Maven), then cached."""
    version = ".".join(map(str, spark_release(version or spark_version())))
    root = cache if cache is not None else cache_dir()
    connector = _copy_single_artifact(f"spark-kafka-connector-{version}", connector_artifact(version), root)
    # one cache entry per token provider: a fallback taken once is found again without asking Maven
    candidates = [
        (f"spark-kafka-deps-{version}-token-{artifacts[0].rsplit(':', 1)[1]}", artifacts)
        for artifacts in dependency_candidates(version)
    ]
    resolved = [(name, artifacts) for name, artifacts in candidates if is_resolved(root / "jars" / name, artifacts)]
    failures: list[str] = []
    for name, artifacts in resolved[:1] or candidates:
        try:
            dependencies = resolve_jars(name, artifacts, cache_dir=root)
            break
        except JarResolutionError as error:
            failures.append(str(error))
            if artifacts is not candidates[-1][1]:
                print(
                    f"reliable-kafka: {artifacts[0]} could not be resolved; trying {candidates[-1][1][0]} instead",
                    file=sys.stderr,
                    flush=True,
                )
    else:
        raise JarResolutionError(
            f"cannot resolve the runtime dependencies of {connector_artifact(version)}:\n" + "\n".join(failures)
        )
    kept = [jar for jar in dependencies if jar.name.startswith(_DEPENDENCY_JAR_PREFIXES)]
    if len(kept) != len(_DEPENDENCY_JAR_PREFIXES):
        raise JarResolutionError(
            f"spark connector dependencies incomplete: expected jars starting with "
            f"{_DEPENDENCY_JAR_PREFIXES}, found {[jar.name for jar in dependencies]}; delete "
            f"{root / 'jars' / name} and try again"
        )
    return [connector, *kept]


def _copy_single_artifact(name: str, artifact: str, root: Path) -> Path:
    """One artifact without its dependencies, in ``<root>/jars/<name>`` (resolved once, then cached)."""
    try:
        jars = resolve_jars(name, [artifact], cache_dir=root, transitive=False)
    except JarResolutionError as error:
        raise JarResolutionError(
            f"{error}\n  Maven Central may not serve the Kafka connector of this Spark release: install a "
            f"PySpark release whose connector it serves ({CONNECTOR})."
        ) from None
    artifact_id = artifact.split(":")[1]
    return next(jar for jar in jars if jar.name.startswith(artifact_id))
