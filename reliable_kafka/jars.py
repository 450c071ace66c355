"""Resolve Maven artifacts (with their runtime dependencies) into a per-user jar cache.

The embedded Kafka broker and Spark's Kafka connector both need jars from Maven Central. Maven
does the resolution once per artifact set; a stamp file (a hash of the coordinates) makes every
later call return the cached jars without running Maven.

Layout under :func:`cache_dir`::

    jars/<name>/*.jar        the resolved jars of one artifact set
    jars/<name>/.resolved    stamp: hash of the coordinates that produced them
    m2/                      Maven's local repository (kept apart from ~/.m2)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from reliable_kafka.errors import ConfigError, JarResolutionError

__all__ = [
    "KAFKA_VERSION",
    "KAFKA_VERSION_ENV",
    "LOG4J2_VERSION",
    "OLDEST_SUPPORTED_KAFKA",
    "TESTED_KAFKA_VERSIONS",
    "cache_dir",
    "kafka_artifacts",
    "kafka_jars",
    "kafka_version",
    "check_kafka_version",
    "parse_kafka_version",
    "resolve_jars",
    "artifacts_digest",
    "is_resolved",
]

KAFKA_VERSION = "4.4.0"
"""The Kafka broker version the embedded broker runs by default (``org.apache.kafka:kafka_2.13``):
the newest of :data:`TESTED_KAFKA_VERSIONS`."""

TESTED_KAFKA_VERSIONS = ("3.9.1", "4.1.1", "4.4.0")
"""The broker versions the integration core runs against in CI (``.ci/kafka-versions.sh``)."""

OLDEST_SUPPORTED_KAFKA = (3, 9)
"""Brokers older than this (major, minor) are outside the tested range: components warn at start."""

KAFKA_VERSION_ENV = "RK_KAFKA_VERSION"
"""The environment variable that picks the embedded broker's version (tests, benches, ``kafka up``)."""

# Kafka 3.9 to 4.4 log through slf4j 1.7.36 (their POMs pin it) and 4.x ships log4j2 2.24.3 in its
# distribution; slf4j 1.x needs the ``log4j-slf4j-impl`` binding (``log4j-slf4j2-impl`` is for
# slf4j 2.x and would stay silent). Kafka 3.9's distribution logs through reload4j instead, which
# its POM leaves out: the same log4j2 binding serves it.
LOG4J2_VERSION = "2.24.3"

_MAVEN_DEPENDENCY_PLUGIN = "3.8.1"
_STAMP = ".resolved"
_MVN_TIMEOUT_S = 1800.0


