"""One KRaft combined broker+controller JVM: its directory, config files and process.

The pieces :mod:`reliable_kafka.broker.embedded` builds single brokers and clusters from: the
classpath and ``java`` lookup, free loopback ports, ``server.properties`` for a node, and the
watchdog that keeps a JVM from outliving the Python process that started it.
"""

from __future__ import annotations

import base64
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from reliable_kafka.errors import BrokerStartError
from reliable_kafka.jars import KAFKA_VERSION, kafka_jars, parse_kafka_version

if TYPE_CHECKING:
    from reliable_kafka.broker.secure import BrokerSecurity

__all__ = [
    "HOST",
    "KraftNode",
    "broker_classpath",
    "find_java",
    "free_ports",
    "new_cluster_id",
    "node_properties",
    "port_in_use",
    "probe_broker_ids",
    "tail",
]

HOST = "127.0.0.1"
_JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
_LOG_TAIL_LINES = 40

# The watchdog between this process and a JVM. It runs the JVM as its child with
# PR_SET_PDEATHSIG (the watchdog is single-threaded when it forks, so the signal is tied to it),
# kills the JVM when its stdin (a pipe whose write end only the parent holds) reaches EOF, and
# exits with the JVM's status. SIGTERM sent to the process group reaches the JVM directly; the
# watchdog only waits for it.
_WATCHDOG = r"""
import ctypes, os, signal, subprocess, sys, threading
prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # Linux only
watchdog = os.getpid()
def die_with_watchdog():
    if prctl is not None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != watchdog:
        os._exit(1)
signal.signal(signal.SIGTERM, lambda *_: None)
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, preexec_fn=die_with_watchdog)
def watch_parent():
    while os.read(0, 512):
        pass
    child.kill()
threading.Thread(target=watch_parent, daemon=True).start()
code = child.wait()
sys.exit(128 - code if code < 0 else code)
"""


def find_java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError(
            "cannot start the embedded Kafka broker: Java ('java') is not on PATH"
            + (f" and not in JAVA_HOME={java_home}" if java_home else ""),
            hint="install a Java 17+ runtime (e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME to one",
        )
    return found


def broker_classpath(version: str = KAFKA_VERSION) -> str:
    """The JVM classpath of the broker: ``$KAFKA_HOME/libs/*`` if set, else the Maven-resolved
    jars of Kafka ``version`` (see :func:`reliable_kafka.jars.kafka_jars`)."""
    kafka_home = os.environ.get("KAFKA_HOME")
    if kafka_home:
        libs = Path(kafka_home).expanduser() / "libs"
        if not any(libs.glob("*.jar")):
            raise BrokerStartError(
                f"KAFKA_HOME={kafka_home} has no libs/*.jar",
                hint="point KAFKA_HOME at an unpacked Kafka distribution, or unset it to use "
                f"Kafka {version} resolved with Maven",
            )
        jars = sorted(libs.glob("*.jar"))
    else:
        jars = kafka_jars(version)
    # One wildcard entry per directory keeps the command line short (and readable in `ps`).
    return os.pathsep.join(sorted({str(jar.parent / "*") for jar in jars}))


