"""A real Kafka broker (KRaft, no ZooKeeper) run as a child JVM for tests, examples and local use.

:class:`EmbeddedKafka` is one combined broker+controller node; :class:`EmbeddedCluster` is N such
nodes, all voters of one static controller quorum on loopback, so replication factor 3 works.
The jars come from Maven (:func:`reliable_kafka.jars.kafka_jars`, cached per user) or from an
unpacked distribution named by ``KAFKA_HOME``.

Each node lives in ``<data_dir>/node-<id>/``: ``server.properties``, ``log4j2.properties``,
``broker.log`` (the broker's own log), ``console.log`` (JVM stdout/stderr) and ``kafka-data/``
(``log.dirs``).

No orphan JVMs: unless ``detach=True``, each JVM runs under a tiny Python watchdog that kills it
when this process dies (even by SIGKILL: the watchdog sees its stdin pipe close) and the JVM gets
``PR_SET_PDEATHSIG`` from the watchdog; an ``atexit`` hook stops whatever is still running.
(``PR_SET_PDEATHSIG`` set directly from here would fire when the *thread* that started the JVM
ends, which kills brokers started from worker threads; the single-threaded watchdog avoids that.)

Topic auto-creation keeps Kafka's default (on), as on the Docker images and most development
clusters. The library and the tests create their topics explicitly and do not rely on it; pass
``extra_config={"auto.create.topics.enable": "false"}`` for a strict broker.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from reliable_kafka.broker.node import (
    HOST,
    KraftNode,
    broker_classpath,
    find_java,
    free_ports,
    new_cluster_id,
    node_properties,
    port_in_use,
    probe_broker_ids,
    tail,
)
from reliable_kafka.broker.secure import ADMIN, BrokerSecurity
from reliable_kafka.errors import ArgumentError, BrokerStartError, ConfigError
from reliable_kafka.jars import KAFKA_VERSION

__all__ = ["KAFKA_VERSION", "EmbeddedKafka", "EmbeddedCluster"]

_FORMAT_TIMEOUT_S = 120.0

# Settings that tie a node to its ports, id and directories: only this module may set them.
_MANAGED_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "log.dirs",
    }
)

# Everything started in this process and not yet stopped; the atexit hook stops it. A strong
# set on purpose: a running broker must not vanish with its last reference.
_LIVE: set[_KraftNodes] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for nodes in list(_LIVE):
        try:
            nodes.stop(timeout=10.0)
        except Exception:  # noqa: BLE001 - exiting anyway; the watchdogs are the last resort
            pass


class _KraftNodes:
    """What EmbeddedKafka and EmbeddedCluster share: N combined nodes of one KRaft quorum."""

    def __init__(
        self,
        *,
        count: int,
        data_dir: Path | None,
        keep_data: bool,
        port: int,
        extra_config: Mapping[str, str] | None,
        detach: bool,
        startup_timeout: float,
        version: str,
        security: BrokerSecurity | None = None,
    ) -> None:
        if count < 1:
            raise ConfigError(f"brokers must be at least 1, got {count}")
        if port < 0 or port + count - 1 > 65535:
            raise ConfigError(f"port must be 0 (pick free ports) or a TCP port, got {port}")
        extra = {str(k): str(v) for k, v in (extra_config or {}).items()}
        managed = sorted(_MANAGED_KEYS.intersection(extra))
        if managed:
            raise ConfigError(
                f"extra_config sets {', '.join(managed)}, which the embedded broker manages "
                "(ports, node ids, directories); remove them"
            )
        self._count = count
        self._given_data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self.keep_data = keep_data
        self._requested_port = port
        self._extra = extra
        self._detach = detach
        self._startup_timeout = startup_timeout
        self._version = version
        self.security = security
        self._data_dir: Path | None = None
        self._created_data_dir = False
        self._nodes: list[KraftNode] = []

    # -- public surface shared by both classes -------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The root directory of the node directories (a temp dir unless one was given)."""
        if self._data_dir is None:
            raise BrokerStartError("the embedded broker has not been started", hint="call start()")
        return self._data_dir

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` for clients: "127.0.0.1:port[,127.0.0.1:port...]"."""
        if not self._nodes:
            raise BrokerStartError("the embedded broker has not been started", hint="call start()")
        return ",".join(node.bootstrap for node in self._nodes)

    @property
    def version(self) -> str:
        return self._version

    def start(self) -> _KraftNodes:
        """Format storage if needed, start every node and wait until each answers metadata
        requests with the whole cluster. Returns self. No-op when already running."""
        if self._nodes and all(node.running() for node in self._nodes):
            return self
        if not self._nodes:
            self._refuse_taken_ports()
        java = find_java()
        classpath = broker_classpath(self._version)
        first_start = not self._nodes
        attempts = 2 if first_start and self._requested_port == 0 else 1
        for attempt in range(attempts):
            if first_start:
                self._plan_nodes()
            try:
                self._start_nodes(java, classpath, [n for n in self._nodes if not n.running()])
                break
            except BrokerStartError as exc:
                self._kill_all()
                port_clash = "Address already in use" in str(exc) or "BindException" in str(exc)
                if attempt + 1 < attempts and port_clash:
                    continue  # another process took a picked port in the meantime: pick again
                if first_start:
                    self._discard()
                raise
        if not self._detach:
            _LIVE.add(self)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node (SIGTERM, then SIGKILL after ``timeout`` s) and remove the data
        directory unless ``keep_data``."""
        deadline = time.monotonic() + timeout
        for node in self._nodes:
            node.signal(signal.SIGTERM)
        for node in self._nodes:
            if not node.wait(deadline - time.monotonic()):
                node.kill()
        _LIVE.discard(self)
        self._discard()

    def __enter__(self) -> _KraftNodes:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def describe(self) -> dict[str, object]:
        """Where everything is: enough for another process to find and stop the nodes."""
        return {
            "version": self._version,
            "bootstrap": self.bootstrap_servers,
            "data_dir": str(self.data_dir),
            "created_data_dir": self._created_data_dir,
            "keep_data": self.keep_data,
            "nodes": [
                {
                    "node_id": node.node_id,
                    "pid": node.pid,
                    "port": node.port,
                    "controller_port": node.controller_port,
                    "properties": str(node.properties_path),
                    "log": str(node.log_path),
                }
                for node in self._nodes
            ],
        }

    # -- per-node operations (public through the subclasses) ----------------------------------

    def _kill_node(self, index: int) -> None:
        self._node(index).kill()

    def _restart_node(self, index: int, timeout: float = 30.0) -> None:
        node = self._node(index)
        if node.running():
            node.signal(signal.SIGTERM)
            if not node.wait(timeout):
                node.kill()
        try:
            self._start_nodes(find_java(), broker_classpath(self._version), [node])
        except BrokerStartError:
            node.kill()
            raise
        if not self._detach:
            _LIVE.add(self)

    def _node(self, index: int) -> KraftNode:
        if not self._nodes:
            raise BrokerStartError("the embedded broker has not been started", hint="call start()")
        if not 0 <= index < len(self._nodes):
            raise ArgumentError(f"broker index {index} out of range 0..{len(self._nodes) - 1}")
        return self._nodes[index]

    # -- internals -----------------------------------------------------------------------------

    def _refuse_taken_ports(self) -> None:
        if not self._requested_port:
            return
        ports = [self._requested_port + i for i in range(self._count)]
        taken = [p for p in ports if port_in_use(p)]
        if taken:
            raise BrokerStartError(
                f"cannot start the embedded Kafka broker: port "
                f"{', '.join(map(str, taken))} on {HOST} is already in use",
                hint="stop whatever listens there (see `ss -ltnp`; a broker from "
                "`reliable-kafka kafka up` stops with `reliable-kafka kafka down`), "
                "or use port=0 to pick free ports",
            )

    def _plan_nodes(self) -> None:
        if self._requested_port:
            ports = [self._requested_port + i for i in range(self._count)]
            controller_ports = free_ports(self._count)
        else:
            picked = free_ports(2 * self._count)
            ports, controller_ports = picked[: self._count], picked[self._count :]
        if self._data_dir is None:
            if self._given_data_dir is None:
                self._data_dir = Path(tempfile.mkdtemp(prefix="rk-kafka-"))
                self._created_data_dir = True
            else:
                self._created_data_dir = not self._given_data_dir.exists()
                self._given_data_dir.mkdir(parents=True, exist_ok=True)
                self._data_dir = self._given_data_dir
        self._nodes = [
            KraftNode(i, self._data_dir / f"node-{i}", ports[i], controller_ports[i]) for i in range(self._count)
        ]

    def _start_nodes(self, java: str, classpath: str, nodes: list[KraftNode]) -> None:
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self._nodes)
        for node in nodes:
            node.write_config(node_properties(node, voters, self._count, self._extra, self.security))
        self._format(java, classpath, [n for n in nodes if not n.is_formatted()])
        for node in nodes:
            node.launch(java, classpath, detach=self._detach)
        self._wait_ready(nodes)

    def _format(self, java: str, classpath: str, nodes: list[KraftNode]) -> None:
        if not nodes:
            return
        cluster_id = self._cluster_id()
        running = []
        for node in nodes:
            out = open(node.directory / "format.log", "wb")
            command = node.jvm_command(
                java,
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(node.properties_path),
                *(self.security.format_arguments() if self.security else []),
            )
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            running.append((node, process, out))
        failures = []
        for node, process, out in running:
            try:
                code = process.wait(timeout=_FORMAT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            out.close()
            if code != 0:
                output = tail(node.directory / "format.log")
                failures.append(f"  node {node.node_id} (exit {code}):\n{output}")
        if failures:
            raise BrokerStartError(
                "cannot format the embedded Kafka broker's storage (kafka.tools.StorageTool)",
                hint=_hint_for("\n".join(failures)),
                log_tail="\n".join(failures),
            )

    def _cluster_id(self) -> str:
        # A node formatted earlier (kept data) fixes the id; the others must share it.
        for node in self._nodes:
            meta = node.kafka_data / "meta.properties"
            if meta.exists():
                for line in meta.read_text().splitlines():
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        return new_cluster_id()

    def _wait_ready(self, nodes: list[KraftNode]) -> None:
        """Wait until each of ``nodes`` answers a metadata request listing every running node."""
        deadline = time.monotonic() + self._startup_timeout
        pending = list(nodes)
        while pending:
            for node in nodes:
                code = node.exit_code()
                if code is not None:
                    self._fail(f"node {node.node_id} exited with code {code} while starting", nodes)
            expected = {n.node_id for n in self._nodes if n.running()}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(
                    f"no metadata answer listing brokers {sorted(expected)} from "
                    f"{', '.join(n.bootstrap for n in pending)} within "
                    f"{self._startup_timeout:.0f} s",
                    nodes,
                )
            node = pending[0]
            seen = probe_broker_ids(
                node.bootstrap,
                timeout=min(3.0, max(0.5, remaining)),
                client_config=self.security.client_config(ADMIN) if self.security else None,
            )
            if seen is not None and expected <= seen:
                pending.pop(0)
            else:
                time.sleep(0.2)

    def _fail(self, what: str, nodes: Iterable[KraftNode]) -> None:
        tails = "\n".join(node.log_tail() for node in nodes)
        raise BrokerStartError(
            f"embedded Kafka {self._version} did not start: {what}",
            hint=_hint_for(tails),
            log_tail=tails,
        )

    def _kill_all(self) -> None:
        for node in self._nodes:
            node.signal(signal.SIGKILL)
        for node in self._nodes:
            node.wait(30.0)

    def _discard(self) -> None:
        """Forget the nodes and remove the data unless it is kept."""
        if self._data_dir is not None and not self.keep_data:
            if self._created_data_dir:
                shutil.rmtree(self._data_dir, ignore_errors=True)
            else:
                for node in self._nodes:
                    shutil.rmtree(node.directory, ignore_errors=True)
            self._data_dir = None
            self._nodes = []
        elif self.keep_data:
            for node in self._nodes:
                node.process = None


def _hint_for(output: str) -> str:
    if "UnsupportedClassVersionError" in output:
        return "this Kafka needs a newer Java: install Java 17+ and set JAVA_HOME"
    if "Address already in use" in output or "BindException" in output:
        return "a port is taken by another process; use port=0 to pick free ports"
    if "ClassNotFoundException" in output or "NoClassDefFoundError" in output:
        return (
            "the classpath is incomplete: check KAFKA_HOME, or delete the jar cache "
            "(~/.cache/reliable-kafka/jars) so it is resolved again"
        )
    if "OutOfMemoryError" in output:
        return "the JVM ran out of memory (-Xmx512m); free memory or stop other brokers"
    if "already formatted" in output.lower() or "INCONSISTENT_CLUSTER_ID" in output:
        return "the data directory holds another cluster's data: use a fresh data_dir"
    return "read the broker log below; the full logs are in the node directories"


class EmbeddedKafka(_KraftNodes):
    """One Kafka node (KRaft broker+controller) in a child JVM on 127.0.0.1.

    Keyword arguments (defaults in brackets):

    - ``data_dir`` [a new temp dir]: where the node's config, logs and data live.
    - ``keep_data`` [False]: keep ``data_dir`` on :meth:`stop` (always kept by :meth:`kill`).
    - ``port`` [0 = a free port]: the client (PLAINTEXT) port.
    - ``extra_config`` [None]: more ``server.properties`` settings (not ports, ids, or dirs).
    - ``detach`` [False]: let the JVM outlive this process (no watchdog, no atexit stop); used
      by ``reliable-kafka kafka up``.
    - ``startup_timeout`` [60.0]: seconds to wait for a metadata answer.
    - ``version`` [KAFKA_VERSION]: the Kafka version resolved from Maven (ignored with KAFKA_HOME).
    - ``security`` [None]: a :class:`~reliable_kafka.broker.secure.BrokerSecurity`: SASL/SCRAM-SHA-256
      users, the StandardAuthorizer, ``admin`` the only super user; clients then need
      ``security.client_config(user)`` and ACLs.

    Example::

        with EmbeddedKafka() as kafka:
            producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    """

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        keep_data: bool = False,
        port: int = 0,
        extra_config: Mapping[str, str] | None = None,
        detach: bool = False,
        startup_timeout: float = 60.0,
        version: str = KAFKA_VERSION,
        security: BrokerSecurity | None = None,
    ) -> None:
        super().__init__(
            count=1,
            data_dir=data_dir,
            keep_data=keep_data,
            port=port,
            extra_config=extra_config,
            detach=detach,
            startup_timeout=startup_timeout,
            version=version,
            security=security,
        )

    def start(self) -> EmbeddedKafka:
        super().start()
        return self

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    @property
    def port(self) -> int:
        """The client port."""
        return self._node(0).port

    @property
    def log_path(self) -> Path:
        """The broker's log file (``broker.log`` in its node directory)."""
        return self._node(0).log_path

    @property
    def pid(self) -> int | None:
        """Process group id of the node (watchdog, or the JVM when detached)."""
        return self._node(0).pid

    def running(self) -> bool:
        return bool(self._nodes) and self._nodes[0].running()

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would; its data stays for :meth:`restart`."""
        self._kill_node(0)

    def restart(self) -> EmbeddedKafka:
        """Start again on the same ports and data (after :meth:`kill`, or stopping it first)."""
        self._restart_node(0)
        return self


class EmbeddedCluster(_KraftNodes):
    """N Kafka nodes, each a KRaft broker+controller and a voter of one quorum, on 127.0.0.1.

    Node ids are 0..N-1 and equal the broker index used by :meth:`kill_broker` and
    :meth:`restart_broker`. Internal topics use replication factor min(3, N) and min ISR one
    less (e.g. 3 and 2), and so does ``default.replication.factor``.

    Keyword arguments: ``brokers`` [3], and as :class:`EmbeddedKafka`, where ``port`` is the
    first node's client port (the others follow it) and ``startup_timeout`` defaults to 120 s.
    """

    def __init__(
        self,
        *,
        brokers: int = 3,
        data_dir: Path | None = None,
        keep_data: bool = False,
        port: int = 0,
        extra_config: Mapping[str, str] | None = None,
        detach: bool = False,
        startup_timeout: float = 120.0,
        version: str = KAFKA_VERSION,
        security: BrokerSecurity | None = None,
    ) -> None:
        super().__init__(
            count=brokers,
            data_dir=data_dir,
            keep_data=keep_data,
            port=port,
            extra_config=extra_config,
            detach=detach,
            startup_timeout=startup_timeout,
            version=version,
            security=security,
        )

    def start(self) -> EmbeddedCluster:
        super().start()
        return self

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    @property
    def brokers(self) -> int:
        return self._count

    @property
    def ports(self) -> list[int]:
        """The client ports, by broker index."""
        return [node.port for node in self._nodes]

    def log_path(self, index: int) -> Path:
        """The log file of broker ``index``."""
        return self._node(index).log_path

    def broker_running(self, index: int) -> bool:
        return self._node(index).running()

    def kill_broker(self, index: int) -> None:
        """SIGKILL broker ``index`` (0..N-1), as a crash would; its data stays."""
        self._kill_node(index)

    def restart_broker(self, index: int) -> None:
        """Start broker ``index`` again on its ports and data; wait until it serves metadata
        listing every running broker."""
        self._restart_node(index)
