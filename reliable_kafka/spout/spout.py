"""The spout: source topics in, tracked tuple trees out (docs/design.md section 5).

Each source record becomes the root of a tree: the user's handler emits tuples anchored to it (by
default the record itself, forwarded to ``emit_to``), the spout sends one INIT for the root, and
the record stays in flight until an acker reports its outcome. The consumer group's committed
offset is the tracker's commit point: every record below it completed or was dead-lettered.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from reliable_kafka.kafka.clients import ERRORS_ONLY, coordinates
from reliable_kafka.kafka.produce import release_producer, send_polled
from reliable_kafka.polling import consume_batch
from reliable_kafka.spout.forward import ForwardingShell
from reliable_kafka.spout.records import SourceRecord, SpoutCollector, SpoutStats, forward_to, with_attempt
from reliable_kafka.spout.records import source_record as source_record  # the other spouts import it here
from reliable_kafka.spout.roots import POISON_PILL
from reliable_kafka.spout.shell import Guarantee, SpoutShell, TopicPartitionKey

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

OUTCOME_WAIT_S = 0.002  # longest wait for source records while trees are in flight: outcomes come first
DEAD_LETTER_FLUSH_S = 1.0  # how long a round waits to learn that its dead letters were written


class Spout(ForwardingShell):
    """Reads source topics in a consumer group and owns the roots of their records' trees.

    Keyword arguments (defaults in brackets; docs/configuration.md has every field):
    - ``topology``, ``connection``, ``source_topics``, ``group_id``: required. ``connection`` is a
      bootstrap servers string or a :class:`~reliable_kafka.config.Connection` (librdkafka
      settings, security, the client factory).
    - ``emit_to`` / ``handler``: where tuples go. ``emit_to="t"`` forwards each record to topic t;
      ``handler(record, collector)`` emits any number of tuples (none: the record is done at once).
    - ``tracking`` [``Tracking()``]: the guarantee, ackers, max pending, retries, backoff, message
      timeout, the dead-letter guard and the root index (:class:`~reliable_kafka.config.Tracking`).
    - ``transactional`` [False]: True makes the transactional spout: each round's emits, INITs, dead
      letters and commits are one Kafka transaction (needs a stable ``name``; docs/guarantees.md).
    - ``loop`` [``Loop()``]: batch size, commit interval, ``/metrics`` port and clock
      (:class:`~reliable_kafka.config.Loop`).
    - ``name`` [a random ``spout-xxxx``]: the spout's name in logs, status and metrics.
    """

    def __new__(cls, *, transactional: bool = False, **options: Any) -> Spout:
        if transactional is True and cls is Spout:
            # the transactional spout builds on this module: imported when asked for
            from reliable_kafka.spout.transactional import TransactionalSpout

            spout = object.__new__(TransactionalSpout)  # not its __new__: that one warns of the old spelling
            TransactionalSpout.__init__(spout, transactional=True, **options)
            # typed as a Spout: both are SpoutShells, with the same public API (run, stats, name...)
            return cast(Spout, spout)
        return super().__new__(cls)

    component = "spout"  # its kind in status reports and metrics (reliable_kafka.ops.snapshot)

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
                if self._roots.root_index is not None:
                    self._roots.root_index.send()  # what send_due held, flushed with the producer below
                self._commit(force=True)
                self._consumer.close()
        finally:
            self._consumer = None
            producer, self._producer = self._producer, None  # closed: a second close() has nothing to do
            release_producer(producer, owner=self.name)
            self._roots.close()
            log.info("%s: stopped; %s", self.name, self.stats)

    # --- rebalance ------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in consumer.committed(partitions, timeout=30):
            self._roots.restore((tp.topic, tp.partition), tp.offset if tp.offset >= 0 else None, tp.metadata)
        self._assignment_moved = True
        log.info("%s: assigned %s", self.name, [(tp.topic, tp.partition) for tp in partitions])
        self.ready.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit(force=True, only={(tp.topic, tp.partition) for tp in partitions})
        for tp in partitions:
            self._roots.forget((tp.topic, tp.partition))
        self._assignment_moved = True

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
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
            roots.root_index.send_due(self._clock.monotonic())  # about once a second
        assert self._producer is not None
        send_polled(self._producer)  # the round's tuples and INITs: one request per partition
        self._producer.poll(0)
        self._commit()

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

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition] | None) -> None:
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


# help(Spout) and editors show the keywords, not __new__'s (transactional, **options)
Spout.__signature__ = inspect.signature(SpoutShell)  # type: ignore[attr-defined]
