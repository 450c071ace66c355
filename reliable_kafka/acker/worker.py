"""The acker worker: a consumer-group member over ``<topology>.acks`` (docs/design.md section 4).

Per assigned partition it folds decoded ack batches into an :class:`AckerTable`, publishes the
decisions to the owning spouts on ``<topology>.outcomes``, and commits the partition only up to the
smallest first offset of a pending root, after the outcomes decided below it were delivered. The
committed offset is therefore a snapshot point: a restarted or rebalanced worker replays from it
and rebuilds the same table.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reliable_kafka import codec
from reliable_kafka import validation as v
from reliable_kafka.acker.outcomes import OUTCOME_PRODUCER_DEFAULTS, OutcomePublisher
from reliable_kafka.acker.state import AckerPartition, AckerStats
from reliable_kafka.config import Connection, Loop, TopicCreation, Tracking
from reliable_kafka.core.acker_table import AckerTable, Outcomes
from reliable_kafka.core.ids import new_id, partitions_for_roots
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.core.root_store import MAX_BUCKETS
from reliable_kafka.errors import DecodeError, DeliveryError, TopologyError
from reliable_kafka.kafka.ack_sender import MAX_ENTRIES_PER_RECORD
from reliable_kafka.kafka.admin import admin_client, ensure_topics, partition_count, warn_if_create_time
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.clients import new_consumer, new_producer
from reliable_kafka.kafka.config import consumer_settings, producer_settings
from reliable_kafka.kafka.fatal import (
    ClientFailed,
    Rebuilds,
    client_failed,
    fatal_error,
    raise_if_fatal,
    static_member,
)
from reliable_kafka.kafka.parking import Quarantine
from reliable_kafka.kafka.produce import release_producer
from reliable_kafka.lifecycle import run_until_stopped
from reliable_kafka.polling import consume_batch
from reliable_kafka.topology import TopologyTopics, check_ack_partitions

__all__ = ["AckerWorker", "AckerStats"]

log = logging.getLogger(__name__)

# a decoded ack record as AckerTable.fold_records takes it: kinds, roots, vals, sender, event time (ms), offset
AckRecord = tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]

# A killed worker's partitions wait for its session to expire: 6 s, the least a broker accepts by
# default (group.min.session.timeout.ms), not librdkafka's 45 s. KIP-848's protocol is no faster:
# its session is the broker's (45 s by default). bench/bench_acker_failover.py measures both.
ACKER_CONSUMER_DEFAULTS = {"session.timeout.ms": 6_000, "heartbeat.interval.ms": 1_000}
FOLD_GROUP = 16  # records per vectorised fold: shares NumPy's per-call cost (bench/bench_acker_table.py)
MAX_EVENT_KIND = int(max(EventKind))  # a plain int: NumPy compares with it ~6x faster than with the IntEnum


class AckerWorker(OutcomePublisher):
    """One acker process (or thread). Several workers with the same group share the partitions.

    Keyword arguments (defaults in brackets; docs/configuration.md has every field):
    - ``topology``, ``connection``: required; ``connection`` is a bootstrap servers string or a
      :class:`~reliable_kafka.config.Connection` (the consumer's ``session.timeout.ms`` defaults to
      6000 here, ``heartbeat.interval.ms`` to 1000: a killed worker's partitions move after about
      6 s; a stopped one leaves at once).
    - ``tracking`` [``Tracking()``]: the worker reads ``ackers`` and ``message_timeout_ms`` from it
      (give the topology's spouts the same object). ``ackers`` is N, the ack topic's partitions: a
      missing topic is created with N (1 when None); an existing one must have N partitions (None:
      any), or the worker refuses to start (:class:`TopologyError` naming the topic and both counts).
    - ``timeout_buckets`` [4]: rotating buckets; a root times out between ``message_timeout_ms`` and
      ``message_timeout_ms * (1 + 1/buckets)`` after its last INIT or RESET_TIMEOUT.
    - ``group_id`` [``<topology>.ackers``].
    - ``create_topics`` [True]: create missing topology topics (False: refuse to start without
      them); a :class:`~reliable_kafka.config.TopicCreation` creates them with its replication
      (default: ``replication_factor`` min(3, brokers), ``min_insync_replicas`` min(2, factor); an
      existing topic with fewer copies than the cluster allows is warned about).
    - ``max_entries_per_record`` [100000]: larger ack records are quarantined, not folded.
    - ``loop`` [``Loop()``]: batch size, commit interval, ``/metrics`` port and clock.
    - ``name`` [random]: give each worker process a stable name to use static group membership
      (``group.instance.id``), so that a restarted worker gets its partitions back without waiting
      for the dead one's session to expire. A named worker that stops and is not restarted holds
      its partitions until its session expires (static members do not leave the group).
    """

    component = "acker"  # its kind in status reports and metrics (reliable_kafka.ops.snapshot)

    def __init__(
        self,
        *,
        topology: str,
        connection: str | Connection,
        tracking: Tracking | None = None,
        timeout_buckets: int = 4,
        group_id: str | None = None,
        create_topics: bool | TopicCreation = True,
        max_entries_per_record: int = 100_000,
        loop: Loop | None = None,
        name: str | None = None,
    ) -> None:
        v.require_topology("AckerWorker", "topology", topology)
        connection = Connection.of("AckerWorker", connection)
        tracking = tracking if tracking is not None else Tracking()
        v.require_instance("AckerWorker", "tracking", tracking, Tracking)
        ackers, message_timeout_ms = tracking.ackers, tracking.message_timeout_ms
        v.require_int("AckerWorker", "tracking.ackers", ackers, minimum=1, optional=True)
        v.require_int("AckerWorker", "tracking.message_timeout_ms", message_timeout_ms, minimum=1)
        v.require_int("AckerWorker", "timeout_buckets", timeout_buckets, minimum=1, maximum=MAX_BUCKETS)
        v.require_str("AckerWorker", "group_id", group_id, optional=True)
        v.require_instance("AckerWorker", "create_topics", create_topics, (bool, TopicCreation), optional=False)
        # senders pack up to MAX_ENTRIES_PER_RECORD entries a record: a lower limit quarantines them
        v.require_int("AckerWorker", "max_entries_per_record", max_entries_per_record, minimum=MAX_ENTRIES_PER_RECORD)
        loop = loop if loop is not None else Loop()
        v.require_instance("AckerWorker", "loop", loop, Loop)
        v.require_str("AckerWorker", "name", name, optional=True)
        creation = create_topics if isinstance(create_topics, TopicCreation) else TopicCreation()
        clock = loop.clock
        self.connection = connection
        self.loop = loop
        self.topics = TopologyTopics(topology, ackers=ackers or 1)
        self.ackers = ackers  # None: whatever the existing ack topic has (start() then sets topics.ackers)
        self.bootstrap_servers = connection.bootstrap_servers
        self.message_timeout_ms: int = cast(int, message_timeout_ms)  # checked above: not None
        self.timeout_buckets = timeout_buckets
        self.group_id = group_id or f"{topology}.ackers"
        self.commit_interval_ms = loop.commit_interval_ms
        self.batch_size = loop.batch_size
        self.create_topics = create_topics is not False
        self.replication_factor = creation.replication_factor
        self.min_insync_replicas = creation.min_insync_replicas
        self.max_entries_per_record = max_entries_per_record
        self.kafka_config = connection.client_config()
        self._stable_name = name is not None
        self.name = name or f"acker-{new_id() & 0xFFFF:04x}"
        self.stats = AckerStats()
        self.metrics_port = loop.metrics_port  # serve /metrics here (0: any free port); see reliable_kafka.ops
        self.metrics_host: str | None = None  # where /metrics listens (None: $RK_METRICS_HOST, else 127.0.0.1)
        self._partitions: dict[int, AckerPartition] = {}
        self._outcome_partitions = 0
        self._retry_outcomes: list[tuple[int, bytes]] = []
        self._consumer: Consumer | None = None  # these three are made by start()
        self._producer: Producer | None = None
        self._quarantine: Quarantine | None = None
        self._last_commit = 0.0
        self._commit_waits_since: float | None = None  # a due commit waiting for outcomes to be delivered
        self._ack_partitions = 0
        self._failed = False  # poll_once raised: the table may hold a half-folded group, commit nothing
        self._rebuilds = Rebuilds(clock=clock)  # new clients after fatal errors, within bounds
        self._fenced: ClientFailed | None = None  # a commit result said the consumer was fenced
        self.ready = threading.Event()  # set once the worker consumes (for tests and supervisors)
        self.clients = connection.clients
        self._clock = clock

    # --- lifecycle ------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, handle_signals: bool = False) -> AckerStats:
        """Consume until ``stop`` is set (or SIGTERM/SIGINT with ``handle_signals``)."""
        stats: AckerStats = run_until_stopped(self, stop, handle_signals=handle_signals)
        return stats

    def start(self) -> None:
        admin = admin_client(self.bootstrap_servers, self.kafka_config, component=self.name, clients=self.clients)
        if self.ackers is None:  # not said: N is what the ack topic has, if it exists (else 1)
            listed = admin.list_topics(timeout=30).topics.get(self.topics.acks)
            found = len(listed.partitions) if listed is not None and listed.error is None else 0
            self.topics = TopologyTopics(self.topics.topology, ackers=found or 1)
        if self.create_topics:  # the topics it uses must be there; the others may be an admin's business
            ensure_topics(
                admin,
                self.topics,
                replication_factor=self.replication_factor,
                min_insync_replicas=self.min_insync_replicas,
                needed={self.topics.acks, self.topics.outcomes, self.topics.quarantine},
                clock=self._clock,
            )
        self._ack_partitions = partition_count(admin, self.topics.acks, clock=self._clock) or 0
        if not self._ack_partitions:
            raise TopologyError(
                f"{self.name}: ack topic {self.topics.acks} does not exist; run with create_topics "
                f"or create the topology's topics first"
            )
        check_ack_partitions(self.name, self.topics, self._ack_partitions, self.ackers)
        warn_if_create_time(admin, self.topics)
        self._outcome_partitions = partition_count(admin, self.topics.outcomes, clock=self._clock) or 0
        if not self._outcome_partitions:
            raise TopologyError(f"{self.name}: outcome topic {self.topics.outcomes} does not exist")
        self._connect()

    def _connect(self) -> None:
        """The outcome producer, the quarantine and the consumer, subscribed (also after a rebuild)."""
        self._producer = new_producer(
            self.bootstrap_servers, self.producer_config(), component=self.name, clients=self.clients
        )
        self._quarantine = Quarantine(self._producer, topic=self.topics.quarantine, component=self.name)
        overrides: dict[str, object] = {"isolation.level": "read_committed"}
        config = consumer_settings(self.kafka_config)
        if config.get("group.protocol", "classic") == "classic":
            # KIP-848's protocol (group.protocol=consumer) refuses these: the broker decides them
            overrides["partition.assignment.strategy"] = "cooperative-sticky"
            config = {**ACKER_CONSUMER_DEFAULTS, **config}
        if self._stable_name:  # static membership: a restarted worker gets its partitions back at once
            overrides["group.instance.id"] = f"{self.group_id}.{self.name}"
        overrides["on_commit"] = self._on_commit
        self._consumer = new_consumer(self.bootstrap_servers, self.group_id, config, clients=self.clients, **overrides)
        self._consumer.subscribe(
            [self.topics.acks], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        log.info("%s: consuming %s as group %s", self.name, self.topics.acks, self.group_id)

    def producer_config(self) -> dict[str, Any]:
        """The outcome producer's librdkafka settings: :data:`OUTCOME_PRODUCER_DEFAULTS`, then ``kafka_config``
        (with its ``producer_config``)."""
        return {**OUTCOME_PRODUCER_DEFAULTS, **producer_settings(self.kafka_config)}

    def close(self) -> None:
        try:
            if self._consumer is not None:
                if not self._failed:  # after an error only what was committed before it stands
                    self._publish(self._advance_clocks())
                    self._commit(force=True)
                self._consumer.close()  # revokes (the callback commits once more) and leaves the group
        finally:
            self._consumer = None
            producer, self._producer = self._producer, None  # closed: a second close() has nothing to do
            release_producer(producer, owner=self.name)
            log.info("%s: stopped; %s", self.name, self.stats)

    # --- rebalance ------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
        for tp in partitions:
            table = AckerTable(message_timeout_ms=self.message_timeout_ms, buckets=self.timeout_buckets)
            offset = committed.get(tp.partition)
            self._partitions[tp.partition] = AckerPartition(
                table, offset if offset is not None and offset >= 0 else None
            )
        log.info("%s: assigned %s (replaying from %s)", self.name, [tp.partition for tp in partitions], committed)
        self.ready.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {tp.partition for tp in partitions}
        try:
            if not self._failed:  # after an error the next owner replays from the last commit
                self._publish(self._advance_clocks())
                self._commit(force=True, only=revoked)
        except (KafkaException, DeliveryError) as exc:
            # the next owner replays from the last commit: nothing is lost, outcomes repeat
            log.warning("%s: could not commit revoked partitions %s: %s", self.name, sorted(revoked), exc)
        for partition in revoked:
            self._partitions.pop(partition, None)
        log.info("%s: revoked %s", self.name, sorted(revoked))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._partitions.pop(tp.partition, None)
        log.warning("%s: lost %s; the new owner replays them", self.name, [tp.partition for tp in partitions])

    # --- the loop -------------------------------------------------------------------------------

    def poll_once(self, timeout: float = 0.2) -> None:
        """Fold one consumed batch, publish its decisions, and commit when the interval passed."""
        try:
            self._poll_once(timeout)
            self._raise_if_fenced()
        except ClientFailed as failed:
            self._rebuild(failed)
        except KafkaException as exc:
            if fatal_error(exc) is None:
                self._failed = True  # close() then commits nothing more (docs/design.md section 4)
                raise
            self._rebuild(client_failed(fatal_error(exc), component=self.name, client="client"))
        except BaseException:
            self._failed = True
            raise

    def _raise_if_fenced(self) -> None:
        """A commit result may be the first to tell that the consumer was fenced (:meth:`_on_commit`)."""
        fenced, self._fenced = self._fenced, None
        if fenced is not None:
            raise fenced

    def _rebuild(self, failed: ClientFailed) -> None:
        """New clients after a fatal error (docs/design.md section 7.5), as a restarted worker would have.

        The tables go and the new consumer replays each ack partition from its committed offset
        (event sourcing): nothing is committed on the way (the old consumer cannot, and what was
        committed stands); outcomes decided again are harmless. Past :class:`Rebuilds`' limit the
        ClientFailed goes on out of the loop: the worker stops and its process exits non-zero.
        """
        self._failed = True  # nothing is committed until the new consumer has rebuilt the tables
        self._rebuilds.allow(failed)
        self.stats.client_rebuilds = self._rebuilds.count
        self._partitions.clear()
        self._retry_outcomes.clear()  # decided again by the replay
        self._commit_waits_since = None
        self._fenced = None  # the old consumer's commit results tell nothing about the new one
        consumer, self._consumer = self._consumer, None
        try:
            if consumer is not None:
                consumer.close()  # librdkafka closes a fenced consumer without asking the broker
        except (KafkaException, RuntimeError) as exc:
            log.debug("%s: closing the failed consumer: %s", self.name, exc)
        producer, self._producer = self._producer, None
        release_producer(producer, owner=self.name)
        self._connect()
        self._failed = False
        log.warning("%s: new Kafka clients; replaying %s from its committed offsets", self.name, self.topics.acks)

    def _poll_once(self, timeout: float) -> None:
        assert self._consumer is not None and self._producer is not None and self._quarantine is not None
        self._retry_failed_outcomes()
        self._quarantine.retry_unsent()
        by_partition: dict[int, list[tuple[int, AckRecord | None]]] = {}
        for message in consume_batch(self._consumer, self.batch_size, timeout):
            error = message.error()
            if error is not None:
                check_consumed(message, self._consumer, component=self.name)
                raise_if_fatal(error, component=self.name, instance_id=static_member(self._consumer))
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: consumer error: %s", self.name, error)
                continue
            partition = cast(int, message.partition())  # a consumed record's, never None
            if partition in self._partitions:  # else revoked in this very poll
                # a consumed record's offset is never None (confluent-kafka's type allows it for a producer's)
                by_partition.setdefault(partition, []).append((message.offset(), self._decode(message)))  # type: ignore[arg-type]
        decided: list[Outcomes] = []
        for partition, records in by_partition.items():
            decided.extend(self._fold(self._partitions[partition], records))
        decided.extend(self._advance_clocks())
        self._publish(decided)
        self._producer.poll(0)
        self._count_expired_ownerless()
        self.stats.pending = sum(state.table.pending for state in self._partitions.values())
        self.stats.table_bytes = sum(state.table.nbytes for state in self._partitions.values())
        self._commit()

    def _fold(self, state: AckerPartition, records: list[tuple[int, AckRecord | None]]) -> list[Outcomes]:
        """Fold one partition's records in order, one vectorised fold per group of records.

        ``next_offset`` passes a record only once it is folded (or quarantined, as None), so no
        commit can pass a record that was read but not folded.
        """
        decided, group = [], []
        for i, (offset, record) in enumerate(records):
            if record is not None:
                group.append(record)
            if len(group) == FOLD_GROUP or (i == len(records) - 1 and group):
                outcomes = state.table.fold_records(group)
                if len(outcomes):
                    decided.append(outcomes)
                self.stats.entries_folded += sum(len(r[0]) for r in group)
                group = []
            if not group:
                state.next_offset = offset + 1
        return decided

    def _decode(self, message: Message) -> AckRecord | None:
        """The record as ``fold_records`` takes it (its valid entries), or None when it is quarantined."""
        assert self._quarantine is not None
        state = self._partitions[cast(int, message.partition())]
        self.stats.records += 1
        try:
            batch = codec.decode_ack_batch(message.value())
        except DecodeError as error:
            self._quarantine.decode_error(message, error)
            self.stats.quarantined += 1
            return None
        if len(batch) > self.max_entries_per_record:
            self._quarantine.park(
                message,
                f"ack record holds {len(batch)} entries, more than max_entries_per_record="
                f"{self.max_entries_per_record}; not folded",
            )
            self.stats.quarantined += 1
            return None
        kinds, roots, vals = batch.kinds, batch.roots, batch.vals
        malformed = (roots == 0) | (kinds > MAX_EVENT_KIND)
        # a root of another partition could never complete here: its other events go elsewhere
        bad = malformed
        if self._ack_partitions > 1:
            bad = malformed | (partitions_for_roots(roots, self._ack_partitions) != message.partition())
        if bad.any():  # not folded; the record is kept for inspection
            elsewhere = bad & ~malformed
            invalid = int(np.count_nonzero(bad))
            self.stats.invalid_entries += invalid
            self._quarantine.park(
                message,
                f"{invalid} of {len(batch)} entries invalid ({int(np.count_nonzero(malformed))} with "
                f"root 0 or an unknown kind, {int(np.count_nonzero(elsewhere))} whose root belongs to another "
                f"of the {self._ack_partitions} ack partitions: root mod {self._ack_partitions}, read unsigned); "
                f"the valid ones were folded",
            )
            self.stats.quarantined += 1
            valid = ~bad
            kinds, roots, vals = kinds[valid], roots[valid], vals[valid]
        timestamp = message.timestamp()[1]
        wall_ms = int(self._clock.time() * 1000)
        if timestamp <= 0:
            timestamp = wall_ms
        if state.event_ms is None or timestamp >= state.event_ms:
            state.event_ms, state.event_wall_ms = timestamp, wall_ms
        return kinds, roots, vals, batch.sender, timestamp, message.offset()  # type: ignore[return-value]  # consumed: an offset

    def _advance_clocks(self) -> list[Outcomes]:
        """Let wall time pass on idle partitions, so trees whose acks never come time out.

        A partition with records it has not read yet is not idle: it is lagging, or an open
        transaction holds its last stable offset (read_committed stops there, for up to the
        writer's transaction timeout). Its clock then moves only with the records it reads, so a
        stuck transaction elsewhere does not time out trees whose acks wait behind it.
        """
        wall_ms = int(self._clock.time() * 1000)
        decided = []
        behind = self._partitions_behind()
        for partition, state in self._partitions.items():
            if partition in behind:
                state.event_wall_ms = wall_ms  # the idle time counts from when it caught up
                continue
            now = state.clock_ms(wall_ms)
            if now is not None:
                outcomes = state.table.advance(now)
                if len(outcomes):
                    decided.append(outcomes)
        return decided

    def _partitions_behind(self) -> set[int]:
        """Assigned partitions whose high watermark (as of the last fetch) is past our position."""
        if self._consumer is None or not self._partitions:
            return set()
        behind = set()
        try:
            positions = self._consumer.position([TopicPartition(self.topics.acks, p) for p in self._partitions])
            for tp in positions:
                _, high = self._consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high is not None and high > tp.offset:
                    behind.add(tp.partition)
        except KafkaException as exc:  # no fetch yet: treat as idle, as before
            log.debug("%s: no positions yet: %s", self.name, exc)
        return behind

    def _count_expired_ownerless(self) -> None:
        for state in self._partitions.values():
            expired = state.table.expired_ownerless
            self.stats.expired_ownerless += expired - state.ownerless
            state.ownerless = expired
