"""A spout that emits each source record once, even across crashes, rebalances and broker restarts.

The plain :class:`~reliable_kafka.spout.Spout` forgets its in-flight records when it dies or loses
a partition: the next owner re-emits them (at-least-once). This spout instead commits, in one
Kafka transaction per round, its emitted tuples, their INIT events and the partition's state:

- the group offset is still the commit point (every record below it completed or was
  dead-lettered), so lag tools and invariant 1 keep their meaning;
- the offset's metadata adds where emission stopped (``e``), where the outcome partition of this
  source partition was read up to (``o``), and the attempt of in-flight records retried before.

Roots are derived from the source partition's owner id (stable: a hash of group, topic and
partition, not of the process), the offset and the attempt, and INIT events name that owner. A new
owner therefore knows the roots of the records its predecessor left in flight, reads their outcomes
from ``o`` on, and resumes reading the source at ``e``: nothing is emitted twice unless a tree
fails or times out (then the record is redelivered, at-least-once, as always).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reliable_kafka.codec import ParkedRecord
from reliable_kafka.core.ids import derive_root, owner_id
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.core.latency import LatencyHistogram
from reliable_kafka.core.spout_state import decode_spout_state, encode_spout_state
from reliable_kafka.core.tracker import TrackerStats
from reliable_kafka.errors import ConfigError, DecodeError
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.kafka.fatal import raise_if_fatal, static_member
from reliable_kafka.kafka.parking import park_reference
from reliable_kafka.kafka.transactions import StuckCall, Transactions
from reliable_kafka.spout.records import SpoutStats, with_attempt
from reliable_kafka.spout.reread import DELETED, RereadFailed, SourceRereader
from reliable_kafka.spout.roots import GONE_REASON
from reliable_kafka.spout.shell import TopicPartitionKey
from reliable_kafka.spout.spout import SourceRecord, SpoutShell, source_record

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = ["TransactionalSpout"]

log = logging.getLogger(__name__)

# the SpoutStats counters a round counts aside (paused is a state, committed is set after a commit)
_ROUND_COUNTERS = tuple(f.name for f in dataclasses.fields(SpoutStats) if type(f.default) is int)


class TransactionalSpout(SpoutShell):
    """A spout whose emits, INITs, dead letters and commits are one transaction per round.

    Needs a stable ``name`` per process (its ``transactional.id`` and ``group.instance.id`` are
    ``<group_id>.<name>``: a static group member) and ``guarantee="at_least_once"`` with ackers.
    Other arguments as :class:`~reliable_kafka.spout.Spout`. It shares the spout's handler,
    collector and root-owning core; it differs in how it reads (from where emission stopped, and
    records left in flight by a predecessor read again by offset) and how it commits (in the
    transaction, with the partition's state in the offset's metadata). Its ``stats``, and the
    tracker's counters that status and metrics show, count the work of committed rounds only.
    """

    component = "transactional-spout"  # its kind in status reports and metrics (reliable_kafka.ops.snapshot)
    transactional = True

    def __new__(cls, **options: Any) -> TransactionalSpout:
        # Spout(transactional=True) makes this class without coming here: only the old spelling warns
        warnings.warn(
            "TransactionalSpout is deprecated; use Spout(transactional=True) (the same spout)",
            DeprecationWarning,
            stacklevel=2,
        )
        return super().__new__(cls)

    def __init__(self, *, name: str, **options: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"TransactionalSpout: name must be a non-empty str (a stable name: its transactional.id), got {name!r}"
            )
        options.setdefault("transactional", True)
        super().__init__(name=name, **options)
        if self.guarantee != "at_least_once" or self.ackers == 0:
            raise ConfigError(
                "TransactionalSpout tracks trees: Tracking's guarantee must be at_least_once, with ackers"
            )
        self._owners: dict[TopicPartitionKey, int] = {}
        self._senders: dict[TopicPartitionKey, AckSender] = {}  # one INIT sender per source partition, by owner id
        self._derive_root = self._root_of
        self._emitted_upto: dict[TopicPartitionKey, int] = {}
        self._ack_partitions = 0
        self._gone_attempts: dict[TopicPartitionKey, dict[int, int]] = {}  # see _gone
        self._gone_parked: set[tuple[TopicPartitionKey, int]] = set()  # references in the open transaction
        # An aborted round's work is done again by a later round: what a round counts (records read
        # and replayed, tuples emitted, handler errors, outcomes taken) is held here and added to
        # self.stats when its transaction commits, dropped when it aborts. self.stats (status,
        # metrics) so counts committed work only, and only goes up. `committed` is the same dict.
        # (output_delivery_errors counts as failures happen: one is why its round aborts.)
        self._round = SpoutStats(committed=self.stats.committed)
        self._counts = self._round  # the shell's emits, handler errors and skips
        self._roots.stats = self._round  # outcomes taken, dead letters written, truncated metadata
        # The tracker counts as it goes: these are its counters, dead letters by reason and completion
        # latency as of the last commit, which status and metrics show. An abort puts the tracker's
        # own back to them (rebuilt from the last commit, it does and counts that work again).
        self.committed_tracker_stats = TrackerStats()
        self.committed_dead_letters_by_reason: dict[str, int] = {}
        self.committed_complete_latency = LatencyHistogram(self.tracker.complete_latency.bounds)
        self._rereader = SourceRereader(
            component=self.name,
            bootstrap_servers=self.bootstrap_servers,
            group_id=f"{self.group_id}.refetch",
            kafka_config=self.kafka_config,
            clients=self.clients,
            records=self._roots.records,
            to_record=source_record,
            gone=self._gone,
            batch_size=self.batch_size,
            clock=self._clock,
        )
        self._roots.reread = self._read_again
        self._roots.encode_metadata = self._state_metadata
        self._transactions = Transactions(
            self._new_transactional_producer, component=self.name, on_new_producer=self._use_producer
        )

    # --- lifecycle ------------------------------------------------------------------------------

    def _new_transactional_producer(self) -> Producer:
        return self._new_producer(
            **{"transactional.id": f"{self.group_id}.{self.name}", "transaction.timeout.ms": 60_000}
        )

    def start(self) -> None:
        # a derived root is found from its coordinates (trace --transactional-group): no root index
        self._ack_partitions = self._connect(self._transactions.start(), spout_id=None, index_roots=False)
        # static membership: a restarted process (same name) gets its partitions back without a
        # rebalance of the whole group, and without waiting for its old session to expire
        self._consumer = self._new_consumer(**{"group.instance.id": f"{self.group_id}.{self.name}"})
        self._consumer.subscribe(self.source_topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        log.info(
            "%s: reading %s as group %s (transactional, %d ack partitions)",
            self.name,
            self.source_topics,
            self.group_id,
            self._ack_partitions,
        )

    def close(self) -> None:
        try:
            if self._consumer is not None:
                self._consumer.close()
        finally:
            self._consumer = None
            self._rereader.close()
            self._roots.close()
            log.info("%s: stopped; %s", self.name, self.stats)

    # --- adoption of partitions -----------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        starts = []
        for tp in consumer.committed(partitions, timeout=30):
            key = (tp.topic, tp.partition)
            starts.append(TopicPartition(tp.topic, tp.partition, self._adopt(key, tp)))
        consumer.assign(starts)  # resume reading where emission stopped, not at the commit point
        self._assignment_moved = True
        log.info("%s: adopted %s", self.name, [(t.topic, t.partition, t.offset) for t in starts])
        self.ready.set()

    def _adopt(self, key: TopicPartitionKey, committed_tp: TopicPartition) -> int:
        owner = owner_id(self.group_id, *key)
        self._owners[key] = owner
        assert self._producer is not None and self._roots.listener is not None  # start() made them
        self._senders[key] = AckSender(
            self._producer, acks_topic=self.topics.acks, ack_partitions=self._ack_partitions, sender=owner
        )
        committed = committed_tp.offset if committed_tp.offset >= 0 else None
        done_above: list[int]
        attempts: dict[int, int]
        failed: set[int]
        done_above, emitted_upto, outcome_position, attempts, failed = [], committed, None, {}, set()
        if committed is not None and committed_tp.metadata:
            try:
                done_above, emitted_upto, outcome_position, attempts, failed = decode_spout_state(
                    committed, committed_tp.metadata
                )
            except DecodeError as error:
                log.warning(
                    "%s: commit metadata of %s[%s] is not a transactional spout's (%s); resuming from the commit point",
                    self.name,
                    *key,
                    error,
                )
        self.tracker.assign(key, committed=committed, done_above=done_above)
        self._roots.listener.follow(owner, from_offset=outcome_position)
        done = set(done_above)
        if committed is not None and emitted_upto is not None:
            for offset in range(committed, emitted_upto):
                if offset not in done:  # in flight under the previous owner: same root, same tree
                    attempt = attempts.get(offset, 1)
                    root = derive_root(owner, offset, attempt)
                    self.tracker.emitted(key, offset, root=root, attempt=attempt)
                    if offset in failed:  # its FAILED/TIMED_OUT outcome was consumed before us
                        self._roots.act(self.tracker.on_outcome(root, OutcomeKind.FAILED))
        self._emitted_upto[key] = emitted_upto if emitted_upto is not None else (committed or 0)
        return emitted_upto if emitted_upto is not None else (committed if committed is not None else -2)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # the last transaction holds the partition's state: nothing to commit
            self._forget((tp.topic, tp.partition))
        self._assignment_moved = True

    def _forget(self, key: TopicPartitionKey) -> None:
        self._roots.forget(key)
        owner = self._owners.pop(key, None)
        if owner is not None and owner not in self._owners.values():
            assert self._roots.listener is not None  # a key is known only after start()
            self._roots.listener.unfollow(owner)
        self._senders.pop(key, None)
        self._emitted_upto.pop(key, None)

    # --- how records are read -------------------------------------------------------------------

    def _root_of(self, record: SourceRecord) -> int:
        return derive_root(self._owners[(record.topic, record.partition)], record.offset, record.attempt)

    def _gone(self, key: TopicPartitionKey, offset: int, why: str) -> None:
        """A record left in flight that Kafka no longer has: nothing to redeliver, counted done.

        One Kafka deleted (retention, ``delete_records``) leaves a dead-letter reference, written in
        this round's transaction: the commit that passes its offset is the one that writes it, and an
        abort drops both (the state is rebuilt from the last commit and it is found gone again). It is
        counted (``expired_in_flight``) once that commit succeeded. An offset that is no record (a
        transaction marker) is only marked done."""
        if why != DELETED:
            self._roots.gone(key, offset, why)
            return
        if (key, offset) in self._gone_parked:  # read again in this round (a dead letter is, to be written)
            return
        if key not in self._gone_attempts:  # once per partition and read: retention may delete thousands
            self._gone_attempts[key] = {o: attempt for o, attempt, _ in self.tracker.unsettled(key)}
        attempts = self._gone_attempts[key].get(offset, 1)
        log.error(
            "%s: %s[%s]@%s %s after %d attempt(s); parked a reference in %s, counted done",
            self.name,
            *key,
            offset,
            why,
            attempts,
            self.topics.dlq,
        )

        def failed(error: KafkaError | None, _message: Message) -> None:
            if error is not None:  # the transaction's commit fails too: it aborts and this is parked again
                log.error("%s: reference to %s[%s]@%s not written: %s", self.name, *key, offset, error)

        park_reference(
            cast("Producer", self._producer),
            self.topics.dlq,
            parked=ParkedRecord(
                reason=GONE_REASON,
                attempts=attempts,
                source_topic=key[0],
                source_partition=key[1],
                source_offset=offset,
                component=self.name,
                parked_at_ms=int(self._clock.time() * 1000),
            ),
            headers=self._roots.history_headers(key, offset),
            on_delivery=failed,
        )
        self._gone_parked.add((key, offset))
        self.tracker.done_immediately(key, offset)

    def _read_again(self, wanted: Iterable[tuple[TopicPartitionKey, int]]) -> None:
        """The source records of in-flight offsets left by a previous owner (partitions still ours)."""
        self._gone_attempts.clear()  # the tracker may have changed since the last read
        self._rereader([(key, offset) for key, offset in wanted if key in self._owners])

    # --- the loop -------------------------------------------------------------------------------

    def poll_once(self, timeout: float = 0.1) -> None:
        """One transaction: redeliveries, new records, their INITs, dead letters and the state."""
        roots = self._roots
        assert self._consumer is not None, "start() was not called"
        roots.raise_if_guard_tripped()
        roots.take_outcomes()  # dead letters bound here are written inside the transaction
        messages = []
        for message in self._consumer.consume(num_messages=self.batch_size, timeout=timeout):
            if message.error() is None:
                messages.append(message)
            else:  # a refusal stops the spout (it would otherwise read nothing, forever)
                check_consumed(message, self._consumer, component=self.name)
                raise_if_fatal(message.error(), component=self.name, instance_id=static_member(self._consumer))
                log.warning("%s: consumer error: %s", self.name, message.error())
        due = self.tracker.due_redeliveries(limit=self.batch_size)  # keeps each transaction short
        if not messages and not due and not roots.dead_letters_waiting and not self._state_changed():
            self._apply_backpressure()
            return
        self._transactions.begin()
        self._gone_parked.clear()
        round_ = self._round
        try:
            self._read_again([(r.tp, r.offset) for r in due] + roots.bound_for_dead_letters())
            for redelivery in due:
                record = roots.records.get((redelivery.tp, redelivery.offset))
                if record is not None:
                    round_.replayed += 1
                    self._process(with_attempt(cast(SourceRecord, record), redelivery.attempt))
            for message in messages:
                round_.read += 1
                self._process(source_record(message))
                topic, partition, offset = coordinates(message)
                self._emitted_upto[(topic, partition)] = max(self._emitted_upto.get((topic, partition), 0), offset + 1)
            roots.write_dead_letters()
            roots.settle_dead_letters()  # this transaction's commit passes them: never parked twice
            for sender in self._senders.values():
                sender.send()
            offsets = roots.offsets_to_commit(only=self._owners, changed_only=False)
            self._transactions.commit(offsets, self._consumer.consumer_group_metadata())
        except (KafkaException, StuckCall, RereadFailed) as exc:
            self._abort(exc)
            return
        roots.dead_letters_delivered()
        roots.committed(offsets)
        round_.expired_in_flight += len(self._gone_parked)  # their references are committed now
        self._gone_parked.clear()
        self._count_committed()
        self._apply_backpressure()

    def _count_committed(self) -> None:
        """The round's transaction committed: its counts join the stats, the tracker's are kept."""
        round_, stats = self._round, self.stats
        for name in _ROUND_COUNTERS:  # each stats counter only goes up, by its own step
            setattr(stats, name, getattr(stats, name) + getattr(round_, name))
            setattr(round_, name, 0)
        tracker = self.tracker
        # new objects, never changed after: status and metrics read them from their own threads
        self.committed_tracker_stats = dataclasses.replace(tracker.stats)
        self.committed_dead_letters_by_reason = dict(tracker.dead_letters_by_reason)
        self.committed_complete_latency = _copy_histogram(tracker.complete_latency)

    def _state_changed(self) -> bool:
        return any(self.tracker.commit_point(key) != self.stats.committed.get(key) for key in self._owners)

    def _state_metadata(self, key: TopicPartitionKey, point: int) -> tuple[str, bool]:
        """The commit metadata of ``key``: done above ``point``, where emission stopped, where its
        outcomes were read up to, and the attempts of records retried or failed."""
        unsettled = self.tracker.unsettled(key)
        assert self._roots.listener is not None  # a key is known only after start()
        return encode_spout_state(
            point,
            self.tracker.done_above(key),
            emitted_upto=max(self._emitted_upto.get(key, point), point),
            outcome_position=self._roots.listener.position(self._owners[key]),
            attempts={offset: attempt for offset, attempt, _ in unsettled},
            failed=[offset for offset, _, failed in unsettled if failed],
        )

    def _abort(self, exc: KafkaException | StuckCall | RereadFailed) -> None:
        """Abort, then rebuild every partition's state from the last committed transaction."""
        error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        log.warning(
            "%s: transaction aborted (%s); rebuilding from the last committed state",
            self.name,
            exc if error is None else error,
        )
        self._transactions.abort(exc)  # a new producer reaches the senders through _use_producer
        self._roots.drop_dead_letters()
        self._gone_parked.clear()  # found gone again, and counted, in the round that commits
        assert self._consumer is not None
        assignment = self._consumer.assignment()
        for tp in assignment:
            self._forget((tp.topic, tp.partition))
        self._on_assign(self._consumer, assignment)
        # last: the re-adoption above registers again, and counts again, records in flight at the
        # last commit; the round that commits next counts what it does
        for name in _ROUND_COUNTERS:
            setattr(self._round, name, 0)
        tracker = self.tracker  # put back in place: the tracker's objects stay the same
        for counter in dataclasses.fields(TrackerStats):
            setattr(tracker.stats, counter.name, getattr(self.committed_tracker_stats, counter.name))
        tracker.dead_letters_by_reason.clear()
        tracker.dead_letters_by_reason.update(self.committed_dead_letters_by_reason)
        _copy_histogram(self.committed_complete_latency, into=tracker.complete_latency)


def _copy_histogram(histogram: LatencyHistogram, *, into: LatencyHistogram | None = None) -> LatencyHistogram:
    copy = LatencyHistogram(histogram.bounds) if into is None else into
    copy.counts[:], copy.count, copy.sum_s = histogram.counts, histogram.count, histogram.sum_s
    return copy
