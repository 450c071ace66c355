"""A SparkSession with Spark's Kafka connector on its classpath, local or on a cluster.

The master is the one spark-submit or the environment gives (``--master``, ``PYSPARK_SUBMIT_ARGS``,
``MASTER``, ``spark-defaults.conf``); ``local[2]`` only when none is given. Loopback addresses
and this interpreter as the Python worker are defaults of local mode only.

The connector (``spark-sql-kafka-0-10``) is resolved with Maven into the reliable-kafka jar cache
(apart from the broker's jars), at the installed PySpark's own version
(:mod:`reliable_kafka.spark.connector`), and handed to Spark through ``spark.jars`` before the JVM
starts; ``spark.jars.packages`` (Ivy at run time) is avoided on purpose.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from reliable_kafka.errors import ConfigError
from reliable_kafka.spark.connector import connector_jars
from reliable_kafka.spark.jvm_functions import functions_jar_or_none

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "connector_jars",
    "spark_session",
    "DEFAULT_SPARK_CONF",
    "LOCAL_MODE_CONF",
    "DEFAULT_MASTER",
    "given_master",
    "spark_submit_command",
]

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
}

LOCAL_MODE_CONF: dict[str, str] = {
    # Only in local mode: on a cluster, executors must reach the driver at a routable address and
    # run whatever Python the cluster's nodes have (spark.pyspark.python / PYSPARK_PYTHON).
    "spark.pyspark.python": sys.executable,
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}

DEFAULT_MASTER = "local[2]"
"""The master when neither the caller, spark-submit nor the environment gives one."""

CONNECTOR_MARKER = "spark-sql-kafka-0-10"
"""In a jar's file name: the connector (cached here, or resolved by ``--packages``)."""

# spark-submit options that take no value (every other option takes one, as "--x v" or "--x=v").
_SUBMIT_FLAGS = frozenset({"--verbose", "-v", "--supervise", "--help", "-h", "--version", "--usage-error"})


def given_master(environ: dict[str, str] | None = None, *, running_conf: dict[str, str] | None = None) -> str | None:
    """The master spark-submit or the environment gives, or None when nothing does.

    In order, as spark-submit reads them: a JVM already started by spark-submit
    (``running_conf``: its ``spark.master``), ``--master`` or ``--conf spark.master=`` in
    ``PYSPARK_SUBMIT_ARGS``, a ``spark.master`` in ``PYSPARK_SUBMIT_ARGS``' ``--properties-file``
    or in ``spark-defaults.conf`` (``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``), the ``MASTER``
    variable.
    """
    env = os.environ if environ is None else environ
    if running_conf is not None and running_conf.get("spark.master"):
        return running_conf["spark.master"]
    options = _submit_options(shlex.split(env.get("PYSPARK_SUBMIT_ARGS", "")))
    if options.get("--master"):
        return options["--master"]
    if options.get("spark.master"):
        return options["spark.master"]
    for properties in _properties_files(env, options.get("--properties-file")):
        master = _read_properties(properties).get("spark.master")
        if master:
            return master
    return env.get("MASTER") or None


def _submit_options(args: list[str]) -> dict[str, str]:
    """``--master``, ``--jars``, ``--properties-file`` and ``--conf`` pairs of spark-submit
    arguments, up to the application (whose own arguments are not spark-submit's)."""
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            break  # the application file, or pyspark's "pyspark-shell"
        if arg in _SUBMIT_FLAGS:
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        if name in ("--conf", "-c"):
            key, _, conf_value = value.partition("=")
            found[key.strip()] = conf_value.strip()
        else:
            found[name] = value
    return found


def _properties_files(env: Mapping[str, str], explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit)]  # spark-submit then ignores spark-defaults.conf
    conf_dir = env.get("SPARK_CONF_DIR") or (Path(env["SPARK_HOME"]) / "conf" if env.get("SPARK_HOME") else None)
    return [Path(conf_dir) / "spark-defaults.conf"] if conf_dir else []


