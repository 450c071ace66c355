"""Consumer groups of the in-memory Kafka: members, assignment, hand-over, committed offsets.

A partition moves between members as in Kafka's rebalance protocol: its old owner gives it up (its
revoke callback runs, it may commit) before the new owner is given it, at their next polls. With
``partition.assignment.strategy=cooperative-sticky`` a member gives up only the partitions that
move; otherwise (eager) it gives up all of them whenever its share changes. A member with a
``group.instance.id`` (static membership) keeps its share when it closes, until a consumer with the
same instance id takes its place or it is expired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException, TopicPartition

if TYPE_CHECKING:
    from collections.abc import Iterable

    from reliable_kafka.testing.memory_broker import MemoryKafka
    from reliable_kafka.testing.memory_consumer import MemoryConsumer

__all__ = ["Group", "Member"]

TopicPartitionKey = tuple[str, int]


class Member:
    """One consumer's place in a group; ``consumer`` is None once a static member closed."""

    def __init__(self, consumer: MemoryConsumer | None, topics: list[str], instance_id: str | None) -> None:
        self.consumer = consumer
        self.topics = topics
        self.instance_id = instance_id
        self.target: list[TopicPartitionKey] = []  # what the group gives it
        self.changed = False  # target changed since the member last synced
        self.alive = True  # False once expired, fenced or gone: its commits are refused


class Group:
    def __init__(self, kafka: MemoryKafka, group_id: str) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.offsets: dict[TopicPartitionKey, tuple[int, str | None]] = {}
        self.members: list[Member] = []  # in join order
        self.owner: dict[TopicPartitionKey, Member] = {}  # who holds a partition now (not yet revoked)
        self.generation = 0

    # --- membership -----------------------------------------------------------------------------

    def join(self, consumer: MemoryConsumer, topics: list[str], instance_id: str | None) -> Member:
        member = Member(consumer, list(topics), instance_id)
        for i, old in enumerate(self.members):
            if instance_id is not None and old.instance_id == instance_id:
                # static membership: the newcomer takes the old incarnation's place and share
                self._drop(old)
                if old.consumer is not None:
                    old.consumer._fenced_instance()
                member.target, member.changed = list(old.target), True
                self.members[i] = member
                return member
        self.members.append(member)
        self.rebalance()
        return member

    def leave(self, member: Member) -> None:
        """A closed consumer (after its revoke callback): a static member keeps its share."""
        self._release_all(member)
        if member.instance_id is not None and member.alive:
            member.consumer = None
            return
        self.expire(member)

    def expire(self, member: Member) -> None:
        """The member's session ends (it died, or a static member's timeout passed)."""
        self._drop(member)
        if member in self.members:
            self.members.remove(member)
        self.rebalance()

    def _drop(self, member: Member) -> None:
        member.alive = False
        self._release_all(member)

    def _release_all(self, member: Member) -> None:
        for key in [k for k, owner in self.owner.items() if owner is member]:
            del self.owner[key]

    def topics_changed(self) -> None:
        self.rebalance()

    def rebalance(self) -> None:
        """Share the subscribed partitions round-robin in join order; members whose share changed sync."""
        self.generation += 1
        subscribed = sorted({t for m in self.members for t in m.topics if t in self.kafka.topics})
        targets: dict[int, list[TopicPartitionKey]] = {id(m): [] for m in self.members}
        turn = 0
        for topic in subscribed:
            readers = [m for m in self.members if topic in m.topics]
            for partition in range(len(self.kafka.topics[topic].partitions)):
                targets[id(readers[turn % len(readers)])].append((topic, partition))
                turn += 1
        for member in self.members:
            if targets[id(member)] != member.target:
                member.target, member.changed = targets[id(member)], True

    # --- hand-over ------------------------------------------------------------------------------

    def release(self, member: Member, keys: Iterable[TopicPartitionKey]) -> None:
        for key in keys:
            if self.owner.get(key) is member:
                del self.owner[key]

    def try_claim(self, member: Member, keys: list[TopicPartitionKey]) -> bool:
        """Take ``keys`` if no other member still holds any of them (all or nothing)."""
        if any(self.owner.get(key, member) is not member for key in keys):
            return False
        for key in keys:
            self.owner[key] = member
        return True

    # --- offsets --------------------------------------------------------------------------------

    def commit(self, member: Member | None, offsets: list[TopicPartition]) -> None:
        if member is not None and not member.alive:
            raise KafkaException(
                KafkaError(KafkaError.UNKNOWN_MEMBER_ID, f"group {self.group_id}: this member left or was expired")
            )
        self.store_commit(offsets)

    def store_commit(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            self.offsets[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or None)

    def committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        result = []
        for tp in partitions:
            offset, metadata = self.offsets.get((tp.topic, tp.partition), (-1001, None))
            result.append(
                TopicPartition(tp.topic, tp.partition, offset)
                if metadata is None
                else TopicPartition(tp.topic, tp.partition, offset, metadata)
            )
        return result
