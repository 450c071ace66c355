"""What both Python spouts are made of (:class:`SpoutShell`): configuration, the handler and its
collector, the clients, emission, and the root-owning core (docs/design.md section 5)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from reliable_kafka.codec import ANCHORS_HEADER as _ANCHORS
from reliable_kafka.codec import encode_one_anchor
from reliable_kafka.config import Connection, Guarantee, Loop, Tracking
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.core.tracker import InFlightTracker
from reliable_kafka.errors import AuthorizationError, ConfigError, OutputRefused, TopologyError
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.admin import admin_client, partition_count
from reliable_kafka.kafka.clients import SENT_PER_POLL, check_ack_sender_config, new_consumer, new_producer
from reliable_kafka.kafka.produce import Header, ProducerUnusable, produce_headers, produce_tuple
from reliable_kafka.lifecycle import Pollable, run_until_stopped
from reliable_kafka.ops.failures import FailureRecord
from reliable_kafka.spout.overrides import overridden
from reliable_kafka.spout.records import SourceRecord, SpoutCollector, SpoutStats, forward_to, source_record_of
from reliable_kafka.spout.roots import RootOwner
from reliable_kafka.topology import TopologyTopics, check_ack_partitions
from reliable_kafka.validation import (
    refused_outputs,
    require_bool,
    require_callable,
    require_instance,
    require_output_topic,
    require_str,
    require_topics,
    require_topology,
)

# The producer of a spout that promises nothing (guarantee="none") is not idempotent unless
# kafka_config says so: it sends no ack events, and idempotence cost its librdkafka thread 0.6 to
# 2.2 ms of CPU per 1,000 forwarded records in the word-count pipeline against 0.6 to 0.7 without
# (measured: the git history of docs/performance.md). A retried send may then write a record
# twice or out of order, as a plain producer's may. "at_most_once" keeps it (a duplicate would break its promise).
UNTRACKED_PRODUCER = {**SENT_PER_POLL, "enable.idempotence": False}

__all__ = ["SpoutShell", "Guarantee"]

log = logging.getLogger("reliable_kafka.spout.spout")  # the spouts' logger, as before the split

TopicPartitionKey = tuple[str, int]


class SpoutShell:
    """What both Python spouts are made of: configuration, the handler and its collector, and the
    root-owning core (:class:`~reliable_kafka.spout.roots.RootOwner`). :class:`Spout` and
    :class:`~reliable_kafka.spout.transactional.TransactionalSpout` differ only in how they read
    and commit: each writes its own start, rebalance callbacks and round. Keywords: see :class:`Spout`.
    """

    topic_wait_s = 30.0  # how long start() waits for an acker to create the topology's topics

    transactional = False  # the transactional spout's class says True

    def __init__(
        self,
        *,
        topology: str,
        connection: str | Connection,
        source_topics: list[str] | str,
        group_id: str,
        emit_to: str | None = None,
        handler: Callable[[SourceRecord, SpoutCollector], None] | None = None,
        tracking: Tracking | None = None,
        transactional: bool = False,
        loop: Loop | None = None,
        name: str | None = None,
    ) -> None:
        where = type(self).__name__  # Spout or TransactionalSpout
        require_topology(where, "topology", topology)
        connection = Connection.of(where, connection)
        sources = require_topics(where, "source_topics", source_topics)
        require_str(where, "group_id", group_id)
        if (emit_to is None) == (handler is None):
            raise ConfigError(f"{where}: give exactly one of emit_to (forward records) or handler")
        require_callable(where, "handler", handler, optional=True)
        tracking = tracking if tracking is not None else Tracking()
        require_instance(where, "tracking", tracking, Tracking)
        require_bool(where, "transactional", transactional)
        if transactional != self.transactional:  # Spout.__new__ picks the class by this flag
            raise ConfigError(f"{where}: transactional={transactional!r} given to {type(self).__name__}")
        loop = loop if loop is not None else Loop()
        require_instance(where, "loop", loop, Loop)
        require_str(where, "name", name, optional=True)
        self.topics = TopologyTopics(topology)
        if emit_to is not None:
            require_output_topic(where, "emit_to", emit_to, refused_outputs(self.topics, sources))
        self.connection = connection
        self.loop = loop
        self.bootstrap_servers = connection.bootstrap_servers
        self.source_topics = sources
        self.group_id = group_id
        self.handler = handler or forward_to(cast(str, emit_to))  # checked above: one of the two is given
        self._forward_topic = emit_to  # the default handler's topic: poll_once forwards a batch at a time
        self.guarantee = tracking.guarantee
        self.ackers = tracking.ackers
        self.commit_interval_ms = loop.commit_interval_ms
        self.batch_size = loop.batch_size
        self.kafka_config = connection.client_config()
        self.clients = connection.clients
        clock = loop.clock
        self._clock = clock
        self.task_id = new_id()
        self.name = name or f"spout-{self.task_id & 0xFFFF:04x}"
        self._sends_acks = self.guarantee == "at_least_once" and self.ackers != 0
        # only at-least-once commits the tracker's commit point ("none" auto-commits, at-most-once
        # commits before emitting): the others keep no per-record bookkeeping (issue 11)
        self._tracks_offsets = self.guarantee == "at_least_once"
        if self._sends_acks:
            check_ack_sender_config(self.kafka_config, component=self.name)
        self.stats = SpoutStats()
        # where _process and emits count (a TransactionalSpout's: its round's, added when the round commits)
        self._counts = self.stats
        # set by the rebalance callbacks: backpressure is applied to the new assignment afresh
        self._assignment_moved = False
        self.metrics_port = loop.metrics_port  # serve /metrics here (0: any free port); see reliable_kafka.ops
        self.metrics_host: str | None = None  # where /metrics listens (None: $RK_METRICS_HOST, else 127.0.0.1)
        self.output_topics: set[str] = set()  # for the status page's graph
        # a first emit to a topic (not yet in output_topics) is checked against these (_new_output)
        self._refused_outputs = refused_outputs(self.topics, sources)
        self.emit_to_missing = False  # set by start(): emit_to did not exist then (_check_emit_to)
        self.max_dead_letter_ratio = tracking.max_dead_letter_ratio
        self.dead_letter_window = tracking.dead_letter_window
        self.root_index = tracking.root_index
        self.ready = threading.Event()
        self._roots = RootOwner(
            component=self.name,
            topics=self.topics,
            connection=connection,
            tracking=tracking,
            stats=self.stats,
            # Speed: without a hook, no SourceRecord per completed root (./rk bench spout_path, Spout: 1.3-1.5x)
            on_completed=self._completed_many
            if overridden(self, SpoutShell, "_completed", "_completed_many")
            else None,
            to_record=source_record_of,
            clock=clock,
        )  # a SourceRecord
        self._collector = SpoutCollector(self)
        self._derive_root: Callable[[SourceRecord], int] | None = None  # None: a random root per attempt
        self._senders: dict[TopicPartitionKey, AckSender] | None = None  # None: INITs go through _acks
        self._last_commit = 0.0
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._acks: AckSender | None = None

    @property
    def tracker(self) -> InFlightTracker:
        """The in-flight tracker, which the root owner builds and owns."""
        return self._roots.tracker

    @property
    def stopped_by(self) -> str | None:
        """Why the spout stopped itself, for its status snapshot: the dead-letter guard's message."""
        tripped = self._roots.guard_tripped
        return None if tripped is None else str(tripped)

    @property
    def tracking(self) -> bool:
        return self.guarantee == "at_least_once" and self._acks is not None and self._acks.ack_partitions > 0

    def run(self, stop: threading.Event | None = None, *, handle_signals: bool = False) -> SpoutStats:
        """Read, emit and commit until ``stop`` is set (or SIGTERM/SIGINT with ``handle_signals``)."""
        # a Pollable: subclasses add start etc.
        stats: SpoutStats = run_until_stopped(cast("Pollable[SpoutStats]", self), stop, handle_signals=handle_signals)
        return stats

    # --- clients (made here only) ---------------------------------------------------------------

    def _new_producer(self, **overrides: Any) -> Producer:
        return new_producer(
            self.bootstrap_servers,
            self.kafka_config,
            clients=self.clients,
            ack_sender=self.name if self._sends_acks else None,
            defaults=UNTRACKED_PRODUCER if self.guarantee == "none" else SENT_PER_POLL,
            **overrides,
        )

    def _new_consumer(self, **overrides: Any) -> Consumer:
        return new_consumer(self.bootstrap_servers, self.group_id, self.kafka_config, clients=self.clients, **overrides)

    def _use_producer(self, producer: Producer) -> None:
        """``producer`` sends tuples, INITs, dead letters and quarantine copies (also a replacement)."""
        self._producer = producer
        self._roots.use_producer(producer)
        if self._acks is not None:
            self._acks.producer = producer

    def _connect(self, producer: Producer, *, spout_id: int | None, index_roots: bool) -> int:
        """The producer, the ack topic's partitions, the outcome listener (before any INIT) and the
        root index; returns the ack partitions (0: nothing tracked)."""
        self._use_producer(producer)
        ack_partitions = 0
        admin = admin_client(self.bootstrap_servers, self.kafka_config, component=self.name, clients=self.clients)
        if self._forward_topic is not None:
            self._check_emit_to(admin, self._forward_topic)
        if self._sends_acks:
            found = partition_count(admin, self.topics.acks, wait=self.topic_wait_s, clock=self._clock)
            if found is None:
                raise TopologyError(
                    f"{self.name}: ack topic {self.topics.acks} does not exist; start an acker worker "
                    f"for topology {self.topics.topology!r} first (or pass ackers=0 to track nothing)"
                )
            check_ack_partitions(self.name, self.topics, found, self.ackers)
            ack_partitions = found
            # an older topology has no root index topic (an acker of this version creates it); a
            # spout that derives its roots (transactional) writes no index: it does not look for one
            self.root_index = (
                self.root_index
                and index_roots
                and partition_count(admin, self.topics.roots, clock=self._clock) is not None
            )
            self._roots.listen(spout_id)
        self._acks = AckSender(
            producer, acks_topic=self.topics.acks, ack_partitions=ack_partitions, sender=self.task_id
        )
        if index_roots and self.root_index and ack_partitions:
            self._roots.index_roots(self.task_id)
        return ack_partitions

    def _check_emit_to(self, admin: AdminClient, topic: str) -> None:
        """Say at start that ``emit_to`` does not exist: a broker that creates topics on first use
        (``auto.create.topics.enable``, Kafka's default) takes a typo without a word, and then no
        bolt reads what the spout sends: every tree times out and is dead-lettered."""
        described = admin.list_topics(timeout=10).topics.get(topic)
        if described is None or described.error is not None:
            self.emit_to_missing = True
            log.warning(
                "%s: emit_to topic %r does not exist; the first send creates it if the broker creates "
                "topics on first use, else the sends fail. If the name is a typo, no bolt reads it and "
                "every record times out into %s (until the dead-letter guard stops the spout): create "
                "the topic before starting the spout",
                self.name,
                topic,
                self.topics.dlq,
            )

    # --- emission -------------------------------------------------------------------------------

    def _process(self, record: SourceRecord) -> None:
        key = (record.topic, record.partition)
        tracks_offsets = self._tracks_offsets
        if tracks_offsets and record.attempt == 1 and self.tracker.should_skip(key, record.offset):
            self._counts.skipped_done += 1
            return
        root = None
        if self.tracking:
            root = new_id() if self._derive_root is None else self._derive_root(record)
        self._collector._begin(root)
        parent = self._collector._parent
        emitted_before = self._counts.emitted
        try:
            self.handler(record, self._collector)
        except (ProducerUnusable, AuthorizationError):
            raise  # not the record's fault: the caller replaces the producer (or the process restarts or stops)
        except Exception as exc:
            self._counts.handler_errors += 1
            log.exception(
                "%s: handler %s raised on %s (attempt %d); the record will be retried",
                self.name,
                getattr(self.handler, "__name__", self.handler),
                record.coordinates,
                record.attempt,
            )
            if root is None:
                if tracks_offsets:
                    self.tracker.done_immediately(key, record.offset)
                return
            self._roots.track(key, record.offset, root, record.attempt, record)
            self._roots.fail_locally(
                root,
                FailureRecord.of(
                    roots=[root],
                    component=self.name,
                    task_id=self.task_id,
                    error=exc,
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                    clock=self._clock,
                ),
            )
            return
        finally:
            self._collector._begin(None)
        if root is None or self._counts.emitted == emitted_before:
            if tracks_offsets:
                self.tracker.done_immediately(key, record.offset)
            return
        self._roots.track(key, record.offset, root, record.attempt, record)
        sender = self._acks if self._senders is None else self._senders[key]
        assert sender is not None and parent is not None  # tracking: start() made the senders; _begin(root) the parent
        sender.add(EventKind.INIT, root, parent.ack_val)  # = ack_entries(parent)

    def _new_output(self, topic: str) -> None:
        """A handler's first emit to ``topic``: refused if it is a source or a topology topic."""
        why = self._refused_outputs.get(topic)
        if why is not None:
            raise OutputRefused(component=self.name, topic=topic, why=why)

    def _produce_output(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        anchors: dict[int, int],
    ) -> None:
        assert self._producer is not None  # made by start()
        if topic not in self.output_topics:
            self._new_output(topic)
        if headers or anchors:
            produce_tuple(self._producer, topic, value, key=key, headers=headers, partition=partition, anchors=anchors)
        else:  # untracked, no headers (tracking off): nothing to build
            produce_headers(self._producer, topic, value, key, partition, None)
        if anchors:
            self._counts.emitted += 1
        self.output_topics.add(topic)

    def _produce_in_tree(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        root: int,
        edge: int,
    ) -> None:
        """:meth:`_produce_output` of a tuple of one tree (``{root: edge}``): once per emit."""
        if topic not in self.output_topics:
            self._new_output(topic)
        if headers:
            self._produce_output(topic, value, key, headers, partition, {root: edge})
            return
        assert self._producer is not None  # made by start()
        produce_headers(self._producer, topic, value, key, partition, [(_ANCHORS, encode_one_anchor(root, edge))])
        self._counts.emitted += 1
        self.output_topics.add(topic)

    def _output_failed(self, error: KafkaError | None, message: Message) -> None:
        """The producer's delivery report, for failed messages only (:data:`ERRORS_ONLY`).

        A tuple that was not delivered keeps its edge in its tree's XOR: the acker times the tree
        out and it is replayed (a report cannot name the tree: reports carry no headers).
        """
        if error is not None:
            self.stats.output_delivery_errors += 1
            log.error(
                "%s: tuple to %s[%s] not delivered (its tree will time out and replay): %s",
                self.name,
                message.topic(),
                message.partition(),
                error,
            )

    def _completed(self, record: SourceRecord) -> None:
        """Hook: ``record``'s tree completed (called by :meth:`_completed_many`)."""

    def _completed_many(self, records: list[SourceRecord]) -> None:
        """Hook: these records' trees completed, one call per outcome batch (bench/bench_pipeline.py
        times completions here); by default :meth:`_completed` for each."""
        completed = self._completed
        for record in records:
            completed(record)

    def _apply_backpressure(self) -> None:
        """Pause the assignment while too many trees are pending, resume it once they are not.

        After a rebalance the new assignment gets the current state afresh: librdkafka keeps a
        partition's pause across its revoke and re-assignment, so a resume issued while nothing was
        assigned (the roots of lost partitions went, and with them the pending count) left the
        partitions paused for good when they came back.
        """
        over = self.tracker.over_max_pending()
        if over == self.stats.paused and not self._assignment_moved:
            return  # nothing to change; assignment() is a round trip to librdkafka's thread (ms)
        consumer = self._consumer
        assert consumer is not None  # made by start()
        self._assignment_moved = False
        assignment = consumer.assignment()
        if over:
            if assignment:
                consumer.pause(assignment)
            self.stats.paused = bool(assignment)  # nothing assigned: try again next round
        else:
            if assignment:
                consumer.resume(assignment)
            self.stats.paused = False
