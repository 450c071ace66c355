"""reliable-kafka's own Spark functions in Java (``jvm/*.java``), for the per-row work of the JVM
output path (``writer.write_in_jvm``, docs/design.md section 7.2) that Spark SQL can only do slowly:

- ``rk_anchors_v2(root, edge)``: the one-pair ``rk-anchors`` v2 header (18 bytes), where SQL goes
  through hex strings (ANSI mode refuses ``CAST(bigint AS binary)``);
- ``rk_child_header(salt, row id, anchors)``: the same for an output row with any number of pairs,
  its child edges derived as the SQL path derives them;
- ``rk_output_header(salt, row id, anchors)``: ``rk_child_header``'s bytes as a static call in
  Spark's generated code (no boxed arguments, no Scala Rows), one child edge hash per root; the
  writer's header;
- ``rk_child_xor(header)``: an aggregate for ``DataFrame.observe``, one (root, XOR of its edges)
  pair per root, where SQL sent the driver every row's pairs (``listagg``) to fold there.

The sources ship in the package and are compiled on first use with the JDK's ``javac`` against
pyspark's own jars, into the per-user jar cache (``jars/rk-spark-functions/<digest>/``, the digest
of the sources and the Spark version: a directory is never rewritten once built, so a running JVM
never loses its jar). :func:`spark_session` puts the jar on ``spark.jars``. Without ``javac`` (a
JRE), or when the build fails, a warning is logged once and the writer keeps its Spark SQL path,
which writes the same bytes. ``RK_SPARK_JVM_FUNCTIONS``: ``auto`` (the default), ``off`` (always
the SQL path) or ``on`` (raise instead of falling back; for tests and benchmarks).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from reliable_kafka.errors import ConfigError, JarResolutionError
from reliable_kafka.jars import cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MODE_ENV", "functions_mode", "functions_jar", "functions_jar_or_none", "use_jvm_functions"]

log = logging.getLogger(__name__)

MODE_ENV = "RK_SPARK_JVM_FUNCTIONS"
JAVA_CLASS = "reliablekafka.spark.ReliableKafkaFunctions"
ANCHORS_V2_FUNCTION = "rk_anchors_v2"  # the names ReliableKafkaFunctions.register gives them
CHILD_HEADER_FUNCTION = "rk_child_header"
CHILD_XOR_FUNCTION = "rk_child_xor"
OUTPUT_HEADER_FUNCTION = "rk_output_header"
JAR_NAME = "reliable-kafka-spark-functions.jar"
_SOURCES = Path(__file__).parent / "jvm"
_STAMP = ".built"
_JAVAC_TIMEOUT_S = 600.0
_warned: set[str] = set()
_classes: dict[int, Any] = {}  # id of a py4j gateway -> the JavaClass, or None: not on the classpath


def functions_mode() -> Literal["auto", "on", "off"]:
    """``RK_SPARK_JVM_FUNCTIONS`` (read at each call, so a benchmark can switch paths between runs)."""
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise ConfigError(f"{MODE_ENV}={mode!r}: expected auto, on or off")
    return mode  # type: ignore[return-value]


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        log.warning("reliable-kafka Spark functions unavailable, outputs take the slower Spark SQL path: %s", reason)


def _spark_home() -> tuple[Path, str]:
    import pyspark

    return Path(pyspark.__file__).parent, pyspark.__version__


def _tool(name: str) -> str | None:
    """``name`` from ``$JAVA_HOME/bin`` (the JDK Spark runs on), else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def sources_digest(spark_version: str) -> str:
    """The cache key: the Java sources and the Spark version they are compiled against."""
    digest = hashlib.sha256(spark_version.encode())
    for source in sorted(_SOURCES.glob("*.java")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def functions_jar(*, cache: Path | None = None) -> Path:
    """The functions' jar, compiled on first use (a few seconds), then read from the cache.
    Concurrent callers wait on a file lock. :class:`JarResolutionError` when it cannot be built."""
    pyspark_home, spark_version = _spark_home()
    digest = sources_digest(spark_version)
    target = (cache if cache is not None else cache_dir()) / "jars" / "rk-spark-functions" / digest
    jar = target / JAR_NAME
    if (target / _STAMP).is_file() and jar.is_file():
        return jar
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((target / _STAMP).is_file() and jar.is_file()):
            _build(target, digest, pyspark_home / "jars", spark_version)
    return jar


def _build(target: Path, digest: str, spark_jars: Path, spark_version: str) -> None:
    javac = _tool("javac")
    if javac is None:
        raise JarResolutionError(
            "cannot build reliable-kafka's Spark functions: no 'javac' (a JDK 17+) on JAVA_HOME or PATH; "
            "install a JDK to get the faster output path, or set RK_SPARK_JVM_FUNCTIONS=off to silence this"
        )
    sources = sorted(str(source) for source in _SOURCES.glob("*.java"))
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=target.parent))
    try:
        classes = staging / "classes"
        command = [javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", f"{spark_jars}/*", *sources]
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_JAVAC_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise JarResolutionError(
                f"cannot build reliable-kafka's Spark functions: javac did not finish within {_JAVAC_TIMEOUT_S:.0f} s"
            ) from None
        if done.returncode != 0:
            tail = "\n".join("    " + line for line in (done.stderr + done.stdout).strip().splitlines()[-20:])
            raise JarResolutionError(
                f"cannot build reliable-kafka's Spark functions against Spark {spark_version} ({spark_jars}): "
                f"javac exited with code {done.returncode}; set RK_SPARK_JVM_FUNCTIONS=off to use the SQL path "
                f"without this warning, and report it.\n  javac output (last lines):\n{tail}"
            )
        with zipfile.ZipFile(staging / JAR_NAME, "w", zipfile.ZIP_DEFLATED) as jar:  # a jar is a zip
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        shutil.rmtree(classes)
        (staging / _STAMP).write_text(digest + "\n")
        if target.exists():  # without its stamp: not a build of ours that finished
            shutil.rmtree(target)
        staging.rename(target)  # whole, or not at all
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def functions_jar_or_none(*, cache: Path | None = None) -> Path | None:
    """:func:`functions_jar`, or None (warning once) when off or it cannot be built in ``auto``."""
    mode = functions_mode()
    if mode == "off":
        return None
    try:
        return functions_jar(cache=cache)
    except JarResolutionError as error:
        if mode == "on":
            raise
        _warn_once(str(error))
        return None


def use_jvm_functions(session: SparkSession) -> bool:
    """True when ``session`` has the functions registered (registering them on first use); False
    when they are off, or not on the JVM's classpath (a warning once; with ``on``, ConfigError)."""
    mode = functions_mode()
    if mode == "off":
        return False
    from py4j.java_gateway import JavaClass

    key = id(session.sparkContext._gateway)
    if key not in _classes:  # each name looked up is a py4j round trip: once per JVM
        functions = session.sparkContext._jvm
        for part in JAVA_CLASS.split("."):
            functions = getattr(functions, part)
        _classes[key] = functions if isinstance(functions, JavaClass) else None
    functions = _classes[key]
    if functions is None:
        reason = (
            f"class {JAVA_CLASS} is not on the Spark JVM's classpath (start Spark with "
            f"reliable_kafka.spark.spark_session or `reliable-kafka spark-submit`, which add its jar)"
        )
        if mode == "on":
            raise ConfigError(f"{MODE_ENV}=on: {reason}")
        _warn_once(reason)
        return False
    functions.register(session._jsparkSession)
    return True