def cache_dir() -> Path:
    """The per-user cache root: ``$RK_CACHE_DIR``, else ``$XDG_CACHE_HOME/reliable-kafka``,
    else ``~/.cache/reliable-kafka``."""
    explicit = os.environ.get("RK_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "reliable-kafka"
    return Path.home() / ".cache" / "reliable-kafka"


_default_cache_dir = cache_dir  # resolve_jars' keyword argument shadows the function's name


def parse_kafka_version(version: str) -> tuple[int, int, int]:
    """``"4.1.1"`` as ``(4, 1, 1)``; :class:`ConfigError` for anything but three numbers."""
    parts = version.strip().split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ConfigError(
            f"Kafka version {version!r}: expected a release as MAJOR.MINOR.PATCH "
            f"(tested: {', '.join(TESTED_KAFKA_VERSIONS)})"
        )
    major, minor, patch = (int(part) for part in parts)
    return major, minor, patch


def check_kafka_version(version: str, *, what: str = "Kafka version") -> str:
    """``version`` if the embedded broker can run it (a MAJOR.MINOR.PATCH release, 3.9 or newer),
    else a :class:`ConfigError` naming ``what`` (the parameter or variable it came from)."""
    try:
        parsed = parse_kafka_version(version)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if parsed[:2] < OLDEST_SUPPORTED_KAFKA:
        oldest = ".".join(map(str, OLDEST_SUPPORTED_KAFKA))
        raise ConfigError(
            f"{what}={version!r}: the embedded broker runs Kafka {oldest} or newer "
            f"(tested: {', '.join(TESTED_KAFKA_VERSIONS)})"
        )
    return version.strip()


def kafka_version(env: Mapping[str, str] | None = None) -> str:
    """The embedded broker's version: ``$RK_KAFKA_VERSION`` if set, else :data:`KAFKA_VERSION`.

    A version older than :data:`OLDEST_SUPPORTED_KAFKA` is refused (:class:`ConfigError`): the
    embedded broker only knows how to configure KRaft releases from 3.9 on.
    """
    env = os.environ if env is None else env
    chosen = env.get(KAFKA_VERSION_ENV, "").strip() or KAFKA_VERSION
    return check_kafka_version(chosen, what=KAFKA_VERSION_ENV)


def kafka_artifacts(version: str = KAFKA_VERSION) -> list[str]:
    """Coordinates of a runnable Kafka broker: the broker plus a log4j2 backend for slf4j 1.x."""
    return [
        f"org.apache.kafka:kafka_2.13:{version}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J2_VERSION}",
        f"org.apache.logging.log4j:log4j-core:{LOG4J2_VERSION}",
        f"org.apache.logging.log4j:log4j-api:{LOG4J2_VERSION}",
    ]


def kafka_jars(version: str = KAFKA_VERSION, *, cache_dir: Path | None = None) -> list[Path]:
    """The classpath of a Kafka broker ``version`` (resolved with Maven on first use)."""
    return resolve_jars(f"kafka-{version}", kafka_artifacts(version), cache_dir=cache_dir)


def artifacts_digest(artifacts: Sequence[str]) -> str:
    """The stamp content for an artifact set (order-insensitive, duplicates ignored)."""
    canonical = "\n".join(sorted({a.strip() for a in artifacts}))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _stamp(artifacts: Sequence[str], transitive: bool) -> str:
    return artifacts_digest(artifacts) + ("" if transitive else " excludeTransitive")


def is_resolved(target: Path, artifacts: Sequence[str], *, transitive: bool = True) -> bool:
    """True when ``target`` holds jars resolved for exactly ``artifacts`` (and ``transitive``)."""
    stamp = target / _STAMP
    try:
        recorded = stamp.read_text().strip()
    except OSError:
        return False
    return recorded == _stamp(artifacts, transitive) and any(target.glob("*.jar"))


def resolve_jars(
    name: str,
    artifacts: list[str],
    *,
    cache_dir: Path | None = None,
    transitive: bool = True,
) -> list[Path]:
    """Resolve ``artifacts`` ("group:artifact:version") and their runtime dependencies.

    Returns the sorted jar paths in ``<cache>/jars/<name>``. The first call runs Maven (progress
    on stderr); later calls for the same artifact set only read the stamp. Concurrent callers are
    serialised with a file lock. ``transitive=False`` copies only the artifacts themselves.
    Raises :class:`JarResolutionError` when Maven is missing, offline or fails.
    """
    coordinates = [_parse_coordinate(a) for a in artifacts]
    if not coordinates:
        raise JarResolutionError(f"resolve_jars({name!r}): no artifacts given")
    root = cache_dir if cache_dir is not None else _default_cache_dir()
    target = root / "jars" / name
    if is_resolved(target, artifacts, transitive=transitive):
        return _jars_in(target)

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_resolved(target, artifacts, transitive=transitive):  # done while we waited
            return _jars_in(target)
        _run_maven(name, coordinates, artifacts, transitive, root=root, target=target)
    return _jars_in(target)


def _jars_in(target: Path) -> list[Path]:
    return sorted(target.glob("*.jar"))


def _parse_coordinate(artifact: str) -> tuple[str, str, str]:
    parts = artifact.strip().split(":")
    if len(parts) != 3 or not all(parts):
        raise JarResolutionError(f"bad Maven coordinate {artifact!r}: expected 'group:artifact:version'")
    return parts[0], parts[1], parts[2]


def _pom(coordinates: Sequence[tuple[str, str, str]], *, transitive: bool = True) -> str:
    """A throwaway project: the artifacts as dependencies, or (intransitive) as the items of
    ``dependency:copy``, which reads no dependency graph at all."""
    gav = [
        f"<groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId><version>{escape(v)}</version>"
        for g, a, v in coordinates
    ]
    if transitive:
        dependencies = "".join(f"\n    <dependency>{x}</dependency>" for x in gav)
        configuration = ""
    else:
        dependencies = ""
        items = "".join(f"\n        <artifactItem>{x}</artifactItem>" for x in gav)
        configuration = f"\n      <configuration><artifactItems>{items}\n      </artifactItems></configuration>"
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>reliable-kafka</groupId>
  <artifactId>jar-resolution</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>{dependencies}
  </dependencies>
  <build><plugins>
    <plugin>
      <groupId>org.apache.maven.plugins</groupId>
      <artifactId>maven-dependency-plugin</artifactId>
      <version>{_MAVEN_DEPENDENCY_PLUGIN}</version>{configuration}
    </plugin>
  </plugins></build>
</project>
"""


def _maven_command(pom: Path, output_dir: Path, repo_local: Path, *, transitive: bool = True) -> list[str]:
    """The Maven invocation that copies the project's jars into ``output_dir``."""
    goal = ["dependency:copy-dependencies", "-DincludeScope=runtime"] if transitive else ["dependency:copy"]
    return [
        "mvn",
        "-B",
        "-q",
        # -U: re-check artifacts a failed earlier attempt marked with *.lastUpdated files.
        "-U",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        *goal,
        f"-DoutputDirectory={output_dir}",
        f"-Dmaven.repo.local={repo_local}",
    ]


def _run_maven(
    name: str,
    coordinates: Sequence[tuple[str, str, str]],
    artifacts: Sequence[str],
    transitive: bool,
    *,
    root: Path,
    target: Path,
) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            f"cannot resolve jars for {name}: Maven ('mvn') is not on PATH.\n"
            f"  what to do: install Maven 3.6+ (e.g. 'apt-get install maven'), or put the jars "
            f"yourself in {target} (for Kafka: set KAFKA_HOME to an unpacked Kafka distribution)."
        )
    repo_local = root / "m2"
    described = ", ".join(artifacts)
    print(
        f"reliable-kafka: resolving {_label(name)} jars with Maven (first run only; may take a few minutes)...",
        file=sys.stderr,
        flush=True,
    )
    # Resolve into a sibling staging dir and swap it in, so a failed run never leaves half a set.
    with tempfile.TemporaryDirectory(prefix="rk-mvn-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(coordinates, transitive=transitive))
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
        command = _maven_command(pom, staging, repo_local, transitive=transitive)
        command[0] = mvn
        try:
            done = subprocess.run(
                command,
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=_MVN_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise JarResolutionError(
                _failure_message(
                    name,
                    described,
                    f"Maven did not finish within {_MVN_TIMEOUT_S:.0f} s",
                    _text(exc.output),
                    repo_local,
                )
            ) from None
        if done.returncode != 0 or not any(staging.glob("*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            reason = (
                f"Maven exited with code {done.returncode}"
                if done.returncode != 0
                else "Maven succeeded but copied no jars"
            )
            raise JarResolutionError(_failure_message(name, described, reason, done.stdout or "", repo_local))
        (staging / _STAMP).write_text(_stamp(artifacts, transitive) + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    print(f"reliable-kafka: {_label(name)} jars ready in {target}", file=sys.stderr, flush=True)


def _label(name: str) -> str:
    # "kafka-4.1.1" reads as "Kafka 4.1.1" in progress lines; other names stay as given.
    if name.startswith("kafka-"):
        return "Kafka " + name[len("kafka-") :]
    return name


def _text(output: str | bytes | None) -> str:
    if output is None:
        return ""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output


_OFFLINE_SIGNS = (
    "unknownhostexception",
    "could not transfer",
    "network is unreachable",
    "connection refused",
    "connect timed out",
    "no route to host",
    "temporary failure in name resolution",
    "offline",
)


def _failure_message(name: str, described: str, reason: str, output: str, repo_local: Path) -> str:
    tail = "\n".join("    " + line for line in output.strip().splitlines()[-25:])
    lowered = output.lower()
    if any(sign in lowered for sign in _OFFLINE_SIGNS):
        likely = "Maven could not reach its repository (offline, proxy or DNS problem?). "
    elif "could not find artifact" in lowered or "could not resolve" in lowered:
        likely = "an artifact or version is not in the repository, or could not be fetched. "
    else:
        likely = ""
    return (
        f"cannot resolve jars for {name} ({described}): {reason}.\n"
        f"  what to do: {likely}Check network access to Maven Central (or a mirror in "
        f"~/.m2/settings.xml), then run again. A failed download leaves '*.lastUpdated' markers "
        f"in {repo_local} that make Maven skip the artifact: delete them "
        f"(find {repo_local} -name '*.lastUpdated' -delete) or retry Maven with -U.\n"
        f"  Maven output (last lines):\n{tail or '    (none)'}"
    )