def _read_properties(path: Path) -> dict[str, str]:
    """A Java properties file as spark-submit reads it (``key value`` or ``key=value``)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = _split_property(line)
        found[key] = value
    return found


def _split_property(line: str) -> tuple[str, str, str]:
    for i, char in enumerate(line):
        if char in " \t=:":
            rest = line[i:].lstrip(" \t")
            if rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip(" \t")
            return line[:i], char, rest
    return line, "", ""


def _running_conf() -> dict[str, str] | None:
    """The conf of a JVM that spark-submit already started for this process, else None.

    Under spark-submit (``PYSPARK_GATEWAY_PORT`` set) the JVM runs before Python does: its system
    properties hold ``--master``, ``--jars``, ``--conf`` and spark-defaults.conf. Connecting to it
    starts nothing. A JVM that an earlier session of this process started is not spark-submit's:
    its properties are that session's settings, not a submitted master.
    """
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    SparkContext._ensure_initialized()
    return dict(SparkConf(loadDefaults=True).getAll())


def spark_submit_command(
    args: list[str], *, jars: list[Path] | None = None, spark_submit: str | None = None
) -> list[str]:
    """spark-submit ``args`` with the connector jars added to ``--jars`` (kept if already given).

    ``spark_submit`` defaults to ``$SPARK_HOME/bin/spark-submit``, else pyspark's own.
    """
    connector = [str(jar) for jar in (connector_jars() if jars is None else jars)]
    if spark_submit is None:
        home = os.environ.get("SPARK_HOME")
        if home:
            spark_submit = str(Path(home) / "bin" / "spark-submit")
        else:
            import pyspark

            spark_submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    out = list(args)
    i = 0
    while i < len(out) and out[i].startswith("-"):
        name, eq, value = out[i].partition("=")
        if name == "--jars":
            position = i if eq else i + 1
            given = value if eq else (out[i + 1] if i + 1 < len(out) else "")
            merged = ",".join([*connector, *(j for j in given.split(",") if j)])
            if eq:
                out[i] = f"--jars={merged}"
            elif i + 1 < len(out):
                out[position] = merged
            return [spark_submit, *out]
        i += 1 if (out[i] in _SUBMIT_FLAGS or eq) else 2
    return [spark_submit, "--jars", ",".join(connector), *out]


def spark_session(
    app_name: str,
    *,
    master: str | None = None,
    extra_conf: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession with the Kafka connector, small memory settings and the UI off.

    ``master``: None (the default) takes the master spark-submit or the environment gives
    (:func:`given_master`), else ``local[2]``; a master given here is used as given. Use
    ``local[2,3]`` to let failed tasks be retried (local mode ignores ``spark.task.maxFailures``).
    ``extra_conf`` overrides :data:`DEFAULT_SPARK_CONF`; its ``spark.jars`` entries are added to
    the connector's. In local mode :data:`LOCAL_MODE_CONF` applies too (loopback driver, this
    interpreter for Python workers). Under spark-submit the defaults never override what was
    submitted, and the connector must have been submitted (``reliable-kafka spark-submit`` adds
    it); otherwise :class:`ConfigError`. A session already active in the process is returned as it
    is if it has the connector, refused otherwise. JVM settings (``spark.driver.memory``) only
    apply when this call starts the JVM.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    running = None if active is not None else _running_conf()
    submitted = given_master(running_conf=running)
    chosen = master or submitted or DEFAULT_MASTER
    local = chosen.startswith("local")
    if local:
        # Spark otherwise picks the host's first non-loopback address and warns about it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers must run this interpreter (its site-packages hold reliable_kafka and
        # confluent_kafka); Spark's default is whatever "python3" is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    defaults = {**DEFAULT_SPARK_CONF, **(LOCAL_MODE_CONF if local else {})}
    if running is not None:
        defaults = {key: value for key, value in defaults.items() if key not in running}
    conf = {**defaults, **(extra_conf or {})}
    if running is not None:
        # The driver's classpath was fixed when spark-submit started the JVM: spark.jars set now
        # would reach executors only, and format("kafka") would fail on the driver.
        if CONNECTOR_MARKER not in running.get("spark.jars", ""):
            raise ConfigError(
                f"spark_session: spark-submit was run without Spark's Kafka connector (no "
                f"{CONNECTOR_MARKER} jar in spark.jars); submit with `reliable-kafka spark-submit "
                f"...` (adds --jars from the jar cache) or pass --jars yourself"
            )
        jars = [j for j in conf.get("spark.jars", "").split(",") if j]
        if jars:
            conf["spark.jars"] = ",".join([running["spark.jars"], *jars])
        else:
            conf.pop("spark.jars", None)
    else:
        jars = [str(jar) for jar in connector_jars()]
        if conf.get("spark.jars"):
            jars.extend(j for j in conf["spark.jars"].split(",") if j)
        functions = functions_jar_or_none()  # optional: without it outputs take the SQL path
        conf["spark.jars"] = ",".join([*jars, *([str(functions)] if functions else [])])
    if active is not None:
        loaded = active.sparkContext.getConf().get("spark.jars", "")
        if not all(jar in loaded for jar in jars):
            raise ConfigError(
                "spark_session: a SparkSession without the Kafka connector is already running in "
                "this process; stop it first (spark.stop()) or create it with spark_session()"
            )
    builder = SparkSession.builder.appName(app_name)
    if master is not None or submitted is None:
        builder = builder.master(chosen)  # otherwise spark-submit's launcher passes it on
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
