"""A real Kafka broker (KRaft, no ZooKeeper) run as a child JVM for tests, examples and local use.

:class:`EmbeddedKafka` is one combined broker+controller node; :class:`EmbeddedCluster` is N such
nodes, all voters of one static controller quorum on loopback, so replication factor 3 works.
The jars come from Maven (:func:`reliable_kafka.jars.kafka_jars`, cached per user) or from an
unpacked distribution named by ``KAFKA_HOME``. The version is ``version=``, else ``RK_KAFKA_VERSION``,
else :data:`KAFKA_VERSION`; Kafka 3.9 and 4.x differ in a few settings (see
:func:`reliable_kafka.broker.node.node_properties`).

Each node lives in ``<data_dir>/node-<id>/``: ``server.properties``, ``log4j2.properties``,
``broker.log`` (the broker's own log), ``console.log`` (JVM stdout/stderr) and ``kafka-data/``
(``log.dirs``).

No orphan JVMs: unless ``detach=True``, a watchdog kills each JVM when this process dies, and an
``atexit`` hook stops whatever is still running (:mod:`reliable_kafka.broker.quorum`, the machinery
both classes share).

Topic auto-creation keeps Kafka's default (on), as on the Docker images and most development
clusters. The library and the tests create their topics explicitly and do not rely on it; pass
``extra_config={"auto.create.topics.enable": "false"}`` for a strict broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from reliable_kafka.broker.quorum import KraftQuorum
from reliable_kafka.broker.secure import BrokerSecurity
from reliable_kafka.jars import KAFKA_VERSION

__all__ = ["KAFKA_VERSION", "EmbeddedKafka", "EmbeddedCluster"]


class EmbeddedKafka(KraftQuorum):
    """One Kafka node (KRaft broker+controller) in a child JVM on 127.0.0.1.

    Keyword arguments (defaults in brackets):

    - ``data_dir`` [a new temp dir]: where the node's config, logs and data live.
    - ``keep_data`` [False]: keep ``data_dir`` on :meth:`stop` (always kept by :meth:`kill`).
    - ``port`` [0 = a free port]: the client (PLAINTEXT) port.
    - ``extra_config`` [None]: more ``server.properties`` settings (not ports, ids, or dirs).
    - ``detach`` [False]: let the JVM outlive this process (no watchdog, no atexit stop); used
      by ``reliable-kafka kafka up``.
    - ``startup_timeout`` [60.0]: seconds to wait for a metadata answer.
    - ``version`` [None: ``$RK_KAFKA_VERSION``, else KAFKA_VERSION]: the Kafka version resolved from
      Maven (ignored with KAFKA_HOME); 3.9.0 or newer (tested: ``jars.TESTED_KAFKA_VERSIONS``).
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
        version: str | None = None,
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


class EmbeddedCluster(KraftQuorum):
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
        version: str | None = None,
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
