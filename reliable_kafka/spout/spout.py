"""The spout: source topics in, tracked tuple trees out (DESIGN section 5).

Each source record becomes the root of a tree: the user's handler emits tuples anchored to it (by
default the record itself, forwarded to ``emit_to``), the spout sends one INIT for the root, and
the record stays in flight until an acker reports its outcome. The consumer group's committed
offset is the tracker's commit point: every record below it completed or was dead-lettered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Literal, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reliable_kafka.codec import ANCHORS_HEADER as _ANCHORS
from reliable_kafka.codec import encode_one_anchor
from reliable_kafka.core.clock import Clock, monotonic_ms
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.core.tracker import Backoff, InFlightTracker
from reliable_kafka.errors import AuthorizationError, ConfigError, TopologyError
from reliable_kafka.ids import new_id
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.clients import (
    ERRORS_ONLY,
    SENT_PER_POLL,
    check_ack_sender_config,
    coordinates,
    new_consumer,
    new_producer,
)
from reliable_kafka.kafka.config import client_config
from reliable_kafka.kafka.factory import KafkaClients
from reliable_kafka.kafka.produce import ProducerUnusable, produce_headers, produce_tuple, release_producer, send_polled
from reliable_kafka.lifecycle import Pollable, run_until_stopped
from reliable_kafka.ops.failures import FailureRecord
from reliable_kafka.polling import consume_batch
from reliable_kafka.spout.records import (
    SourceRecord,
    SpoutCollector,
    SpoutStats,
    _source_record,
    forward_to,
    with_attempt,
)
from reliable_kafka.spout.roots import POISON_PILL, RootOwner, check_guard_config
from reliable_kafka.topology import TopologyTopics, admin_client, partition_count

__all__ = [
    "Spout",
    "SpoutShell",
    "SpoutCollector",
    "SourceRecord",
    "SpoutStats",
    "Guarantee",
    "forward_to",
    "POISON_PILL",
]

log = logging.getLogger(__name__)

Guarantee = Literal["at_least_once", "at_most_once", "none"]
TopicPartitionKey = tuple[str, int]

_INIT = EventKind.INIT  # an enum member read through its class costs ~0.17 us: once per root
OUTCOME_WAIT_S = 0.002  # longest wait for source records while trees are in flight: outcomes come first
DEAD_LETTER_FLUSH_S = 1.0  # how long a round waits to learn that its dead letters were written


class SpoutShell:
    """What both Python spouts are made of: configuration, the handler and its collector, and the
    root-owning core (:class:`~reliable_kafka.spout.roots.RootOwner`). :class:`Spout` and
    :class:`~reliable_kafka.spout.transactional.TransactionalSpout` differ only in how they read
    and commit: each writes its own start, rebalance callbacks and round. Keywords: see :class:`Spout`.
    """

    topic_wait_s = 30.0  # how long start() waits for an acker to create the topology's topics

    def __init__(
        self,
        *,
        topology: str,
        bootstrap_servers: str,
        source_topics: list[str] | str,
        group_id: str,
        emit_to: str | None = None,
        handler: Callable[[SourceRecord, SpoutCollector], None] | None = None,
        guarantee: Guarantee = "at_least_once",
        ackers: int | None = None,
        max_pending: int = 10_000,
        max_retries: int = 5,
        backoff: Backoff | None = None,
        message_timeout_ms: int = 30_000,
        backstop_grace_ms: int = 10_000,
        commit_interval_ms: int = 1000,
        batch_size: int = 500,
        kafka_config: dict | None = None,
        consumer_config: dict | None = None,
        producer_config: dict | None = None,
        name: str | None = None,
        metrics_port: int | None = None,
        max_dead_letter_ratio: float | None = None,
        dead_letter_window: int = 1000,
        root_index: bool = True,
        clients: KafkaClients | None = None,
        clock: Clock = time,
    ) -> None:
        check_guard_config("Spout", max_dead_letter_ratio, dead_letter_window)
        if (emit_to is None) == (handler is None):
            raise ConfigError("Spout: give exactly one of emit_to (forward records) or handler")
        if guarantee not in ("at_least_once", "at_most_once", "none"):
            raise ConfigError(f"Spout: guarantee must be at_least_once, at_most_once or none, not {guarantee!r}")
        self.topics = TopologyTopics(topology)
        self.bootstrap_servers = bootstrap_servers
        self.source_topics = [source_topics] if isinstance(source_topics, str) else list(source_topics)
        self.group_id = group_id
        self.handler = handler or forward_to(cast(str, emit_to))  # checked above: one of the two is given
        self._forward_topic = emit_to  # the default handler's topic: poll_once forwards a batch at a time
        self.guarantee = guarantee
        self.ackers = ackers
        self.commit_interval_ms = commit_interval_ms
        self.batch_size = batch_size
        self.kafka_config = client_config(
            kafka_config, consumer_config=consumer_config, producer_config=producer_config
        )
        self.clients = clients
        self._clock = clock
        self.task_id = new_id()
        self.name = name or f"spout-{self.task_id & 0xFFFF:04x}"
        self._sends_acks = guarantee == "at_least_once" and ackers != 0
        # only at-least-once commits the tracker's commit point ("none" auto-commits, at-most-once
        # commits before emitting): the others keep no per-record bookkeeping (issue 11)
        self._tracks_offsets = guarantee == "at_least_once"
        if self._sends_acks:
            check_ack_sender_config(self.kafka_config, component=self.name)
        self.tracker = InFlightTracker(
            max_pending=max_pending,
            max_retries=max_retries,
            backoff=backoff,
            message_timeout_ms=message_timeout_ms,
            backstop_grace_ms=backstop_grace_ms,
            clock=monotonic_ms(clock),
        )
        self.stats = SpoutStats()
        # set by the rebalance callbacks: backpressure is applied to the new assignment afresh
        self._assignment_moved = False
        self.metrics_port = metrics_port  # serve /metrics here (0: any free port); see reliable_kafka.ops
        self.output_topics: set[str] = set()  # for the status page's graph
        self.max_dead_letter_ratio = max_dead_letter_ratio
        self.dead_letter_window = dead_letter_window
        self.root_index = root_index
        self.ready = threading.Event()
        self._roots = RootOwner(
            component=self.name,
            topics=self.topics,
            tracker=self.tracker,
            stats=self.stats,
            bootstrap_servers=bootstrap_servers,
            kafka_config=self.kafka_config,
            clients=clients,
            max_dead_letter_ratio=max_dead_letter_ratio,
            dead_letter_window=dead_letter_window,
            # the hook only when a subclass has one: a call per completed root otherwise for nothing
            on_completed=None
            if type(self)._completed is SpoutShell._completed
            else cast("Callable[[object], None]", lambda record: self._completed(record)),
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
    def tracking(self) -> bool:
        return self.guarantee == "at_least_once" and self._acks is not None and self._acks.ack_partitions > 0

    def run(self, stop: threading.Event | None = None, *, handle_signals: bool = False) -> SpoutStats:
        """Read, emit and commit until ``stop`` is set (or SIGTERM/SIGINT with ``handle_signals``)."""
        return run_until_stopped(cast(Pollable, self), stop, handle_signals=handle_signals)  # subclasses add start etc.

    # --- clients (made here only) ---------------------------------------------------------------

    def _new_producer(self, **overrides):
        return new_producer(
            self.bootstrap_servers,
            self.kafka_config,
            clients=self.clients,
            ack_sender=self.name if self._sends_acks else None,
            defaults=SENT_PER_POLL,
            **overrides,
        )

    def _new_consumer(self, **overrides):
        return new_consumer(self.bootstrap_servers, self.group_id, self.kafka_config, clients=self.clients, **overrides)

    def _use_producer(self, producer) -> None:
        """``producer`` sends tuples, INITs, dead letters and quarantine copies (also a replacement)."""
        self._producer = producer
        self._roots.use_producer(producer)
        if self._acks is not None:
            self._acks.producer = producer

    def _connect(self, producer, *, spout_id: int | None, index_roots: bool) -> int:
        """The producer, the ack topic's partitions, the outcome listener (before any INIT) and the
        root index; returns the ack partitions (0: nothing tracked)."""
        self._use_producer(producer)
        ack_partitions = 0
        if self._sends_acks:
            admin = admin_client(self.bootstrap_servers, self.kafka_config, component=self.name, clients=self.clients)
            found = partition_count(admin, self.topics.acks, wait=self.topic_wait_s, clock=self._clock)
            if found is None:
                raise TopologyError(
                    f"{self.name}: ack topic {self.topics.acks} does not exist; start an acker worker "
                    f"for topology {self.topics.topology!r} first (or pass ackers=0 to track nothing)"
                )
            if self.ackers is not None and found != self.ackers:
                raise TopologyError(f"{self.name}: {self.topics.acks} has {found} partitions, ackers={self.ackers}")
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

    # --- emission -------------------------------------------------------------------------------

    def _process(self, record: SourceRecord) -> None:
        key = (record.topic, record.partition)
        tracks_offsets = self._tracks_offsets
        if tracks_offsets and record.attempt == 1 and self.tracker.should_skip(key, record.offset):
            self.stats.skipped_done += 1
            return
        root = None
        if self.tracking:
            root = new_id() if self._derive_root is None else self._derive_root(record)
        self._collector._begin(root)
        parent = self._collector._parent
        emitted_before = self.stats.emitted
        try:
            self.handler(record, self._collector)
        except (ProducerUnusable, AuthorizationError):
            raise  # not the record's fault: the caller replaces the producer (or the process restarts or stops)
        except Exception as exc:
            self.stats.handler_errors += 1
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
        if root is None or self.stats.emitted == emitted_before:
            if tracks_offsets:
                self.tracker.done_immediately(key, record.offset)
            return
        self._roots.track(key, record.offset, root, record.attempt, record)
        sender = self._acks if self._senders is None else self._senders[key]
        assert sender is not None and parent is not None  # tracking: start() made the senders; _begin(root) the parent
        sender.add(_INIT, root, parent.ack_val)  # = ack_entries(parent)

    def _produce_output(self, topic, value, key, headers, partition, anchors) -> None:
        assert self._producer is not None  # made by start()
        if headers or anchors:
            produce_tuple(self._producer, topic, value, key=key, headers=headers, partition=partition, anchors=anchors)
        else:  # untracked, no headers (tracking off): nothing to build
            produce_headers(self._producer, topic, value, key, partition, None)
        if anchors:
            self.stats.emitted += 1
        self.output_topics.add(topic)

    def _produce_in_tree(self, topic, value, key, headers, partition, root: int, edge: int) -> None:
        """:meth:`_produce_output` of a tuple of one tree (``{root: edge}``): once per emit."""
        if headers:
            self._produce_output(topic, value, key, headers, partition, {root: edge})
            return
        assert self._producer is not None  # made by start()
        produce_headers(self._producer, topic, value, key, partition, [(_ANCHORS, encode_one_anchor(root, edge))])
        self.stats.emitted += 1
        self.output_topics.add(topic)

    def _output_failed(self, error, message) -> None:
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
        """Hook: ``record``'s tree completed (bench/bench_pipeline.py times completions here)."""

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


