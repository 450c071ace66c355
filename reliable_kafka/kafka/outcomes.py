"""Reading the outcomes addressed to a spout's task ids from ``<topology>.outcomes``."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import numpy as np
from confluent_kafka import Consumer, KafkaException, TopicPartition

from reliable_kafka import codec
from reliable_kafka.core.clock import Clock
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import ConfigError, DecodeError, StateError
from reliable_kafka.kafka.admin import admin_client, partition_count
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.clients import coordinates, new_consumer
from reliable_kafka.kafka.factory import KafkaClients
from reliable_kafka.kafka.fatal import ClientFailed, Rebuilds, client_failed, fatal_error, is_fatal
from reliable_kafka.kafka.parking import Quarantine
from reliable_kafka.topology import TopologyTopics

# kind value -> member by indexing (OutcomeKind(k) costs ~0.8 us, once per outcome); the decoder
# returns only the schema's kinds, 0 to 3
_KIND_OF = tuple(OutcomeKind).__getitem__

__all__ = ["OutcomeListener"]

log = logging.getLogger(__name__)


class OutcomeListener:
    """Reads the outcomes addressed to one or more spout task ids from ``<topology>.outcomes``.

    Outcomes for owner ``w`` go to partition ``w mod P``; several owners may share it, so entries
    for ids not followed are skipped. ``start`` pins the position to the current end *before* the
    spout sends its first INIT, so no outcome of this incarnation can be missed. A transactional
    spout follows one owner id per source partition and starts reading where the last owner of
    that partition stopped (``follow(owner, from_offset=...)``).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topics: TopologyTopics,
        spout_id: int | None = None,
        kafka_config: dict[str, Any] | None = None,
        quarantine: Quarantine | None = None,
        clients: KafkaClients | None = None,
        clock: Clock = time,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.spout_id = spout_id
        self.kafka_config = kafka_config
        self.quarantine = quarantine
        self.clients = clients
        self._clock = clock
        self.undecodable = 0
        self._owners: set[int] = set()
        self._next: dict[int, int] = {}  # partition -> next offset to deliver (all before: delivered)
        self._partitions = 0
        self._consumer: Consumer | None = None
        self._rebuilds = Rebuilds(clock=clock)

    def start(self, *, timeout: float = 30.0) -> None:
        self._consumer = self._new_consumer()
        partitions = partition_count(
            admin_client(self.bootstrap_servers, self.kafka_config, clients=self.clients),
            self.topics.outcomes,
            wait=timeout,
            clock=self._clock,
        )
        if partitions is None:
            self._consumer.close()
            self._consumer = None
            raise ConfigError(
                f"outcome topic {self.topics.outcomes} is missing; start an acker worker or call "
                f"ensure_topics() for topology {self.topics.topology!r} first"
            )
        self._partitions = partitions
        if self.spout_id is not None:
            self.follow(self.spout_id)

    def _new_consumer(self) -> Consumer:
        return new_consumer(
            self.bootstrap_servers,
            f"{self.topics.topology}.outcome-reader",
            self.kafka_config,
            clients=self.clients,
            **{"isolation.level": "read_committed"},
        )

    def _rebuild(self, failed: ClientFailed) -> None:
        """A new consumer after a fatal error, assigned where the old one stood: every outcome
        before ``_next`` was delivered, none after it is missed (docs/design.md section 7.5)."""
        self._rebuilds.allow(failed)  # raises past its limit: the spout or Spark driver stops
        old, self._consumer = self._consumer, None
        try:
            if old is not None:
                old.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("outcome reader: closing the failed consumer: %s", exc)
        self._consumer = self._new_consumer()
        self._consumer.incremental_assign(
            [TopicPartition(self.topics.outcomes, partition, offset) for partition, offset in self._next.items()]
        )
        log.warning("outcome reader of %s: new consumer, reading on from %s", self.topics.topology, self._next)

    def partition_of(self, owner: int) -> int:
        return (owner & ((1 << 64) - 1)) % self._partitions

    def follow(self, owner: int, *, from_offset: int | None = None, timeout: float = 30.0) -> None:
        """Also deliver outcomes for ``owner``: from ``from_offset`` of its partition, else from now."""
        partition = self.partition_of(owner)
        self._owners.add(owner)
        assert self._consumer is not None, "OutcomeListener.start() was not called"
        assigned = {tp.partition for tp in self._consumer.assignment()}
        if partition not in assigned:
            if from_offset is None:
                from_offset = self._end_offset(partition, timeout)
            self._consumer.incremental_assign([TopicPartition(self.topics.outcomes, partition, from_offset)])
            self._next[partition] = from_offset
        elif from_offset is not None and from_offset < self.position(owner):
            # read again from the earlier point: outcomes for roots no longer held are ignored
            self._consumer.seek(TopicPartition(self.topics.outcomes, partition, from_offset))
            self._next[partition] = from_offset

    def _end_offset(self, partition: int, timeout: float) -> int:
        """The outcome partition's end, asked of its leader; retried while that is not settled.

        Right after an acker created the topic, the broker may answer NOT_LEADER_FOR_PARTITION for
        a moment (seen on a loaded machine): a spout must not die of that at start.
        """
        assert self._consumer is not None
        deadline = self._clock.monotonic() + timeout
        while True:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topics.outcomes, partition),
                    timeout=max(1.0, deadline - self._clock.monotonic()),
                    cached=False,
                )
                return high
            except KafkaException as exc:
                if self._clock.monotonic() >= deadline:
                    raise
                log.info(
                    "outcome partition %s[%s] not ready (%s); asking again",
                    self.topics.outcomes,
                    partition,
                    exc.args[0],
                )
                self._clock.sleep(0.2)

    def unfollow(self, owner: int) -> None:
        self._owners.discard(owner)

    def position(self, owner: int) -> int:
        """The next outcome offset to read on ``owner``'s partition (all before it were delivered)."""
        return self._next[self.partition_of(owner)]

    def poll(self, timeout: float = 0.0, *, max_records: int = 500) -> list[tuple[int, OutcomeKind]]:
        """Outcomes for the followed owners that arrived since the last call."""
        outcomes: list[tuple[int, OutcomeKind]] = []
        for roots, kinds in self.poll_batches(timeout, max_records=max_records):
            outcomes.extend(zip(roots, map(_KIND_OF, kinds.tolist())))
        return outcomes

    def poll_batches(self, timeout: float = 0.0, *, max_records: int = 500) -> list[tuple[list[int], np.ndarray]]:
        """:meth:`poll` in columns, one ``(roots, kinds)`` pair per outcome record, in order: the
        roots as Python ints, the kinds as the decoder's array of OutcomeKind values (a spout acts
        on a record whose kinds are all COMPLETED with one call, not a call per root)."""
        if self._consumer is None:
            raise StateError("OutcomeListener.start() was not called")
        outcomes: list[tuple[list[int], np.ndarray]] = []
        if self.quarantine is not None and self.quarantine.unsent:
            self.quarantine.retry_unsent()
        component = f"outcome reader of {self.topics.topology}"
        try:
            consumed = self._consumer.consume(num_messages=max_records, timeout=timeout)
        except KafkaException as exc:
            if fatal_error(exc) is None:
                raise
            self._rebuild(client_failed(fatal_error(exc), component=component))
            return outcomes
        for message in consumed:
            if message.error() is not None:
                check_consumed(message, self._consumer, component=component)
                if is_fatal(message.error()):
                    self._rebuild(client_failed(message.error(), component=component))
                    return outcomes  # what came before it; the rest is read again by the new consumer
                log.warning("outcome consumer: %s", message.error())
                continue
            self._next[cast(int, message.partition())] = cast(int, message.offset()) + 1  # never None here
            try:
                batch = codec.decode_outcomes(message.value())
            except DecodeError as error:
                self.undecodable += 1
                if self.quarantine is not None:
                    self.quarantine.decode_error(message, error)
                else:
                    log.warning("%s", error.at(*coordinates(message)))
                continue
            if batch.spout not in self._owners:
                continue
            if len(batch):
                outcomes.append((batch.roots.tolist(), batch.kinds))
        return outcomes

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
