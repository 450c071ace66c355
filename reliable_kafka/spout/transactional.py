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

import hashlib
import logging
import time
from typing import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from reliable_kafka.core.commit_metadata import DEFAULT_MAX_BYTES, decode_done_above, encode_done_above
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import ConfigError, DecodeError
from reliable_kafka.ids import to_signed
from reliable_kafka.spout.spout import SourceRecord, Spout, TopicPartitionKey, _source_record
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.clients import new_consumer, new_producer
from reliable_kafka.kafka.deadline import StuckCall, with_deadline
from reliable_kafka.kafka.outcomes import OutcomeListener
from reliable_kafka.kafka.parking import Quarantine

__all__ = ["TransactionalSpout", "encode_spout_state", "decode_spout_state", "owner_id"]

log = logging.getLogger(__name__)

_STATE_SEPARATOR = "|rkx:"
TXN_DEADLINE_S = 45.0  # a transactional call past its own 30 s timeout is stuck (see with_deadline)
REREAD_MAX_GAP = 500  # in-flight offsets this close are read again in one sequential pass
REREAD_TIMEOUT_S = 20.0  # well inside the 60 s transaction timeout


def owner_id(group_id: str, topic: str, partition: int) -> int:
    """The stable task id that owns a source partition's roots, whichever process reads it."""
    digest = hashlib.blake2b(f"{group_id}\x00{topic}\x00{partition}".encode(), digest_size=8).digest()
    return to_signed(int.from_bytes(digest, "little")) or 1


def derive_root(owner: int, offset: int, attempt: int) -> int:
    digest = hashlib.blake2b(f"{owner}:{offset}:{attempt}".encode(), digest_size=8).digest()
    return to_signed(int.from_bytes(digest, "little")) or 1


def encode_spout_state(commit_point: int, done_above, *, emitted_upto: int, outcome_position: int,
                       attempts: dict[int, int], failed: Iterable[int] = (),
                       max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, bool]:
    """Commit metadata: the done-above set, then ``|rkx:e,o[,offset[+n]:attempt[:f]...]``.

    ``attempts`` gives the attempt of in-flight records past their first; ``failed`` the offsets
    whose last attempt already failed (their outcome lies before ``o``: a successor must redeliver
    or dead-letter them itself). Consecutive offsets alike are one run (``offset+n``). What does not
    fit in half of ``max_bytes`` is left out and reported as truncated: a successor then treats
    those records as first attempts still in flight, and its backstop redelivers them (duplicates,
    never loss).
    """
    failed = set(failed)
    extra = f"{_STATE_SEPARATOR}{emitted_upto},{outcome_position}"
    truncated = False
    for start, count, attempt, is_failed in _runs(attempts, failed):
        entry = f",{start}{f'+{count}' if count > 1 else ''}:{attempt}{':f' if is_failed else ''}"
        if len(extra) + len(entry) > max_bytes // 2:
            truncated = True
            break
        extra += entry
    done, done_truncated = encode_done_above(commit_point, done_above, max_bytes=max_bytes - len(extra))
    return done + extra, truncated or done_truncated


def _runs(attempts: dict[int, int], failed: set[int]):
    run = None
    for offset in sorted(attempts):
        key = (attempts[offset], offset in failed)
        if run is not None and offset == run[0] + run[1] and key == tuple(run[2:]):
            run[1] += 1
            continue
        if run is not None:
            yield tuple(run)
        run = [offset, 1, *key]
    if run is not None:
        yield tuple(run)


