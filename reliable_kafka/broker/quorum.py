"""N combined KRaft nodes (broker+controller) of one static quorum on loopback, run as child JVMs:
the machinery both :class:`~reliable_kafka.broker.EmbeddedKafka` and
:class:`~reliable_kafka.broker.EmbeddedCluster` are (plan ports and directories, format storage,
launch, wait for a metadata answer listing every running node, stop, kill, restart a node).

No orphan JVMs: unless ``detach=True``, each JVM runs under a tiny Python watchdog that kills it
when this process dies (even by SIGKILL: the watchdog sees its stdin pipe close) and the JVM gets
``PR_SET_PDEATHSIG`` from the watchdog; an ``atexit`` hook stops whatever is still running.
(``PR_SET_PDEATHSIG`` set directly from here would fire when the *thread* that started the JVM
ends, which kills brokers started from worker threads; the single-threaded watchdog avoids that.)
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from reliable_kafka import validation as v
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
from reliable_kafka.jars import check_kafka_version, kafka_version

__all__ = ["KraftQuorum"]

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
_LIVE: set[KraftQuorum] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for nodes in list(_LIVE):
        try:
            nodes.stop(timeout=10.0)
        except Exception:  # noqa: BLE001 - exiting anyway; the watchdogs are the last resort
            pass


class KraftQuorum:
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
        version: str | None,
        security: BrokerSecurity | None = None,
    ) -> None:
        where = type(self).__name__  # the arguments' checks (reliable_kafka.validation)
        v.require_int(where, "brokers", count, minimum=1)
        v.require_instance(where, "data_dir", data_dir, (str, os.PathLike))
        v.require_bool(where, "keep_data", keep_data)
        v.require_int(where, "port", port, minimum=0, maximum=65535 - (count - 1))
        v.require_mapping(where, "extra_config", extra_config)
        v.require_bool(where, "detach", detach)
        v.require_number(where, "startup_timeout", startup_timeout, above=0)
        v.require_str(where, "version", version, optional=True)  # None: RK_KAFKA_VERSION, else the default
        v.require_instance(where, "security", security, BrokerSecurity)
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
        # a ConfigError now, not a Maven failure or a refused setting later
        self._version = kafka_version() if version is None else check_kafka_version(version, what="version")
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

    def start(self) -> KraftQuorum:
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

    def __enter__(self) -> KraftQuorum:
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
            node.write_config(
                node_properties(node, voters, self._count, self._extra, self.security, version=self._version)
            )
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
