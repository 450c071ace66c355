"""A local broker that outlives the command that started it (``reliable-kafka kafka up``).

``up`` starts detached embedded node(s) and records them in ``<run dir>/kafka.json``; ``status``
and ``down`` work from that record in any later process. The run dir is ``$RK_RUN_DIR``, else
``<cache>/run`` (see :func:`reliable_kafka.jars.cache_dir`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reliable_kafka.broker.embedded import EmbeddedCluster, EmbeddedKafka
from reliable_kafka.broker.node import probe_broker_ids
from reliable_kafka.broker.secure import ADMIN, SECURE_ROLES, BrokerSecurity
from reliable_kafka.jars import cache_dir
from reliable_kafka.security import read_command_config

__all__ = ["DaemonStatus", "run_dir", "state_path", "up", "status", "down"]


def run_dir() -> Path:
    """Where the running broker is recorded: ``$RK_RUN_DIR``, else ``<cache>/run``."""
    explicit = os.environ.get("RK_RUN_DIR")
    return Path(explicit).expanduser() if explicit else cache_dir() / "run"


def state_path() -> Path:
    """The record of the running broker: ``<run dir>/kafka.json``."""
    return run_dir() / "kafka.json"


@dataclass(frozen=True)
class DaemonStatus:
    """What ``status`` found. ``state`` is the record written by :func:`up` (None if none)."""

    state: dict[str, Any] | None  # the JSON record up() wrote
    alive_pids: tuple[int, ...]
    answering: bool

    @property
    def recorded(self) -> bool:
        return self.state is not None

    @property
    def running(self) -> bool:
        """Every recorded node runs and the cluster answers metadata requests."""
        return self.state is not None and len(self.alive_pids) == len(self.state["nodes"]) and self.answering

    @property
    def bootstrap(self) -> str | None:
        return None if self.state is None else str(self.state["bootstrap"])

    def describe(self) -> str:
        """One human line."""
        if self.state is None:
            return "no broker recorded as running (start one with `reliable-kafka kafka up`)"
        nodes = self.state["nodes"]
        where = (
            f"bootstrap {self.bootstrap} ({len(nodes)} broker{'s' if len(nodes) > 1 else ''}, "
            f"pid {', '.join(str(n['pid']) for n in nodes)}, data {self.state['data_dir']})"
        )
        if self.state.get("client_properties"):
            where += (
                "; secured (SASL/SCRAM-SHA-256, ACLs), client properties: "
                f"{self.state['data_dir']}/client-<user>.properties"
            )
        if self.running:
            return f"Kafka {self.state['version']} is running: {where}"
        if not self.alive_pids:
            return f"Kafka is not running (stale record: {where})"
        if len(self.alive_pids) < len(nodes):
            return f"Kafka is partly running ({len(self.alive_pids)}/{len(nodes)} nodes): {where}"
        return f"Kafka processes run but do not answer metadata requests: {where}"


def up(
    *,
    port: int = 0,
    data_dir: Path | None = None,
    keep_data: bool = False,
    brokers: int = 1,
    secure: bool = False,
    version: str | None = None,
) -> tuple[DaemonStatus, bool]:
    """Start a detached broker (``brokers`` > 1: a cluster) unless one is recorded as running.

    ``secure``: SASL/SCRAM-SHA-256 and the StandardAuthorizer with users ``admin`` (super user)
    and one per role (:data:`SECURE_ROLES`), their client properties written to
    ``<data_dir>/client-<user>.properties`` (mode 0600).

    ``version``: the Kafka release (None: ``$RK_KAFKA_VERSION``, else the default
    :data:`reliable_kafka.jars.KAFKA_VERSION`).

    Returns the status and whether this call started it. A stale record (processes gone) is
    cleaned up first.
    """
    with _locked():
        current = _status_of(_read_state())
        if current.alive_pids:
            return current, False
        if current.state is not None:
            _cleanup(current.state)
        kafka: EmbeddedKafka | EmbeddedCluster
        security = BrokerSecurity.generate(SECURE_ROLES) if secure else None
        if brokers == 1:
            kafka = EmbeddedKafka(
                port=port, data_dir=data_dir, keep_data=keep_data, detach=True, security=security, version=version
            )
        else:
            kafka = EmbeddedCluster(
                brokers=brokers,
                port=port,
                data_dir=data_dir,
                keep_data=keep_data,
                detach=True,
                security=security,
                version=version,
            )
        kafka.start()
        state = {**kafka.describe(), "started_at": time.time()}
        if security is not None:
            state["client_properties"] = _write_client_properties(security, kafka.data_dir)
        _write_state(state)
        return _status_of(state), True


def status(*, timeout: float = 3.0) -> DaemonStatus:
    """Whether the recorded broker runs (its JVMs) and answers a metadata request."""
    return _status_of(_read_state(), timeout=timeout)


def down(*, timeout: float = 30.0) -> DaemonStatus | None:
    """Stop the recorded broker (SIGTERM, then SIGKILL after ``timeout`` s), remove its data
    unless it was started with ``keep_data``, and forget it. Returns what was stopped (None if
    nothing was recorded)."""
    with _locked():
        state = _read_state()
        if state is None:
            return None
        before = _status_of(state, timeout=1.0)
        pids = list(before.alive_pids)
        for pid in pids:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid):
                _signal_group(pid, signal.SIGKILL)
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline + 10:
            time.sleep(0.1)
        _cleanup(state)
        return before


def _write_client_properties(security: BrokerSecurity, directory: Path) -> dict[str, str]:
    paths = {}
    for user in security.users:
        path = directory / f"client-{user}.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(security.client_properties(user))
        paths[user] = str(path)
    return paths


def _status_of(state: dict[str, Any] | None, *, timeout: float = 3.0) -> DaemonStatus:
    if state is None:
        return DaemonStatus(None, (), False)
    alive = tuple(
        int(node["pid"])
        for node in state["nodes"]
        if node.get("pid") and _is_broker(int(node["pid"]), str(node["properties"]))
    )
    answering = False
    if alive:
        admin = (state.get("client_properties") or {}).get(ADMIN)
        seen = probe_broker_ids(
            str(state["bootstrap"]), timeout=timeout, client_config=read_command_config(admin) if admin else None
        )
        answering = seen is not None and len(seen) >= len(alive)
    return DaemonStatus(state, alive, answering)


def _is_broker(pid: int, properties: str) -> bool:
    """Whether ``pid`` is still the broker JVM we recorded (not a reused pid)."""
    if not _alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in args and properties.encode() in args


def _alive(pid: int) -> bool:
    # A JVM started by this very process (``up`` then ``down`` in one Python) is our child:
    # reap it, or it lingers as a zombie that still "exists".
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)  # the JVM leads its own process group (start_new_session)
    except ProcessLookupError:
        pass


def _cleanup(state: dict[str, Any]) -> None:
    if not state.get("keep_data"):
        data_dir = Path(str(state["data_dir"]))
        if state.get("created_data_dir"):
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            for node in state["nodes"]:
                shutil.rmtree(Path(str(node["properties"])).parent, ignore_errors=True)
    state_path().unlink(missing_ok=True)


def _read_state() -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(state_path().read_text())
        return state
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        # An unreadable record names nothing we could stop; start afresh.
        state_path().unlink(missing_ok=True)
        return None


def _write_state(state: dict[str, Any]) -> None:
    path = state_path()
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    partial.replace(path)


@contextmanager
def _locked() -> Iterator[None]:
    """Serialise ``up`` and ``down`` across processes."""
    directory = run_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "kafka.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
