"""The in-memory Kafka's consumer: confluent-kafka's ``Consumer`` API, the subset the library uses.

Rebalances happen inside ``poll``/``consume``, as in confluent-kafka: the revoke callback runs
before the partitions are handed to their new owner, the assign callback may ``assign`` its own
start offsets (else the consumer assigns what it was given, resuming at the committed offset or
``auto.offset.reset``). ``isolation.level`` defaults to ``read_committed``, as librdkafka's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, Message, TopicPartition

from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.testing.memory_broker import FENCED_STATIC_MEMBER, new_message
from reliable_kafka.testing.memory_clients import cluster_metadata

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata

    from reliable_kafka.testing.memory_broker import MemoryKafka
    from reliable_kafka.testing.memory_groups import Group, Member

__all__ = ["MemoryConsumer"]

TopicPartitionKey = tuple[str, int]
_TRUE = ("true", "1", "t")

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]
"""on_assign, on_revoke, on_lost: called with the consumer (this one, as confluent-kafka's) and the partitions."""
CommitCallback = Callable[[KafkaError | None, list[TopicPartition]], None]


def _flag(config: dict[str, Any], name: str, default: bool) -> bool:
    return str(config.get(name, default)).lower() in _TRUE


class MemoryConsumer:
    """confluent-kafka's ``Consumer`` on a :class:`MemoryKafka` (never blocks: timeouts are ignored)."""

    def __init__(self, kafka: MemoryKafka, config: dict[str, Any]) -> None:
        self._kafka = kafka
        self.config = dict(config)
        self._group_id: str | None = config.get("group.id")
        self._read_committed = config.get("isolation.level", "read_committed") == "read_committed"
        self._reset = str(config.get("auto.offset.reset", "latest")).lower()
        self._auto_commit = _flag(config, "enable.auto.commit", True)
        self._auto_store = _flag(config, "enable.auto.offset.store", True)
        self._cooperative = "cooperative" in str(config.get("partition.assignment.strategy", ""))
        self._instance_id: str | None = config.get("group.instance.id")
        self._assignment: list[TopicPartitionKey] = []
        self._positions: dict[TopicPartitionKey, int | None] = {}  # None: committed offset or reset
        self._paused: set[TopicPartitionKey] = set()
        self._stored: dict[TopicPartitionKey, TopicPartition] = {}
        self._member: Member | None = None
        self._topics: list[str] = []
        self._callbacks: dict[str, RebalanceCallback | None] = {}
        self._awaiting: list[TopicPartitionKey] | None = None  # partitions given, not yet handed over
        self._assigned_in_callback = False
        self._turn = 0
        self._on_commit: CommitCallback | None = config.get("on_commit")
        self._commit_results: list[tuple[KafkaError | None, list[TopicPartition]]] = []  # served by consume()
        self._dead: str | None = None  # why every call now fails (closed, crashed)
        self._fatal: KafkaError | None = None  # librdkafka's fatal error: nothing works any more but close()
        self._fatal_unseen = False  # its error event not yet handed out by consume()

    # --- subscription and assignment ------------------------------------------------------------

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        self._check()
        if self._group_id is None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "subscribe needs group.id"))
        if self._member is not None:
            self.unsubscribe()
        self._topics = list(topics)
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._member = self._group().join(self, self._topics, self._instance_id)

    def unsubscribe(self) -> None:
        self._check()
        if self._member is not None:
            self._give_up(list(self._assignment), "revoke")
            self._group().leave(self._member)
            self._member, self._awaiting = None, None

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        self._assigned_in_callback = True
        self._assignment, self._positions = [], {}
        self.incremental_assign(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        self._assigned_in_callback = True
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key not in self._assignment:
                self._assignment.append(key)
            self._positions[key] = self._start(key, tp.offset)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        self._assigned_in_callback = True
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key in self._assignment:
                self._assignment.remove(key)
            self._positions.pop(key, None)  # its pause stays, as librdkafka's does (see unassign)

    def unassign(self) -> None:
        self._check()
        self._assigned_in_callback = True
        # a paused partition stays paused when it is assigned again: librdkafka (2.x) keeps the pause
        # on the partition, not on the assignment (measured: paused, revoked, re-assigned, nothing read)
        self._assignment, self._positions = [], {}

    def assignment(self) -> list[TopicPartition]:
        self._check()
        return [TopicPartition(t, p) for t, p in self._assignment]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def _start(self, key: TopicPartitionKey, offset: int) -> int | None:
        if offset == OFFSET_BEGINNING:
            return self._kafka.log(*key).start if key[0] in self._kafka.topics else 0
        if offset == OFFSET_END:
            return self._kafka.log(*key).end if key[0] in self._kafka.topics else 0
        return offset if offset >= 0 else None

    # --- rebalances -----------------------------------------------------------------------------

    def _rebalance(self) -> None:
        member = self._member
        if member is None:
            return
        if not member.alive:  # expired while this process went on: its partitions are lost
            lost = list(self._assignment)
            if lost:
                self._give_up(lost, "lost" if self._callbacks.get("lost") else "revoke")
            self._member = self._group().join(self, self._topics, self._instance_id)
            return  # as librdkafka: the rejoin's assignment arrives at a later poll, not this one
        if member.changed:
            member.changed = False
            target = list(member.target)
            moving = [k for k in self._assignment if k not in target or not self._cooperative]
            if moving:
                self._give_up(moving, "revoke")
            self._awaiting = [k for k in target if k not in self._assignment]
        if self._awaiting is not None and self._group().try_claim(member, self._awaiting):
            given, self._awaiting = self._awaiting, None
            if given or not self._cooperative:
                self._call(
                    "assign", [TopicPartition(t, p) for t, p in given], then=lambda tps: self.incremental_assign(tps)
                )

    def _give_up(self, keys: list[TopicPartitionKey], kind: str) -> None:
        tps = [TopicPartition(t, p) for t, p in keys]
        self._call(kind, tps, then=lambda tps: self.incremental_unassign(tps))
        if self._member is not None:
            self._group().release(self._member, keys)
        for key in keys:
            self._stored.pop(key, None)

    def _call(self, kind: str, tps: list[TopicPartition], *, then: Callable[[list[TopicPartition]], None]) -> None:
        """The application's callback; if it did not (un)assign itself, the consumer does (as confluent-kafka)."""
        callback = self._callbacks.get(kind)
        self._assigned_in_callback = False
        if callback is not None:
            callback(self, tps)
        if not self._assigned_in_callback:
            then(tps)

    def _group(self) -> Group:
        # None for a consumer without group.id: subscribe and commit refuse it first; committed()
        # finds no offsets kept under None
        return self._kafka.group(self._group_id)  # type: ignore[arg-type]

    # --- reading --------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        messages = self.consume(1, timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        if self._fatal is not None and self._dead is None:  # as librdkafka: one error event, then nothing
            unseen, self._fatal_unseen = self._fatal_unseen, False
            return [new_message(error=self._fatal)] if unseen else []
        self._check()
        self._rebalance()
        results, self._commit_results = self._commit_results, []
        for error, offsets in results:  # as librdkafka: asynchronous commits are reported by a poll
            assert self._on_commit is not None
            self._on_commit(error, offsets)
        messages: list[Message] = []
        fault = self._kafka.take_fault("consume")
        if fault is not None and (fault.fatal() or fault.code() == KafkaError._FATAL):
            self._fail_fatally(fault)
            return self.consume(num_messages, timeout)
        if fault is not None:  # librdkafka hands errors out as messages whose error() is set
            assigned = next(iter(self._assignment), (None, None))
            messages.append(new_message(topic=assigned[0], partition=assigned[1], error=fault))
        keys = [k for k in self._assignment if k not in self._paused and k[0] in self._kafka.topics]
        if keys:
            self._turn = (self._turn + 1) % len(keys)
            keys = keys[self._turn :] + keys[: self._turn]  # no partition starves the others
        for key in keys:
            if len(messages) >= num_messages:
                break
            self._read(key, num_messages - len(messages), messages)
        if self._auto_commit and self._member is not None and self._stored:
            self._group().commit(self._member, list(self._stored.values()))
        if not messages and timeout and timeout > 0 and self._kafka.idle_waits_advance_clock:
            # the wait for records that did not come (this option requires a clock with advance())
            self._kafka.clock.advance(int(timeout * 1000))  # type: ignore[attr-defined]
        return messages

    def _read(self, key: TopicPartitionKey, limit: int, into: list[Message]) -> None:
        log = self._kafka.log(*key)
        position = self._position(key)
        end = log.stable_end() if self._read_committed else log.end
        index = log.at(position)
        taken = 0
        while index < len(log.records) and taken < limit:
            record = log.records[index]
            if record.offset >= end:
                break
            if record.visible(self._read_committed):
                into.append(record.message(*key))
                taken += 1
            position = record.offset + 1  # control markers and aborted records are passed over
            index += 1
        self._positions[key] = position
        if taken and self._auto_store:
            self._stored[key] = TopicPartition(key[0], key[1], position)

    def _position(self, key: TopicPartitionKey) -> int:
        log = self._kafka.log(*key)
        position = self._positions.get(key)
        if position is None and self._group_id is not None:
            committed = self._kafka.committed(self._group_id, *key)
            position = committed[0] if committed is not None and committed[0] >= 0 else None
        if position is None or position < log.start or position > log.end:
            if self._reset in ("earliest", "smallest", "beginning"):
                position = log.start
            elif self._reset == "error":
                raise KafkaException(KafkaError(KafkaError._AUTO_OFFSET_RESET, f"{key}: no valid offset"))
            else:
                position = log.end
        self._positions[key] = position
        return position

    def seek(self, partition: TopicPartition) -> None:
        self._check()
        key = (partition.topic, partition.partition)
        if key not in self._assignment:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{key} is not assigned"))
        self._positions[key] = self._start(key, partition.offset)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._check()
        result = []
        for tp in partitions:
            offset = self._positions.get((tp.topic, tp.partition))
            result.append(TopicPartition(tp.topic, tp.partition, -1001 if offset is None else offset))
        return result

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        """(low, high); asked of the broker (``cached=False``) a read_committed reader's high is the
        last stable offset, as Kafka's ListOffsets answers."""
        self._check()
        log = self._kafka.log(partition.topic, partition.partition)
        high = log.stable_end() if self._read_committed and not cached else log.end
        return log.start, high

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        self._check()
        result = []
        for tp in partitions:
            log = self._kafka.log(tp.topic, tp.partition)
            found = next((r.offset for r in log.records if not r.control and r.timestamp[1] >= tp.offset), -1)
            result.append(TopicPartition(tp.topic, tp.partition, found))
        return result

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        self._check()
        return cluster_metadata(self._kafka, topic)

    # --- offsets --------------------------------------------------------------------------------

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        self._check()
        if message is not None:
            topic, partition, offset = coordinates(message)
            offsets = [TopicPartition(topic, partition, offset + 1)]
        for tp in offsets or []:
            key = (tp.topic, tp.partition)
            if key not in self._assignment:
                raise KafkaException(KafkaError(KafkaError._STATE, f"store_offsets: {key} is not assigned"))
            self._stored[key] = tp

    def commit(
        self, message: Message | None = None, offsets: list[TopicPartition] | None = None, asynchronous: bool = True
    ) -> list[TopicPartition] | None:
        self._check()
        if message is not None:
            topic, partition, offset = coordinates(message)
            offsets = [TopicPartition(topic, partition, offset + 1)]
        elif offsets is None:
            offsets = [self._stored[k] for k in self._assignment if k in self._stored]
            if not offsets:
                raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "Local: No offset stored"))
        if self._group_id is None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "commit needs group.id"))
        fault = self._kafka.take_fault("commit")
        if fault is not None:
            if asynchronous:  # reported to on_commit by a later poll, else only logged by librdkafka
                if self._on_commit is not None:
                    self._commit_results.append((fault, list(offsets)))
                return None
            raise KafkaException(fault)
        self._group().commit(self._member, offsets)
        if asynchronous:
            if self._on_commit is not None:
                self._commit_results.append((None, list(offsets)))
            return None
        return list(offsets)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        self._check()
        fault = self._kafka.take_fault("committed")
        if fault is not None:
            raise KafkaException(fault)
        return self._group().committed(partitions)

    def consumer_group_metadata(self) -> tuple[str | None, Member | None]:
        self._check()
        return (self._group_id, self._member)

    def memberid(self) -> str | None:
        return None if self._member is None else f"memory-{id(self._member):x}"

    # --- the end --------------------------------------------------------------------------------

    def close(self) -> None:
        if self._dead is not None:
            return
        if self._fatal is not None:  # its group already dropped it (or keeps a static member's share)
            self._dead = "Consumer closed"
            return
        if self._member is not None:
            self._give_up(list(self._assignment), "revoke")
            if self._auto_commit and self._stored:
                self._group().commit(self._member, list(self._stored.values()))
            self._group().leave(self._member)
        self._dead = "Consumer closed"

    def _crash(self) -> None:
        """The process died: no callbacks, no commits; its group moves on without it."""
        if self._member is not None:
            self._group().expire(self._member)
        self._dead = "consumer crashed (MemoryKafka.crash)"

    def _expire(self) -> None:
        """Its session expired while it went on: the next poll calls on_lost and rejoins."""
        if self._member is not None:
            self._group().expire(self._member)

    def _fenced_instance(self) -> None:
        """A newer consumer joined with its ``group.instance.id`` (KIP-345): librdkafka's fatal error."""
        self._fail_fatally(FENCED_STATIC_MEMBER)

    def _fail_fatally(self, error: KafkaError) -> None:
        """As librdkafka's fatal consumer error (measured with 2.x): consume() hands out one event with
        ``error``, then reads nothing; every other call but close() raises it. A dynamic member's
        group moves on without it; a static member's keeps its share for its next incarnation."""
        if self._fatal is not None:
            return
        self._fatal, self._fatal_unseen = error, True
        if self._member is not None and self._member.alive:
            self._group().leave(self._member)

    def _check(self) -> None:
        if self._dead is not None:
            raise RuntimeError(self._dead)
        if self._fatal is not None:
            raise KafkaException(self._fatal)