class Spout(SpoutShell):
    """Reads source topics in a consumer group and owns the roots of their records' trees.

    Keyword arguments (defaults in brackets):
    - ``topology``, ``bootstrap_servers``, ``source_topics``, ``group_id``: required.
    - ``emit_to`` / ``handler``: where tuples go. ``emit_to="t"`` forwards each record to topic t;
      ``handler(record, collector)`` emits any number of tuples (none: the record is done at once).
    - ``guarantee`` ["at_least_once"]: "at_most_once" commits before emitting and tracks nothing;
      "none" tracks nothing and commits as it reads.
    - ``ackers`` [None]: None reads N from the ack topic; 0 turns tracking off (every emit counts as
      completed at once, as Storm with zero ackers).
    - ``max_pending`` [10000], ``max_retries`` [5], ``backoff`` [Backoff()],
      ``message_timeout_ms`` [30000], ``backstop_grace_ms`` [10000]: as Storm's
      ``topology.max.spout.pending`` and ``topology.message.timeout.secs``; the backstop fails a
      root locally when no outcome arrives within timeout + grace (no acker running).
    - ``commit_interval_ms`` [1000], ``batch_size`` [500], ``kafka_config`` (librdkafka, copied),
      ``consumer_config`` / ``producer_config`` (merged over it for consumers / producers only).
    - ``metrics_port`` [None: no /metrics; 0: a free port] (docs/operations.md).
    - ``max_dead_letter_ratio`` [None: off], ``dead_letter_window`` [1000]: stop the spout with
      :class:`DeadLetterGuardTripped` when more than this share of the last ``dead_letter_window``
      settled records (completed or dead-lettered) went to the DLQ (docs/operations.md).
    - ``root_index`` [True]: write (offset, root) pairs to ``<topology>.roots`` with each INIT
      batch, 16 bytes a root, so that ``reliable-kafka trace`` finds a record's trees.
    - ``clients`` [None: confluent-kafka]: makes the Kafka clients (:mod:`reliable_kafka.kafka.factory`;
      :class:`reliable_kafka.testing.MemoryKafka` runs the spout without a broker).
    - ``clock`` [the ``time`` module]: what the spout reads time from (:mod:`reliable_kafka.core.clock`;
      :class:`reliable_kafka.testing.ManualClock` moves only when told to).
    """

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        ack_partitions = self._connect(
            self._new_producer(**ERRORS_ONLY, on_delivery=self._output_failed), spout_id=self.task_id, index_roots=True
        )
        overrides: dict[str, object] = {"on_commit": self._on_commit}
        if self.guarantee == "none":
            overrides = {"enable.auto.commit": True, "enable.auto.offset.store": True}
        self._consumer = self._new_consumer(**overrides)
        self._consumer.subscribe(
            self.source_topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        log.info(
            "%s: reading %s as group %s (%s, %d ack partitions)",
            self.name,
            self.source_topics,
            self.group_id,
            self.guarantee,
            ack_partitions,
        )

    def close(self) -> None:
        try:
            if self._consumer is not None:
                self._roots.confirm_dead_letters(DEAD_LETTER_FLUSH_S)
                self._commit(force=True)
                self._consumer.close()
        finally:
            self._consumer = None
            producer, self._producer = self._producer, None  # closed: a second close() has nothing to do
            release_producer(producer, owner=self.name)
            self._roots.close()
            log.info("%s: stopped; %s", self.name, self.stats)

    # --- rebalance ------------------------------------------------------------------------------

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        for tp in consumer.committed(partitions, timeout=30):
            self._roots.restore((tp.topic, tp.partition), tp.offset if tp.offset >= 0 else None, tp.metadata)
        self._assignment_moved = True
        log.info("%s: assigned %s", self.name, [(tp.topic, tp.partition) for tp in partitions])
        self.ready.set()

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        self._commit(force=True, only={(tp.topic, tp.partition) for tp in partitions})
        for tp in partitions:
            self._roots.forget((tp.topic, tp.partition))
        self._assignment_moved = True

    def _on_lost(self, consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._roots.forget((tp.topic, tp.partition))
        self._assignment_moved = True

    # --- the loop -------------------------------------------------------------------------------

    def poll_once(self, timeout: float = 0.1) -> None:
        """One round: outcomes, timeouts, dead letters, redeliveries, new records, INITs, commit."""
        roots = self._roots
        roots.raise_if_guard_tripped()
        roots.take_outcomes()
        roots.write_dead_letters()
        roots.confirm_dead_letters(DEAD_LETTER_FLUSH_S)
        self._redeliver_due()
        self._apply_backpressure()
        if self.tracker.pending_roots():
            timeout = min(timeout, OUTCOME_WAIT_S)  # outcomes are read on the next round
        assert self._consumer is not None  # made by start()
        messages = consume_batch(self._consumer, self.batch_size, timeout)
        if self.guarantee == "at_most_once":
            self._commit_before_emit(messages)
        self._process_messages(messages)
        assert self._acks is not None  # made by start()
        self._acks.send()
        if roots.root_index is not None:
            roots.root_index.send()
        assert self._producer is not None
        send_polled(self._producer)  # the round's tuples, INITs and root index: one request per partition
        self._producer.poll(0)
        self._commit()

    def _process_messages(self, messages: list[Message]) -> None:
        """Each consumed message through the handler, in order.

        The default handler (``emit_to``) takes a batch at a time: :meth:`_forward_tracked` and
        :meth:`_forward_untracked`. A subclass that overrides :meth:`_process` gets it called per record.
        """
        topic = self._forward_topic
        if topic is not None and type(self)._process is SpoutShell._process:
            if self.tracking and self._derive_root is None and self._senders is None:
                self._forward_tracked(messages, topic)
                return
            if not self._tracks_offsets:
                self._forward_untracked(messages, topic)
                return
        for message in messages:
            if message.error() is not None:
                self._consumer_error(message)
                continue
            self.stats.read += 1
            self._process(_source_record(message))

    def _consumer_error(self, message: Message) -> None:
        check_consumed(message, self._consumer, component=self.name)  # refused: stop
        if cast(KafkaError, message.error()).code() != KafkaError._PARTITION_EOF:
            log.warning("%s: consumer error: %s", self.name, message.error())

    def _forward_tracked(self, messages: list[Message], topic: str) -> None:
        """:meth:`_process` with the default handler for a batch: each record goes to ``topic`` as
        the one tuple of a new root; the roots are tracked, and their INITs packed, once per batch.

        A record whose produce raises goes through :meth:`_process` (the handler's error path).
        Whatever was produced is tracked even if a later record raises out of the loop: an untracked
        output would let the commit point pass its record.
        """
        producer, stats, tracker = self._producer, self.stats, self.tracker
        assert producer is not None and self._acks is not None  # made by start()
        should_skip, records = tracker.should_skip, self._roots.records
        tracked: dict[TopicPartitionKey, tuple[list[int], list[int]]] = {}
        roots: list[int] = []
        edges: list[int] = []
        try:
            for message in messages:
                if message.error() is not None:
                    self._consumer_error(message)
                    continue
                stats.read += 1
                record = _source_record(message)
                key, offset = (record.topic, record.partition), record.offset
                if should_skip(key, offset):
                    stats.skipped_done += 1
                    continue
                root, edge = new_id(), new_id()
                try:
                    if record.headers:  # the user's headers, forwarded without any rk-anchors of theirs
                        produce_tuple(
                            producer,
                            topic,
                            record.value,
                            key=record.key,
                            headers=record.headers,
                            partition=None,
                            anchors={root: edge},
                        )
                    else:
                        produce_headers(
                            producer, topic, record.value, record.key, None, [(_ANCHORS, encode_one_anchor(root, edge))]
                        )
                except (ProducerUnusable, AuthorizationError):
                    raise
                except Exception:  # nothing was produced: the handler's error path decides (logs, fails it)
                    self._process(record)
                    continue
                stats.emitted += 1
                pair = tracked.get(key)
                if pair is None:
                    pair = tracked[key] = ([], [])
                pair[0].append(offset)
                pair[1].append(root)
                records[(key, offset)] = record
                roots.append(root)
                edges.append(edge)  # the root's INIT val: the XOR of its one tuple's edge
        finally:
            for key, (offsets, key_roots) in tracked.items():
                self._roots.track_many(key, offsets, key_roots, attempt=1)
            self._acks.extend(_INIT, roots, edges)
            if roots:
                self.output_topics.add(topic)

    def _forward_untracked(self, messages: list[Message], topic: str) -> None:
        """:meth:`_process` with the default handler for a batch, tracking nothing (``guarantee``
        "none" or "at_most_once"): each record to ``topic``, without any rk-anchors it carried."""
        producer, stats = self._producer, self.stats
        assert producer is not None  # made by start()
        emitted = False
        for message in messages:
            if message.error() is not None:
                self._consumer_error(message)
                continue
            stats.read += 1
            headers = message.headers()
            try:
                if headers:
                    produce_tuple(
                        producer, topic, message.value(), key=message.key(), headers=headers, partition=None, anchors={}
                    )
                else:
                    try:  # once per record: produce_headers inlined, its queue-full and error paths left to it
                        producer.produce(topic, message.value(), message.key())
                    except (BufferError, KafkaException):
                        produce_headers(producer, topic, message.value(), message.key(), None, None)
            except (ProducerUnusable, AuthorizationError):
                raise
            except Exception:  # the handler's error path decides (logs it)
                self._process(_source_record(message))
                continue
            emitted = True
        if emitted:
            self.output_topics.add(topic)

    def _redeliver_due(self) -> None:
        for redelivery in self.tracker.due_redeliveries():
            record = self._roots.records.get((redelivery.tp, redelivery.offset))
            if record is None:  # its partition was revoked meanwhile: the next owner replays it
                continue
            self.stats.replayed += 1
            self._process(with_attempt(cast(SourceRecord, record), redelivery.attempt))

    # --- commits --------------------------------------------------------------------------------

    def _commit_before_emit(self, messages: list[Message]) -> None:
        ends: dict[TopicPartitionKey, int] = {}
        for message in messages:
            if message.error() is None:
                topic, partition, offset = coordinates(message)
                ends[(topic, partition)] = offset + 1
        if ends:
            assert self._consumer is not None  # made by start()
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False)

    def _commit(self, *, force: bool = False, only: set[TopicPartitionKey] | None = None) -> None:
        if self.guarantee != "at_least_once":
            return
        now = self._clock.monotonic()
        if not force and (now - self._last_commit) * 1000 < self.commit_interval_ms:
            return
        self._last_commit = now
        # forced: the points as they are, even if sent before (an asynchronous commit may have failed unseen)
        offsets = self._roots.offsets_to_commit(only=only, changed_only=not force)
        if not offsets:
            return
        try:
            assert self._consumer is not None  # made by start()
            # a forced commit (revoke, close) must have landed before the partitions go; a periodic
            # one need not block the loop: a failure reaches _on_commit, and the next round sends it again
            self._consumer.commit(offsets=offsets, asynchronous=not force)  # type: ignore[call-overload]
        except KafkaException as exc:
            log.warning("%s: commit postponed: %s", self.name, exc)
            return
        self._roots.committed(offsets)

    def _on_commit(self, error, partitions: list[TopicPartition]) -> None:
        """An asynchronous commit's result (served by consume): a failed one is committed again."""
        for tp in partitions or []:
            if error is not None or tp.error is not None:
                self._roots.commit_failed((tp.topic, tp.partition), tp.offset)
                log.warning(
                    "%s: commit of %s[%s]@%s failed: %s",
                    self.name,
                    tp.topic,
                    tp.partition,
                    tp.offset,
                    error or tp.error,
                )
