"""Bolts: consume a data topic, hand each tuple to the user's handler with a collector.

``Bolt`` is Storm's rich bolt (the handler emits with explicit anchors and acks or fails each
tuple, possibly later); ``BasicBolt`` anchors every output to the input, acks when the handler
returns and fails the input when it raises. Safety never depends on when a bolt commits its own
input offsets (a lost ack only delays the tree until its timeout and replay); with
``transactional=True`` outputs, ack entries and input offsets commit in one Kafka transaction.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reliable_kafka import validation as v
from reliable_kafka.bolt.ack_packing import pack_acks
from reliable_kafka.bolt.collector import BasicCollector, BoltCollector, BoltStats, Tuple, TupleBatch
from reliable_kafka.bolt.options import Parallel
from reliable_kafka.bolt.parallel import parallel_calls
from reliable_kafka.bolt.serial import FATAL, PROCESS_TIMED_RUN, handle_batch, handle_serially
from reliable_kafka.config import Connection, Loop
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.errors import AuthorizationError, ConfigError, TopologyError
from reliable_kafka.kafka.ack_sender import MAX_ENTRIES_PER_RECORD, AckSender
from reliable_kafka.kafka.admin import admin_client, partition_count
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.clients import ERRORS_ONLY, SENT_PER_POLL, check_ack_sender_config, new_consumer, new_producer
from reliable_kafka.kafka.commit_wait import commit_wait
from reliable_kafka.kafka.fatal import raise_if_fatal, static_member
from reliable_kafka.kafka.parking import Quarantine
from reliable_kafka.kafka.produce import (
    Header,
    flush_or_raise,
    produce_tuple,
    release_producer,
    send_polled,
)
from reliable_kafka.kafka.transactions import StuckCall, Transactions
from reliable_kafka.lifecycle import run_until_stopped
from reliable_kafka.ops.errors import handler_raised
from reliable_kafka.ops.failures import FailureLog, FailureRecord
from reliable_kafka.polling import consume_batch
from reliable_kafka.topology import TopologyTopics

__all__ = ["Tuple", "TupleBatch", "BoltCollector", "Bolt", "BasicBolt", "BoltStats", "PROCESS_TIMED_RUN"]

log = logging.getLogger(__name__)

ACK_HOLD_ENTRIES = MAX_ENTRIES_PER_RECORD  # while behind, acks wait for this many entries...
ACK_HOLD_S = 0.02  # ...or this long (a tree is as late as its last ack)
# (PROCESS_TIMED_RUN and FATAL live with the serial loop, in reliable_kafka.bolt.serial)


class Bolt:
    """Runs ``handler(tuple, collector)`` for each record of ``source_topics``.

    Keyword arguments (defaults in brackets):
    - ``topology``, ``connection``, ``source_topics``, ``group_id``: required. ``connection`` is a
      bootstrap servers string or a :class:`~reliable_kafka.config.Connection`.
    - ``handler(tuple, collector)``, or for a ``BasicBolt`` ``batch_handler(batch, collector)``:
      exactly one. A batch handler is called once per consumed batch with a :class:`TupleBatch`
      (``batch.keys()``, ``batch.values()``, ``batch[i]``): no Python object or call per tuple
      unless it asks for one (a count: about 70% of the per-tuple CPU). Its batch is acked
      when it returns and failed, every tuple, when it raises; its emits name their inputs,
      ``emit(..., anchors=batch[i])``.
    - ``transactional`` [False]: outputs, ack entries and input offsets in one transaction per
      consumed batch (``transactional.id`` = ``<group_id>.<name>``: give each bolt process a stable
      ``name`` so that its restart fences the dead incarnation at once; a named transactional bolt
      is also a static group member, ``group.instance.id`` = ``<group_id>.<name>``, so a restart
      gets its partitions back without a rebalance).
    - ``parallel`` [1]: handler calls in flight at once, an int or a
      :class:`~reliable_kafka.bolt.options.Parallel` (ordering, key, bound, executor).
    - ``loop`` [``Loop()``]: batch size, commit interval, ``/metrics`` port and clock
      (:class:`~reliable_kafka.config.Loop`).
    - ``name`` [random]: the bolt's name in logs, status and metrics (a transactional bolt's
      ``transactional.id``).

    Ack entries go out as one ack record per consumed batch; while full batches keep coming (the
    bolt is behind) a few batches share one, up to :data:`ACK_HOLD_ENTRIES` entries or
    :data:`ACK_HOLD_S`. Commits, revokes and close send what is held first. Input offsets are
    committed once their batches' outputs and acks are delivered: every ``commit_interval_ms``, on
    the first round with nothing in flight (no flush needed), else after one more interval with a
    flush; revoke and close flush and commit at once.
    """

    component = "bolt"  # its kind in status reports and metrics (reliable_kafka.ops.snapshot)

    _collector_class = BoltCollector
    FATAL = FATAL  # raised by a handler, not the tuple's fault (reliable_kafka.bolt.serial)
    _acks_on_return = False  # BasicBolt: a tuple is acked when its handler returns
    topic_wait_s = 30.0  # how long start() waits for an acker to create the topology's topics

    def __init__(
        self,
        *,
        topology: str,
        connection: str | Connection,
        source_topics: list[str] | str,
        group_id: str,
        handler: Callable[[Tuple, BoltCollector], None] | None = None,
        batch_handler: Callable[[TupleBatch, BoltCollector], None] | None = None,
        transactional: bool = False,
        parallel: int | Parallel = 1,
        loop: Loop | None = None,
        name: str | None = None,
    ) -> None:
        where = type(self).__name__  # the arguments' checks (reliable_kafka.validation)
        v.require_topology(where, "topology", topology)
        connection = Connection.of(where, connection)
        v.require_topics(where, "source_topics", source_topics)
        v.require_str(where, "group_id", group_id)
        v.require_callable(where, "handler", handler, optional=True)
        v.require_callable(where, "batch_handler", batch_handler, optional=True)
        v.require_bool(where, "transactional", transactional)
        parallel = Parallel.of(where, parallel)
        loop = loop if loop is not None else Loop()
        v.require_instance(where, "loop", loop, Loop)
        v.require_str(where, "name", name, optional=True)
        if (handler is None) == (batch_handler is None):
            raise ConfigError("Bolt: give exactly one of handler (called per tuple) and batch_handler (per batch)")
        if batch_handler is not None and not self._acks_on_return:
            raise ConfigError("Bolt: batch_handler is a BasicBolt's (its batch is acked when the handler returns)")
        given = handler if batch_handler is None else batch_handler
        if not callable(given):
            raise ConfigError(f"Bolt: handler must be callable, got {given!r}")
        self.topics = TopologyTopics(topology)
        self.connection = connection
        self.loop = loop
        self.bootstrap_servers = connection.bootstrap_servers
        self.source_topics = [source_topics] if isinstance(source_topics, str) else list(source_topics)
        self.group_id = group_id
        self.handler = handler
        self.batch_handler = batch_handler
        self.transactional = transactional
        self.batch_size = loop.batch_size
        self.commit_interval_ms = loop.commit_interval_ms
        self.kafka_config = connection.client_config()
        self.task_id = new_id()
        self._stable_name = name is not None
        self.name = name or f"bolt-{self.task_id & 0xFFFF:04x}"
        check_ack_sender_config(self.kafka_config, component=self.name)
        self.stats = BoltStats()
        self.metrics_port = loop.metrics_port  # serve /metrics here (0: any free port); see reliable_kafka.ops
        self.metrics_host: str | None = None  # where /metrics listens (None: $RK_METRICS_HOST, else 127.0.0.1)
        # handler calls, each at its run's average (PROCESS_TIMED_RUN); its count is the tuples handled
        self.process_latency = LatencyHistogram()
        self.output_topics: set[str] = set()  # for the status page's graph
        self.collector = self._collector_class(self)
        self._consumer: Consumer | None = None  # the clients and their helpers are made by start()
        self._producer: Producer | None = None
        self._acks: AckSender | None = None
        self._quarantine: Quarantine | None = None
        self._failures: FailureLog | None = None
        self._failures_topic: str | None = None
        self._last_commit = 0.0
        self._uncommitted = False
        self._commit_waits_since: float | None = None  # a due commit waiting for the producer to drain
        self._failed_in_a_row = 0
        self._ends: dict[tuple[str, int], int] = {}  # of the batch in hand: partition -> next offset
        self._acks_sent_at = 0.0  # acks held while behind wait at most ACK_HOLD_S from here
        # ACK entries of the batch in hand (BasicBolt), packed after it: each acked tree as its
        # one-pair v2 value (root, edge) and the tuple's ack val, read as NumPy columns after the
        # batch (no Python int made or converted per entry)
        self._ack_pairs: list[bytes] = []
        self._ack_owed: list[int] = []
        self._transactions: Transactions | None = None
        self.ready = threading.Event()
        self.clients = connection.clients
        self._clock = loop.clock
        self._run_started: float | None = None  # a serial bolt's current run of calls began (monotonic)
        self.parallel = parallel
        self.parallelism = parallel.parallelism
        self.revoke_wait_s = parallel.revoke_wait_s
        self._parallel = parallel_calls(self, parallel)

    # --- status (safe from any thread) ----------------------------------------------------------

    def calls_in_flight(self) -> int:
        """Handler calls running now (a serial bolt: 1 while its loop is in a run of calls)."""
        if self._parallel is not None:
            return self._parallel.calls_in_flight()
        return 0 if self._run_started is None else 1

    def oldest_call_age(self, now_monotonic: float) -> float | None:
        """Seconds since the oldest handler call still running started (None: none runs). A serial
        bolt answers for its current run of calls (its start is read once per run, not per tuple)."""
        if self._parallel is not None:
            return self._parallel.oldest_call_age(now_monotonic)
        started = self._run_started
        return None if started is None else max(0.0, now_monotonic - started)

    # --- lifecycle ------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, handle_signals: bool = False) -> BoltStats:
        stats: BoltStats = run_until_stopped(self, stop, handle_signals=handle_signals)
        return stats

    def start(self) -> None:
        admin = admin_client(self.bootstrap_servers, self.kafka_config, component=self.name, clients=self.clients)
        ack_partitions = partition_count(admin, self.topics.acks, wait=self.topic_wait_s, clock=self._clock)
        if ack_partitions is None:
            raise TopologyError(
                f"{self.name}: ack topic {self.topics.acks} does not exist; start an acker worker for "
                f"topology {self.topics.topology!r} first"
            )
        overrides: dict[str, Any] = {}
        if self.transactional:
            overrides = {"transactional.id": f"{self.group_id}.{self.name}", "transaction.timeout.ms": 60_000}
        self._ack_partitions = ack_partitions
        # a topology created by an older version has no failures topic: records to it would sit in
        # the producer's queue and hold up every flush, so reasons are then not recorded
        found = partition_count(admin, self.topics.failures, clock=self._clock)
        self._failures_topic = self.topics.failures if found else None
        if self._failures_topic is None:
            log.warning(
                "%s: %s does not exist; failure reasons are not recorded (an acker worker of this version creates it)",
                self.name,
                self.topics.failures,
            )
        self._producer_overrides = overrides
        self._producer_overrides.update(ERRORS_ONLY, on_delivery=self._delivered)
        if self.transactional:
            self._transactions = Transactions(
                self._new_producer, component=self.name, on_new_producer=self._use_producer
            )
            self._transactions.start()
        else:
            self._use_producer(self._new_producer())
        consumer_overrides = {"isolation.level": "read_committed"}
        if self.transactional and self._stable_name:
            # static membership: a restarted bolt (same name, hence same transactional.id) gets
            # its partitions back without a rebalance of the whole group
            consumer_overrides["group.instance.id"] = f"{self.group_id}.{self.name}"
        self._consumer = new_consumer(
            self.bootstrap_servers, self.group_id, self.kafka_config, clients=self.clients, **consumer_overrides
        )
        self._consumer.subscribe(self.source_topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        if self._parallel is not None:
            self._parallel.start()
        log.info(
            "%s: reading %s as group %s%s",
            self.name,
            self.source_topics,
            self.group_id,
            " (transactional)" if self.transactional else "",
        )

    def _new_producer(self) -> Producer:
        return new_producer(
            self.bootstrap_servers,
            self.kafka_config,
            ack_sender=self.name,
            clients=self.clients,
            defaults=SENT_PER_POLL,
            **self._producer_overrides,
        )

    def _use_producer(self, producer: Producer) -> None:
        """``producer`` sends outputs, acks, quarantine copies and failure records (also a replacement)."""
        self._producer = producer
        self._acks = AckSender(
            self._producer, acks_topic=self.topics.acks, ack_partitions=self._ack_partitions, sender=self.task_id
        )
        self._quarantine = Quarantine(self._producer, topic=self.topics.quarantine, component=self.name)
        self._failures = (
            None
            if self._failures_topic is None
            else FailureLog(self._producer, topic=self._failures_topic, component=self.name, task_id=self.task_id)
        )

    def _record_failure(self, tuple_: Tuple, reason: str | None, error: BaseException | None, retry: bool) -> None:
        if self._failures is None:
            return
        self._failures.write(
            FailureRecord.of(
                roots=tuple_.anchors,
                component=self.name,
                task_id=self.task_id,
                reason=reason,
                error=error,
                retry=retry,
                topic=tuple_.topic,
                partition=tuple_.partition,
                offset=tuple_.offset,
                clock=self._clock,
            )
        )

    def close(self) -> None:
        try:
            if self._parallel is not None and self._consumer is not None:
                self._parallel.close(self.revoke_wait_s)  # running calls end, within a bound
            if self._consumer is not None and not self.transactional:
                self._flush_and_commit(force=True)
            if self._consumer is not None:
                self._consumer.close()
        finally:
            if self._parallel is not None:
                self._parallel.stop(timeout=1.0)
            self._consumer = None
            self._count_emits()
            producer, self._producer = self._producer, None  # closed: a second close() has nothing to do
            release_producer(producer, owner=self.name)
            log.info("%s: stopped; %s", self.name, self.stats)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._parallel is not None:
            self._parallel.assign(consumer, partitions)
        self.ready.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._parallel is not None:
            self._parallel.revoke(partitions, self.revoke_wait_s)
        if not self.transactional:
            self._flush_and_commit(force=True)
        if self._parallel is not None:
            self._parallel.forget(partitions)

    # --- the loop -------------------------------------------------------------------------------

    def poll_once(self, timeout: float = 0.1) -> None:
        assert self._consumer is not None  # made by start()
        if self._parallel is not None:
            self._poll_parallel(timeout)
            return
        consumed = consume_batch(self._consumer, self.batch_size, timeout)
        messages = consumed if _no_errors(consumed) else [m for m in consumed if m.error() is None or self._usable(m)]
        if self.transactional:
            if messages:
                self._process_in_transaction(messages)
            return
        ends = self._ends = {}  # _process_batch notes each partition's next offset (it reads the coordinates anyway)
        self._process_batch(messages)
        if ends:  # one store per batch: the offset after each partition's last processed message
            self._consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()])
            self._uncommitted = True
        if self._failures is not None and self._failures.unflushed:
            # failure path only: the reasons are in the log before their FAIL entries are sent, so
            # the spout finds them when the FAILED outcome arrives
            self._failures.unflushed = False
            assert self._producer is not None
            self._producer.flush(10)
        assert self._acks is not None
        assert self._producer is not None
        caught_up = len(consumed) < self.batch_size
        if caught_up or self._acks_due():
            # caught up: at once; while behind, a few batches' acks share a record
            self._acks.send()
            self._acks_sent_at = self._clock.monotonic()
        send_polled(self._producer)  # the batch's outputs and acks: one request per partition, no linger
        self._producer.poll(0)
        self._flush_and_commit()

    def _poll_parallel(self, timeout: float) -> None:
        """One round of a parallel bolt: apply what ended calls asked for, take records while there
        is room (else pause the partitions), start calls, send, commit the done prefix."""
        calls, consumer = self._parallel, self._consumer
        assert calls is not None and consumer is not None
        calls.apply()
        calls.dispatch()  # slots freed by the calls that ended
        wanted, consumed = 0, []
        if calls.may_consume():
            if calls.paused:
                consumer.resume(consumer.assignment())
                calls.paused = False
            wanted = min(self.batch_size, calls.room())
            consumed = consume_batch(consumer, wanted, timeout if calls.held == 0 else 0)
        elif calls.should_pause(self._clock.monotonic()):
            # full for a while: pause (librdkafka drops what it prefetched for paused partitions,
            # so a short fill waits without it) and consume only to serve the group
            consumer.pause(consumer.assignment())
            calls.paused = True
        elif calls.paused:
            consumed = consumer.consume(1, 0)  # a paused partition returns nothing (rebalances, errors)
        messages = consumed if _no_errors(consumed) else [m for m in consumed if m.error() is None or self._usable(m)]
        calls.accept(messages)
        calls.dispatch()
        if not messages and calls.handed_over():
            calls.apply(wait=min(timeout, 0.01))  # nothing new: wait for a call to end (not spin)
            calls.dispatch()
        if self._failures is not None and self._failures.unflushed:
            # the reasons are in the log before their FAIL entries are sent (as poll_once)
            self._failures.unflushed = False
            assert self._producer is not None
            self._producer.flush(10)
        assert self._acks is not None and self._producer is not None
        if len(consumed) < wanted or self._acks_due():
            self._acks.send()
            self._acks_sent_at = self._clock.monotonic()
        send_polled(self._producer)
        self._producer.poll(0)
        self._flush_and_commit()

    def _acks_due(self) -> bool:
        """While full batches keep coming (the bolt is behind), acks wait for a few more batches, up
        to :data:`ACK_HOLD_ENTRIES` or :data:`ACK_HOLD_S`: fewer, larger ack records (each is about
        one produce request to the broker and one fetch and fold for the acker)."""
        assert self._acks is not None
        return len(self._acks) >= ACK_HOLD_ENTRIES or self._clock.monotonic() - self._acks_sent_at >= ACK_HOLD_S

    def _usable(self, message: Message) -> bool:
        if message.error() is None:
            return True
        check_consumed(message, self._consumer, component=self.name)
        raise_if_fatal(message.error(), component=self.name, instance_id=static_member(self._consumer))  # fenced: stop
        if cast(KafkaError, message.error()).code() != KafkaError._PARTITION_EOF:
            log.warning("%s: consumer error: %s", self.name, message.error())
        return False

    def _process(self, message: Message) -> None:
        self._process_batch((message,))

    def _process_batch(self, messages: Sequence[Message]) -> None:
        """Each message through the handler, in order; ``_ends`` gets each partition's next offset."""
        # counted before the handlers run: the status page finds a stuck handler as received - handled >= 1
        self.stats.received += len(messages)
        took: list[tuple[float, int]] = []  # (seconds each, calls) per timed run, observed once per batch
        try:
            self._handle(messages, took)
        finally:
            self._run_started = None
            observe = self.process_latency.observe_n
            for seconds, calls in took:
                observe(seconds, calls)
            self.collector.current = None
            self._count_emits()
            pack_acks(self._acks, self._ack_pairs, self._ack_owed)  # what BasicBolt acked in this batch, at once

    def _count_emits(self) -> None:
        """The emits the collector noted (a topic each) into ``stats.emitted`` and ``output_topics``:
        once per batch instead of two updates per emitted tuple (emits from another thread are
        counted with the loop's next batch)."""
        noted = self.collector._emitted_to
        if noted:
            count = len(noted)
            self.output_topics.update(noted)
            del noted[:count]  # an append from another thread meanwhile stays for the next batch
            self.stats.emitted += count

    def _handle(self, messages: Sequence[Message], took: list[tuple[float, int]]) -> None:
        handle_serially(self, messages, took)

    def _handle_batch(
        self, batch: TupleBatch, roots: list[int], pairs: list[bytes | None], took: list[tuple[float, int]]
    ) -> None:
        handle_batch(self, batch, roots, pairs, took)

    def _call_raised(self, tuple_: Tuple, error: BaseException) -> None:
        """A parallel call raised ``error`` (or could not be applied): the same policy as the serial
        loop's ``except`` clauses: fatal errors and non-``Exception`` raises propagate, others fail the tuple."""
        if isinstance(error, self.FATAL) or not isinstance(error, Exception):
            raise error
        self._handler_failed(tuple_, error)

    def _handler_failed(self, tuple_: Tuple, exc: Exception) -> None:
        """The handler raised on ``tuple_``: counted, logged with its traceback, and the tuple failed."""
        self.stats.handler_errors += 1
        handler_raised(  # the last error, and a log that does not repeat a traceback per tuple
            self,
            exc,
            log,
            "%s: handler %s raised on %s; failing the tuple",
            self.name,
            getattr(self.handler, "__name__", self.handler),
            tuple_.coordinates,
            where=str(tuple_.coordinates),
        )
        self.collector.fail(tuple_, error=exc)

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        anchors: dict[int, int],
    ) -> None:
        assert self._producer is not None  # made by start()
        produce_tuple(self._producer, topic, value, key=key, headers=headers, partition=partition, anchors=anchors)
        self.stats.emitted += 1
        self.output_topics.add(topic)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        """The producer's delivery report, for failed messages only (:data:`ERRORS_ONLY`)."""
        if error is not None:  # the child's edge stays in its tree: it times out and replays
            self.stats.delivery_errors += 1
            log.error("%s: output to %s not delivered: %s", self.name, message.topic(), error)

    def _flush_and_commit(self, *, force: bool = False) -> None:
        now = self._clock.monotonic()
        if force and self._acks is not None:
            self._acks.send()  # held acks go before the partitions do (revoke) or the producer (close)
        if not self._uncommitted or (not force and (now - self._last_commit) * 1000 < self.commit_interval_ms):
            return
        # a commit waits for its batches' outputs and acks to be delivered, on later rounds (commit_wait)
        in_flight = not force and self._in_flight()
        go, self._commit_waits_since = commit_wait(
            self._commit_waits_since, now, in_flight=in_flight, interval_ms=self.commit_interval_ms
        )
        if not go:
            return
        self._last_commit = now
        try:
            assert self._acks is not None
            self._acks.send()  # acks held while behind: committed past only once delivered (fewer replays)
            # inputs are committed after their outputs and acks were delivered: fewer replays
            assert self._producer is not None and self._quarantine is not None
            flush_or_raise(self._producer, what=f"{self.name} outputs and acks", clock=self._clock)
            if self._quarantine.unsent:  # a quarantine copy failed: not past its record until written
                self._quarantine.retry_unsent()
                return
            # on the loop's own cadence the commit does not hold up tuples (a failed one only means
            # replays); on close and revoke it must be done before the partitions go
            assert self._consumer is not None
            if self._parallel is None:
                self._consumer.commit(asynchronous=not force)  # type: ignore[call-overload]  # stubs: Literal bools only
            else:  # each partition's done prefix, the offsets done above it in the metadata
                offsets = self._parallel.offsets_to_commit()
                if offsets:
                    self._consumer.commit(offsets=offsets, asynchronous=not force)  # type: ignore[call-overload]
            self._uncommitted = False
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError._NO_OFFSET:
                self._uncommitted = False
                return
            log.warning("%s: commit postponed: %s", self.name, exc)
        except AuthorizationError:
            raise  # a delivery report said a permission is missing: stop
        except Exception as exc:  # DeliveryError: the broker is away; try again next round
            log.warning("%s: commit postponed: %s", self.name, exc)

    def _in_flight(self) -> bool:
        """Outputs or acks not delivered yet: queued or held in the ack packer, or awaiting the broker."""
        assert self._producer is not None and self._acks is not None
        return len(self._acks) > 0 or len(self._producer) > 0

    def _process_in_transaction(self, messages: list[Message]) -> None:
        consumer, transactions = self._consumer, self._transactions
        assert transactions is not None  # made by start() for a transactional bolt
        transactions.begin()
        try:
            self._process_batch(messages)
            assert self._acks is not None and consumer is not None
            self._acks.send()
            transactions.commit(consumer.position(consumer.assignment()), consumer.consumer_group_metadata())
            self.stats.transactions += 1
        except (KafkaException, StuckCall) as exc:
            self.stats.aborted_transactions += 1
            log.warning(
                "%s: transaction aborted (%s); the batch will be processed again",
                self.name,
                exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc,
            )
            transactions.abort(exc)  # a new producer, if needed, comes through _use_producer
            self._rewind()

    def _rewind(self) -> None:
        """Seek every assigned partition back to its committed offset (the aborted batch repeats)."""
        consumer = self._consumer
        assert consumer is not None
        assignment = consumer.assignment()
        for tp in consumer.committed(assignment, timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def _no_errors(messages: list[Message]) -> bool:
    """True if no message of a consumed batch carries an error: each one's ``error()`` called from C
    (about 20 ns a message; a list comprehension testing them costs 50), the batch then used as it is."""
    try:
        return not any(map(_message_error, messages))
    except TypeError:  # not confluent-kafka's messages (a test's own class): the caller filters them one by one
        return False


_message_error = Message.error


class BasicBolt(Bolt):
    """Storm's basic bolt: outputs are anchored to the input; ack on return, fail on raise."""

    _collector_class = BasicCollector
    _acks_on_return = True
    collector: BasicCollector