def decode_spout_state(commit_point: int, metadata: str) -> tuple[list[int], int, int, dict[int, int], set[int]]:
    """(done_above, emitted_upto, outcome_position, attempts, failed); DecodeError if not ours."""
    if _STATE_SEPARATOR not in metadata:
        raise DecodeError("spout state", "no transactional spout state in the commit metadata", metadata.encode())
    done, extra = metadata.split(_STATE_SEPARATOR, 1)
    attempts: dict[int, int] = {}
    failed: set[int] = set()
    try:
        fields = extra.split(",")
        emitted_upto, outcome_position = int(fields[0]), int(fields[1])
        for field in fields[2:]:
            parts = field.split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "f"):
                raise ValueError(f"entry {field!r} is not offset[+n]:attempt[:f]")
            start, _, count = parts[0].partition("+")
            for offset in range(int(start), int(start) + (int(count) if count else 1)):
                attempts[offset] = int(parts[1])
                if len(parts) == 3:
                    failed.add(offset)
    except (ValueError, IndexError) as exc:
        raise DecodeError("spout state", f"malformed state {extra!r}: {exc}", metadata.encode()) from exc
    return decode_done_above(commit_point, done), emitted_upto, outcome_position, attempts, failed


class TransactionalSpout(Spout):
    """:class:`Spout` whose emits, INITs and commits are one transaction per round.

    Needs a stable ``name`` per process (its ``transactional.id`` and ``group.instance.id`` are
    ``<group_id>.<name>``: a static group member) and ``guarantee="at_least_once"`` with ackers.
    Other arguments as :class:`Spout`.
    """

    def __init__(self, *, name: str, **options) -> None:
        if not name:
            raise ConfigError("TransactionalSpout needs a stable name (its transactional.id)")
        if options.get("guarantee", "at_least_once") != "at_least_once" or options.get("ackers") == 0:
            raise ConfigError("TransactionalSpout tracks trees: guarantee must be at_least_once, with ackers")
        super().__init__(name=name, **options)
        self._owners: dict[TopicPartitionKey, int] = {}
        self._senders: dict[TopicPartitionKey, AckSender] = {}
        self._emitted_upto: dict[TopicPartitionKey, int] = {}
        self._state_committed: dict[TopicPartitionKey, str] = {}
        self._pending_dead_letters: list = []
        self._failed_in_a_row = 0
        self._ack_partitions = 0
        self._fetcher: Consumer | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def _make_producer(self):
        producer = new_producer(self.bootstrap_servers, self.kafka_config, ack_sender=self.name,
                                clients=self.clients, **{
            "transactional.id": f"{self.group_id}.{self.name}", "transaction.timeout.ms": 60_000})
        producer.init_transactions(30)  # fences a previous incarnation and aborts its open transaction
        return producer

    def _consumer_overrides(self) -> dict:
        # static membership: a restarted process (same name) gets its partitions back without a
        # rebalance of the whole group, and without waiting for its old session to expire
        return {"group.instance.id": f"{self.group_id}.{self.name}"}

    def _make_listener(self) -> OutcomeListener:
        return OutcomeListener(  # follows one owner per adopted source partition
            bootstrap_servers=self.bootstrap_servers, topics=self.topics, kafka_config=self.kafka_config,
            clients=self.clients,
            quarantine=Quarantine(self._producer, topic=self.topics.quarantine, component=self.name))

    def start(self) -> None:
        super().start()
        self._ack_partitions = self._acks.ack_partitions

    def close(self) -> None:
        try:
            if self._consumer is not None:
                self._consumer.close()
        finally:
            self._consumer = None
            if self._fetcher is not None:
                self._fetcher.close()
            if self._listener is not None:
                self._listener.close()
            log.info("%s: stopped; %s", self.name, self.stats)

    # --- adoption of partitions -----------------------------------------------------------------

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        starts = []
        for tp in consumer.committed(partitions, timeout=30):
            key = (tp.topic, tp.partition)
            starts.append(TopicPartition(tp.topic, tp.partition, self._adopt(key, tp)))
        consumer.assign(starts)  # resume reading where emission stopped, not at the commit point
        log.info("%s: adopted %s", self.name, [(t.topic, t.partition, t.offset) for t in starts])
        self.ready.set()

    def _adopt(self, key: TopicPartitionKey, committed_tp: TopicPartition) -> int:
        owner = owner_id(self.group_id, *key)
        self._owners[key] = owner
        self._senders[key] = AckSender(self._producer, acks_topic=self.topics.acks,
                                       ack_partitions=self._ack_partitions, sender=owner)
        committed = committed_tp.offset if committed_tp.offset >= 0 else None
        done_above, emitted_upto, outcome_position, attempts, failed = [], committed, None, {}, set()
        if committed is not None and committed_tp.metadata:
            try:
                done_above, emitted_upto, outcome_position, attempts, failed = decode_spout_state(
                    committed, committed_tp.metadata)
            except DecodeError as error:
                log.warning("%s: commit metadata of %s[%s] is not a transactional spout's (%s); "
                            "resuming from the commit point", self.name, *key, error)
        self.tracker.assign(key, committed=committed, done_above=done_above)
        self._listener.follow(owner, from_offset=outcome_position)
        done = set(done_above)
        if committed is not None and emitted_upto is not None:
            for offset in range(committed, emitted_upto):
                if offset not in done:  # in flight under the previous owner: same root, same tree
                    attempt = attempts.get(offset, 1)
                    root = derive_root(owner, offset, attempt)
                    self.tracker.emitted(key, offset, root=root, attempt=attempt)
                    if offset in failed:  # its FAILED/TIMED_OUT outcome was consumed before us
                        self._act(self.tracker.on_outcome(root, OutcomeKind.FAILED))
        self._emitted_upto[key] = emitted_upto if emitted_upto is not None else (committed or 0)
        self._state_committed[key] = committed_tp.metadata or ""
        return emitted_upto if emitted_upto is not None else (committed if committed is not None else -2)

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # the last transaction holds the partition's state: nothing to commit
            self._forget((tp.topic, tp.partition))

    def _forget(self, key: TopicPartitionKey) -> None:
        super()._forget(key)
        owner = self._owners.pop(key, None)
        if owner is not None and owner not in self._owners.values():
            self._listener.unfollow(owner)
        self._senders.pop(key, None)
        self._emitted_upto.pop(key, None)
        self._state_committed.pop(key, None)

    # --- hooks ----------------------------------------------------------------------------------

    def _new_root(self, record: SourceRecord) -> int:
        return derive_root(self._owners[(record.topic, record.partition)], record.offset, record.attempt)

    def _ack_sender(self, key: TopicPartitionKey) -> AckSender:
        return self._senders[key]

    def _record(self, key: TopicPartitionKey, offset: int) -> SourceRecord | None:
        record = self._records.get((key, offset))
        if record is None and key in self._owners:
            self._read_again([(key, offset)])  # left in flight by a previous owner
            record = self._records.get((key, offset))
        return record

    def _read_again(self, wanted: Iterable[tuple[TopicPartitionKey, int]]) -> None:
        """Reads the source records of in-flight offsets left by a previous owner, in few passes.

        Offsets close together are read in one sequential pass (a redelivery storm after a broker
        restart is thousands of neighbours); raises :class:`RereadFailed` when a record that
        Kafka still holds could not be read in time (the round's transaction aborts and the
        redeliveries come back later, never counted done).
        """
        by_partition: dict[TopicPartitionKey, set[int]] = {}
        for key, offset in wanted:
            if (key, offset) not in self._records and key in self._owners:
                by_partition.setdefault(key, set()).add(offset)
        for key, offsets in by_partition.items():
            for run in _clusters(sorted(offsets), max_gap=REREAD_MAX_GAP):
                self._read_run(key, run)

    def _read_run(self, key: TopicPartitionKey, offsets: list[int]) -> None:
        if self._fetcher is None:
            self._fetcher = new_consumer(self.bootstrap_servers, f"{self.group_id}.refetch", self.kafka_config,
                                         clients=self.clients, **{"isolation.level": "read_committed"})
        low, _ = self._fetcher.get_watermark_offsets(TopicPartition(*key), timeout=10, cached=False)
        missing = set()
        for offset in offsets:
            if offset < low:  # deleted by retention while in flight: nothing left to redeliver
                self.stats.expired_in_flight += 1
                log.error("%s: %s[%s]@%s was deleted from Kafka (retention) while in flight; "
                          "counted done, not redelivered", self.name, *key, offset)
                self.tracker.done_immediately(key, offset)
            else:
                missing.add(offset)
        if not missing:
            return
        last = max(missing)
        self._fetcher.assign([TopicPartition(key[0], key[1], min(missing))])
        deadline = time.monotonic() + REREAD_TIMEOUT_S
        position = min(missing)
        while missing and position <= last and time.monotonic() < deadline:
            for message in self._fetcher.consume(num_messages=self.batch_size, timeout=0.5):
                if message.error() is not None:
                    continue
                position = message.offset() + 1
                if message.offset() in missing:
                    missing.discard(message.offset())
                    self._records[(key, message.offset())] = _source_record(message)
        self._fetcher.unassign()
        for offset in sorted(o for o in missing if o < position):  # read past: not a record
            missing.discard(offset)
            log.error("%s: %s[%s]@%s is not a committed record of the source; counted done", self.name, *key, offset)
            self.tracker.done_immediately(key, offset)
        if missing:
            raise RereadFailed(f"{len(missing)} in-flight records of {key[0]}[{key[1]}] from offset {min(missing)} "
                               f"could not be read again within {REREAD_TIMEOUT_S:.0f}s")

    # --- the loop -------------------------------------------------------------------------------

    def poll_once(self, timeout: float = 0.1) -> None:
        """One transaction: redeliveries, new records, their INITs, dead letters and the state."""
        self._take_outcomes()  # also queues dead letters: they are written inside the transaction
        messages = [m for m in self._consumer.consume(num_messages=self.batch_size, timeout=timeout)
                    if m.error() is None]
        due = self.tracker.due_redeliveries(limit=self.batch_size)  # keeps each transaction short
        if not messages and not due and not self._pending_dead_letters and not self._state_changed():
            self._apply_backpressure()
            return
        self._producer.begin_transaction()
        try:
            self._read_again([(r.tp, r.offset) for r in due] + [(a.tp, a.offset) for a in self._pending_dead_letters])
            for redelivery in due:
                record = self._record(redelivery.tp, redelivery.offset)
                if record is not None:
                    self.stats.replayed += 1
                    self._process(_with_attempt(record, redelivery.attempt))
            for message in messages:
                self.stats.read += 1
                self._process(_source_record(message))
                key = (message.topic(), message.partition())
                self._emitted_upto[key] = max(self._emitted_upto.get(key, 0), message.offset() + 1)
            written = self._write_dead_letters()
            for sender in self._senders.values():
                sender.send()
            offsets = self._state_offsets()
            with_deadline(self._producer.send_offsets_to_transaction, offsets,
                          self._consumer.consumer_group_metadata(), 30, seconds=TXN_DEADLINE_S)
            with_deadline(self._producer.commit_transaction, 30, seconds=TXN_DEADLINE_S)
        except (KafkaException, StuckCall, RereadFailed) as exc:
            self._abort(exc)
            return
        self._failed_in_a_row = 0
        for key, offset, record in written:
            self.stats.dead_lettered += 1
            self.tracker.dead_lettered(key, offset)
            self._records.pop((key, offset), None)
            self._attempts.pop((key, offset), None)
        for tp in offsets:
            self._state_committed[(tp.topic, tp.partition)] = tp.metadata
            self.stats.committed[(tp.topic, tp.partition)] = tp.offset
        self._apply_backpressure()

    def _act(self, action) -> None:
        from reliable_kafka.core.tracker import ActionKind

        if action is not None and action.kind is ActionKind.DEAD_LETTER:
            self._pending_dead_letters.append(action)
            return
        super()._act(action)

    def _write_dead_letters(self) -> list:
        from reliable_kafka.codec import ParkedRecord
        from reliable_kafka.ops.failures import attempt_headers
        from reliable_kafka.kafka.parking import park

        written = []
        actions, self._pending_dead_letters = self._pending_dead_letters, []
        for action in actions:
            record = self._record(action.tp, action.offset)
            if record is None:
                continue
            reason = f"{action.reason} after {record.attempt} attempts"
            why = attempt_headers(self._attempts.get((action.tp, action.offset), []))  # ops/failures.py
            park(self._producer, self.topics.dlq, key=record.key, value=record.value, headers=record.headers + why,
                 parked=ParkedRecord(reason=reason, attempts=record.attempt, source_topic=record.topic,
                                     source_partition=record.partition, source_offset=record.offset,
                                     source_timestamp_ms=record.timestamp_ms, component=self.name))
            written.append((action.tp, action.offset, record))
        return written

    def _state_changed(self) -> bool:
        return any(self.tracker.commit_point(key) != self.stats.committed.get(key) for key in self._owners)

    def _state_offsets(self) -> list[TopicPartition]:
        offsets = []
        for key, owner in self._owners.items():
            point = self.tracker.commit_point(key)
            if point is None:
                continue
            emitted_upto = max(self._emitted_upto.get(key, point), point)
            unsettled = self.tracker.unsettled(key)
            metadata, truncated = encode_spout_state(
                point, self.tracker.done_above(key), emitted_upto=emitted_upto,
                outcome_position=self._listener.position(owner),
                attempts={offset: attempt for offset, attempt, _ in unsettled},
                failed=[offset for offset, _, failed in unsettled if failed])
            if truncated:
                self.stats.metadata_truncated += 1
            offsets.append(TopicPartition(key[0], key[1], point, metadata))
        return offsets

    def _abort(self, exc: KafkaException | StuckCall | RereadFailed) -> None:
        """Abort, then rebuild every partition's state from the last committed transaction."""
        error = exc.args[0] if isinstance(exc, KafkaException) else None
        log.warning("%s: transaction aborted (%s); rebuilding from the last committed state", self.name,
                    exc if error is None else error)
        self._failed_in_a_row += 1
        if isinstance(exc, StuckCall) or (error is not None and error.fatal()) or self._failed_in_a_row >= 2:
            # fenced (the coordinator timed the transaction out while the broker was away), or
            # stuck: a new producer bumps the epoch, aborts what is pending, and we go on from the
            # committed state
            self._producer = self._make_producer()
            if self._listener.quarantine is not None:
                self._listener.quarantine.producer = self._producer
        else:
            try:
                self._producer.abort_transaction(30)
            except KafkaException as again:
                if again.args[0].fatal():  # fenced while aborting: same remedy
                    self._producer = self._make_producer()
                    if self._listener.quarantine is not None:
                        self._listener.quarantine.producer = self._producer
                elif not again.args[0].retriable():
                    raise
        self._pending_dead_letters = []
        assignment = self._consumer.assignment()
        for tp in assignment:
            self._forget((tp.topic, tp.partition))
        self._on_assign(self._consumer, assignment)

    def _commit(self, *, force: bool = False, only=None) -> None:
        """Commits happen inside each round's transaction."""


class RereadFailed(Exception):
    """In-flight records that Kafka still holds could not be read again (the broker is away?)."""


def _clusters(offsets: list[int], *, max_gap: int) -> list[list[int]]:
    """Sorted offsets split where the gap to the next one is over ``max_gap`` (one read each)."""
    runs: list[list[int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][-1] <= max_gap:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    return runs


def _with_attempt(record: SourceRecord, attempt: int) -> SourceRecord:
    return SourceRecord(record.topic, record.partition, record.offset, record.key, record.value, record.headers,
                        record.timestamp_ms, attempt)
