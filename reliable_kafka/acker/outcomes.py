"""How an acker worker's decisions leave it: outcome records to the owning spouts on
``<topology>.outcomes``, and commits of the ack partitions that wait for those outcomes to be
delivered (docs/design.md section 4: the committed offset is a snapshot point)."""

from __future__ import annotations

import logging

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reliable_kafka import codec
from reliable_kafka.acker.state import AckerPartition, AckerStats
from reliable_kafka.core.acker_table import Outcomes
from reliable_kafka.core.clock import Clock
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.errors import DeliveryError
from reliable_kafka.kafka.authorization import check_delivery
from reliable_kafka.kafka.commit_wait import commit_wait
from reliable_kafka.kafka.fatal import ClientFailed, client_failed, is_fatal, static_member
from reliable_kafka.kafka.parking import Quarantine
from reliable_kafka.kafka.produce import flush_or_raise
from reliable_kafka.topology import TopologyTopics

__all__ = ["OutcomePublisher", "MAX_OUTCOMES_PER_RECORD", "OUTCOME_PRODUCER_DEFAULTS"]

log = logging.getLogger("reliable_kafka.acker.worker")  # the worker's logger, as before the split

MAX_OUTCOMES_PER_RECORD = 5000
# Outcomes end every tree's completion latency, and an acker sends about one record per poll:
# they go at once instead of waiting out librdkafka's 5 ms linger (kafka_config may override).
OUTCOME_PRODUCER_DEFAULTS = {"linger.ms": 0}
# plain ints: NumPy compares and counts with them faster than with IntEnum members
_COMPLETED, _FAILED, _TIMED_OUT, _RESET_TIMEOUT = (
    int(k) for k in (OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.TIMED_OUT, OutcomeKind.RESET_TIMEOUT)
)
_KINDS = len(OutcomeKind)


class OutcomePublisher:
    """The outcome and commit methods of :class:`~reliable_kafka.acker.worker.AckerWorker` (its
    base), over the worker's state, which ``AckerWorker.__init__`` sets."""

    name: str
    topics: TopologyTopics
    stats: AckerStats
    commit_interval_ms: int
    _partitions: dict[int, AckerPartition]
    _outcome_partitions: int
    _retry_outcomes: list[tuple[int, bytes]]
    _consumer: Consumer | None
    _fenced: ClientFailed | None
    _producer: Producer | None
    _quarantine: Quarantine | None
    _last_commit: float
    _commit_waits_since: float | None
    _clock: Clock

    def _publish(self, decided: list[Outcomes]) -> None:
        # one record per owner for the whole poll, not one per fold group: each is a produce request
        # for the acker and a fetch for the spout (a stable sort keeps each owner's decisions in order)
        outcomes = Outcomes.concat(decided)
        if not len(outcomes):  # most polls of a busy acker: nothing to count or send
            return
        counts = np.bincount(outcomes.kinds, minlength=_KINDS)
        self.stats.completed += int(counts[_COMPLETED])
        self.stats.failed += int(counts[_FAILED])
        self.stats.timed_out += int(counts[_TIMED_OUT])
        for owner, (all_roots, all_kinds) in outcomes.by_owner().items():
            partition = (owner & ((1 << 64) - 1)) % self._outcome_partitions
            # RESET_TIMEOUT notices go in records of their own: a reader that predates the
            # symbol cannot decode them, and must not lose decisions with them
            notice = all_kinds == _RESET_TIMEOUT
            for part in (~notice, notice) if notice.any() else (slice(None),):
                roots, owner_kinds = all_roots[part], all_kinds[part]
                for start in range(0, len(roots), MAX_OUTCOMES_PER_RECORD):
                    stop = start + MAX_OUTCOMES_PER_RECORD
                    value = codec.encode_outcomes(owner, roots[start:stop], owner_kinds[start:stop])
                    self._send_outcome(partition, value)

    def _send_outcome(self, partition: int, value: bytes) -> None:
        assert self._producer is not None
        while True:
            try:
                self._producer.produce(
                    self.topics.outcomes, value, partition=partition, on_delivery=self._outcome_delivered
                )
                self.stats.outcome_records += 1
                return
            except BufferError:
                self._producer.poll(0.05)

    def _outcome_delivered(self, error: KafkaError | None, message: Message) -> None:
        check_delivery(error, message, self._producer)  # refused: stop, not retry forever
        if error is not None:  # kept and sent again: a lost outcome would stall its tree
            log.error("%s: outcome to partition %s not delivered (%s); retrying", self.name, message.partition(), error)
            # a produced message's partition and value (confluent-kafka types both as optional)
            self._retry_outcomes.append((message.partition(), message.value()))  # type: ignore[arg-type]

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition] | None) -> None:
        """An asynchronous commit's result (served by consume): a failed one is committed again, and
        a fenced consumer is made anew once consume returns (:meth:`AckerWorker._rebuild`)."""
        for tp in partitions or []:
            if error is None and tp.error is None:
                continue
            if self._fenced is None and is_fatal(error or tp.error):
                self._fenced = client_failed(
                    error or tp.error, component=self.name, instance_id=static_member(self._consumer)
                )
            state = self._partitions.get(tp.partition)
            if state is not None and state.committed == tp.offset:
                state.committed = None  # not in the group: the next due commit sends it again
            log.warning(
                "%s: commit of %s[%s]@%s failed: %s", self.name, tp.topic, tp.partition, tp.offset, error or tp.error
            )

    def _retry_failed_outcomes(self) -> None:
        retries, self._retry_outcomes = self._retry_outcomes, []
        for partition, value in retries:
            self._send_outcome(partition, value)

    def _commit(self, *, force: bool = False, only: set[int] | None = None) -> None:
        now = self._clock.monotonic()
        if not force and (now - self._last_commit) * 1000 < self.commit_interval_ms:
            return
        assert self._consumer is not None and self._producer is not None and self._quarantine is not None
        # outcomes below the new low points go first: waited for on later rounds (commit_wait)
        in_flight = not force and bool(len(self._producer) or self._retry_outcomes or self._quarantine.unsent)
        go, self._commit_waits_since = commit_wait(
            self._commit_waits_since, now, in_flight=in_flight, interval_ms=self.commit_interval_ms
        )
        if not go:
            return
        self._last_commit = now
        offsets = []
        for partition, state in self._partitions.items():
            if only is not None and partition not in only:
                continue
            offset = state.commit_offset()
            # forced: even if sent before (an asynchronous commit may have failed, not yet reported)
            if offset is not None and (force or offset != state.committed):
                offsets.append((partition, state, offset))
        if not offsets:
            return
        try:
            # outcomes decided below the new low points must be delivered first (docs/design.md section 4)
            flush_or_raise(self._producer, what=f"{self.name} outcomes", clock=self._clock)
            if self._retry_outcomes or self._quarantine.unsent:  # written again on the next poll
                return
            # a forced commit (revoke, close) must have landed before the partitions go; a periodic
            # one need not block: a failure reaches _on_commit, and the next round commits again
            self._consumer.commit(  # type: ignore[call-overload]  # stubs: Literal bools only
                offsets=[TopicPartition(self.topics.acks, p, off) for p, _, off in offsets], asynchronous=not force
            )
        except (KafkaException, DeliveryError) as exc:
            if only is not None:
                raise
            log.warning("%s: commit postponed: %s", self.name, exc)  # the low point only lags
            return
        for partition, state, offset in offsets:
            state.committed = offset
            self.stats.committed[partition] = offset
