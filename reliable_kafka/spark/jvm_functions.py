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
which writes the same bytes.

Most sources use Spark-internal Catalyst classes, which may change in any Spark release; only
``TrackedRows.java`` (the single query's rows) uses public API alone. When the whole set does not
compile against the installed Spark, the jar is built again without the sources that depend on
internals (:data:`SOURCE_SETS`, tried in order), and what is lost is warned about once: batch plan
reuse (``BatchPlans.java``), then the functions above (the outputs take the SQL path). The single
query's ``TrackedRows`` is in every jar. ``RK_SPARK_JVM_FUNCTIONS``: ``auto`` (the default), ``off`` (always
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

__all__ = [
    "MODE_ENV",
    "SOURCE_SETS",
    "functions_mode",
    "require_class",
    "functions_jar",
    "functions_jar_or_none",
    "use_jvm_functions",
    "batch_plans_available",
]

log = logging.getLogger(__name__)

MODE_ENV = "RK_SPARK_JVM_FUNCTIONS"
JAVA_CLASS = "reliablekafka.spark.ReliableKafkaFunctions"
BATCH_PLANS_CLASS = "reliablekafka.spark.BatchPlans"
ANCHORS_V2_FUNCTION = "rk_anchors_v2"  # the names ReliableKafkaFunctions.register gives them
CHILD_HEADER_FUNCTION = "rk_child_header"
CHILD_XOR_FUNCTION = "rk_child_xor"
OUTPUT_HEADER_FUNCTION = "rk_output_header"
JAR_NAME = "reliable-kafka-spark-functions.jar"
_SOURCES = Path(__file__).parent / "jvm"
_STAMP = ".built"
_LOST = ".lost"  # in a jar's directory: what its build left out and why (absent: nothing)

SOURCE_SETS: tuple[tuple[str, frozenset[str]], ...] = (
    ("", frozenset()),
    ("batch plan reuse (BatchPlans.java)", frozenset({"BatchPlans.java"})),
    (
        "batch plan reuse and the Java output functions (BatchPlans, ReliableKafkaFunctions, ChildXor, RootXors)",
        frozenset({"BatchPlans.java", "ReliableKafkaFunctions.java", "ChildXor.java", "RootXors.java"}),
    ),
)
"""The builds tried in order, as (what the jar then lacks, the sources left out): all of them, then
without the sources that use Spark-internal Catalyst classes. ``TrackedRows.java`` is in each."""
_JAVAC_TIMEOUT_S = 600.0
_warned: set[tuple[str, str]] = set()
_classes: dict[tuple[int, str], Any] = {}  # (id of a py4j gateway, class name) -> its JavaClass, or None: absent


def functions_mode() -> Literal["auto", "on", "off"]:
    """``RK_SPARK_JVM_FUNCTIONS`` (read at each call, so a benchmark can switch paths between runs)."""
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise ConfigError(f"{MODE_ENV}={mode!r}: expected auto, on or off")
    return mode  # type: ignore[return-value]


_SQL_PATH = "Spark functions unavailable, outputs take the slower Spark SQL path"


def _warn_once(reason: str, *, lost: str = _SQL_PATH) -> None:
    if (lost, reason) not in _warned:
        _warned.add((lost, reason))
        log.warning("reliable-kafka %s: %s", lost, reason)


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
    Concurrent callers wait on a file lock. :class:`JarResolutionError` when it cannot be built.
    The jar may lack the sources that do not compile against the installed Spark (:func:`lost`)."""
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


def lost(jar: Path) -> str | None:
    """What the build of ``jar`` left out and why (javac's complaint), or None: it has every source."""
    try:
        return (jar.parent / _LOST).read_text().strip() or None
    except OSError:
        return None


def _build(target: Path, digest: str, spark_jars: Path, spark_version: str) -> None:
    javac = _tool("javac")
    if javac is None:
        raise JarResolutionError(
            "cannot build reliable-kafka's Spark functions: no 'javac' (a JDK 17+) on JAVA_HOME or PATH; "
            "install a JDK to get the faster output path, or set RK_SPARK_JVM_FUNCTIONS=off to silence this"
        )
    everything = sorted(_SOURCES.glob("*.java"))
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=target.parent))
    try:
        classes = staging / "classes"
        first_failure, lacking = "", ""
        for lacks, left_out in SOURCE_SETS:
            sources = [str(source) for source in everything if source.name not in left_out]
            failure = _compile(javac, sources, classes, spark_jars)
            if failure is None:
                lacking = lacks
                break
            first_failure = first_failure or failure
            shutil.rmtree(classes, ignore_errors=True)
        else:
            raise JarResolutionError(
                f"cannot build reliable-kafka's Spark functions against Spark {spark_version} ({spark_jars}); "
                f"set RK_SPARK_JVM_FUNCTIONS=off to use the SQL path without this warning, and report it: "
                f"{first_failure}"
            )
        with zipfile.ZipFile(staging / JAR_NAME, "w", zipfile.ZIP_DEFLATED) as jar:  # a jar is a zip
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        shutil.rmtree(classes)
        if lacking:
            (staging / _LOST).write_text(f"{lacking} did not compile against Spark {spark_version}: {first_failure}\n")
        (staging / _STAMP).write_text(digest + "\n")
        if target.exists():  # without its stamp: not a build of ours that finished
            shutil.rmtree(target)
        staging.rename(target)  # whole, or not at all
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _compile(javac: str, sources: list[str], classes: Path, spark_jars: Path) -> str | None:
    """Compile ``sources`` into ``classes``; None when done, else why not."""
    command = [javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", f"{spark_jars}/*", *sources]
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_JAVAC_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return f"javac did not finish within {_JAVAC_TIMEOUT_S:.0f} s"
    if done.returncode == 0:
        return None
    tail = "\n".join("    " + line for line in (done.stderr + done.stdout).strip().splitlines()[-20:])
    return f"javac exited with code {done.returncode}.\n  javac output (last lines):\n{tail}"


def functions_jar_or_none(*, cache: Path | None = None) -> Path | None:
    """:func:`functions_jar`, or None (warning once) when off or it cannot be built in ``auto``.
    A jar built without some sources is returned with a warning (once) naming what it lacks."""
    mode = functions_mode()
    if mode == "off":
        return None
    try:
        jar = functions_jar(cache=cache)
    except JarResolutionError as error:
        if mode == "on":
            raise
        _warn_once(str(error))
        return None
    lacking = lost(jar)
    if lacking is not None:
        _warn_once(lacking, lost="Java classes left out of the Spark functions' jar")
    return jar


def _jvm_class(session: SparkSession, name: str) -> Any:
    """The JVM class ``name`` as a py4j JavaClass, or None when the JVM has no such class."""
    from py4j.java_gateway import JavaClass

    key = (id(session.sparkContext._gateway), name)
    if key not in _classes:  # each name looked up is a py4j round trip: once per JVM
        found = session.sparkContext._jvm
        for part in name.split("."):
            found = getattr(found, part)
        _classes[key] = found if isinstance(found, JavaClass) else None
    return _classes[key]


def _missing(name: str) -> str:
    return (
        f"class {name} is not on the Spark JVM's classpath (start Spark with reliable_kafka.spark.spark_session "
        f"or `reliable-kafka spark-submit`, which add reliable-kafka's jar; or its source did not compile "
        f"against this Spark, as warned when the jar was built)"
    )


def use_jvm_functions(session: SparkSession) -> bool:
    """True when ``session`` has the functions registered (registering them on first use); False
    when they are off, or not on the JVM's classpath (a warning once; with ``on``, ConfigError)."""
    mode = functions_mode()
    if mode == "off":
        return False
    functions = _jvm_class(session, JAVA_CLASS)
    if functions is None:
        reason = _missing(JAVA_CLASS)
        if mode == "on":
            raise ConfigError(f"{MODE_ENV}=on: {reason}")
        _warn_once(reason)
        return False
    functions.register(session._jsparkSession)
    return True


def require_class(session: SparkSession, name: str, *, component: str, needs: str) -> Any:
    """The JVM class ``name`` (a py4j JavaClass) that ``needs`` cannot run without; :class:`ConfigError`
    saying why when the functions are off or the JVM lacks it (instead of py4j's error at first use)."""
    if functions_mode() == "off":
        raise ConfigError(f"{component}: {needs} needs reliable-kafka's Java functions, which {MODE_ENV}=off turns off")
    found = _jvm_class(session, name)
    if found is None:
        raise ConfigError(f"{component}: {needs} needs reliable-kafka's Java functions, but {_missing(name)}")
    return found


def batch_plans_available(session: SparkSession) -> bool:
    """True when the JVM of ``session`` has ``BatchPlans`` (batch plan reuse); False, with a
    warning once, when it does not: each batch's plan is then built anew."""
    if functions_mode() == "off":
        return False
    if _jvm_class(session, BATCH_PLANS_CLASS) is None:
        _warn_once(_missing(BATCH_PLANS_CLASS), lost="batch plan reuse unavailable, each batch's plan is built anew")
        return False
    return True