def new_cluster_id() -> str:
    # Kafka's cluster ids are 22-char URL-safe base64 UUIDs; one starting with '-' would be read
    # as an option by the storage tool, so Kafka never makes those and neither do we.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def free_ports(count: int) -> list[int]:
    # Hold every socket until all are bound, so the ports are distinct.
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the JVM does: SO_REUSEADDR ignores TIME_WAIT leftovers, not a live listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def _quiet_logger() -> logging.Logger:
    # librdkafka logs every refused connection while the broker boots; keep that off stderr.
    logger = logging.getLogger("reliable_kafka.broker.probe")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def probe_broker_ids(bootstrap: str, timeout: float, client_config: Mapping[str, str] | None = None) -> set[int] | None:
    """The broker ids a fresh client bootstrapped at ``bootstrap`` sees, or None if no answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            **(client_config or {}),
            "bootstrap.servers": bootstrap,
            "logger": _quiet_logger(),  # type: ignore[dict-item]  # the stubs omit confluent-kafka's logger
            "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
        }
    )
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return None
    return set(metadata.brokers)


class KraftNode:
    """One KRaft combined broker+controller JVM and its directory."""

    def __init__(self, node_id: int, directory: Path, port: int, controller_port: int) -> None:
        self.node_id = node_id
        self.directory = directory
        self.port = port
        self.controller_port = controller_port
        self.process: subprocess.Popen[bytes] | None = None
        self._parent_pipe: int | None = None  # write end of the watchdog's stdin

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def console_path(self) -> Path:
        return self.directory / "console.log"

    @property
    def kafka_data(self) -> Path:
        return self.directory / "kafka-data"

    @property
    def pid(self) -> int | None:
        """The process group leader: the watchdog, or the JVM itself when detached."""
        return self.process.pid if self.process is not None else None

    def is_formatted(self) -> bool:
        return (self.kafka_data / "meta.properties").exists()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def write_config(self, properties: Mapping[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.kafka_data.mkdir(exist_ok=True)
        self.properties_path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        (self.directory / "log4j2.properties").write_text(_log4j2_properties(self.log_path))
        # Kafka 3.x distributions (KAFKA_HOME) still log through log4j 1 (reload4j).
        (self.directory / "log4j.properties").write_text(_log4j1_properties(self.log_path))

    def jvm_command(self, java: str, classpath: str, main: str, *args: str) -> list[str]:
        return [
            java,
            *_JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def launch(self, java: str, classpath: str, *, detach: bool) -> None:
        command = self.jvm_command(java, classpath, "kafka.Kafka", str(self.properties_path))
        with open(self.console_path, "ab") as console:
            if detach:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                return
            read_end, write_end = os.pipe()
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _WATCHDOG, *command],
                    stdin=read_end,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except BaseException:
                os.close(write_end)
                raise
            finally:
                os.close(read_end)
            self._parent_pipe = write_end

    def signal(self, signum: int) -> None:
        if self.running():
            assert self.process is not None
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return False
        self._close_pipe()
        return True

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(30.0)

    def _close_pipe(self) -> None:
        if self._parent_pipe is not None:
            os.close(self._parent_pipe)
            self._parent_pipe = None

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def log_tail(self) -> str:
        parts = []
        console = tail(self.console_path, 15)
        if console:
            parts.append(f"  {self.console_path}:\n{console}")
        log = tail(self.log_path)
        if log:
            parts.append(f"  {self.log_path}:\n{log}")
        return "\n".join(parts)


def _log4j2_properties(log_path: Path) -> str:
    # the authorizer logs each refused permission at INFO (tests look for them: docs/security.md)
    return f"""status = error
name = reliable-kafka-broker
appender.file.type = File
appender.file.name = BROKER
appender.file.fileName = {log_path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = BROKER
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
"""


def _log4j1_properties(log_path: Path) -> str:
    return f"""log4j.rootLogger=INFO, BROKER
log4j.appender.BROKER=org.apache.log4j.FileAppender
log4j.appender.BROKER.File={log_path}
log4j.appender.BROKER.layout=org.apache.log4j.PatternLayout
log4j.appender.BROKER.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def node_properties(
    node: KraftNode,
    voters: str,
    nodes: int,
    extra: Mapping[str, str],
    security: BrokerSecurity | None = None,
    *,
    version: str = KAFKA_VERSION,
) -> dict[str, str]:
    """``server.properties`` of ``node`` for Kafka ``version`` (3.9 or newer).

    What differs between the releases the embedded broker runs (3.9 to 4.4): the share coordinator
    (KIP-932) has its settings from 4.0 only, so 3.9 gets none. The rest is common: a static quorum
    (``controller.quorum.voters``) is still accepted by 4.x next to the dynamic one, the consumer
    group protocol the components use (classic) is on in every release, and none of the settings
    4.0 removed (ZooKeeper's, ``log.message.format.version``...) is set here.
    """
    replication = min(3, nodes)
    min_isr = max(1, replication - 1)
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        # A static quorum: format needs no --standalone/--initial-controllers (those are for the
        # dynamic quorums configured with controller.quorum.bootstrap.servers).
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.kafka_data),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        # Internal topics must fit the node count, or groups and transactions never start.
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        # A node restarted after a kill waits out its old session before it may register again
        # (9 s by default); a shorter session makes restarts and failovers quicker.
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "6000",
        # The default 128 MiB compaction buffer would take a quarter of the small heap.
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }
    if parse_kafka_version(version) >= (4, 0, 0):
        properties.update(
            {
                "share.coordinator.state.topic.replication.factor": str(replication),
                "share.coordinator.state.topic.min.isr": str(min_isr),
                "share.coordinator.state.topic.num.partitions": "5",
            }
        )
    if security is not None:  # a BrokerSecurity: SASL listeners and the authorizer
        properties.update(security.broker_properties(port=node.port, controller_port=node.controller_port, host=HOST))
    properties.update(extra)
    return properties
