"""The simulation's checker: docs/design.md section 8's invariants, read from the in-memory Kafka's logs alone.

It reads on from where it stopped after every step (the records a ``read_committed`` consumer
sees) and holds what the logs say: the roots written per source record, the reference acker's
decision per root, which source offsets completed or went to the DLQ. A broken invariant goes to
``fail(invariant, detail)``, which raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, cast

from reliable_kafka import codec
from reliable_kafka.core.ids import partitions_for_roots
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.testing.memory_broker import Headers, MemoryKafka
from reliable_kafka.testing.reference_acker import ReferenceAcker
from reliable_kafka.testing.simulation_config import MID, SOURCE, SPOUT_GROUP, TOPOLOGY, SimConfig

if TYPE_CHECKING:
    from confluent_kafka import Message

__all__ = ["LogChecker"]


class LogChecker:
    """Checks a simulated topology's logs; ``acked_roots`` are the roots its bolts acked."""

    def __init__(
        self, config: SimConfig, kafka: MemoryKafka, *, acked_roots: set[int], fail: Callable[[str, str], NoReturn]
    ) -> None:
        self.config = config
        self.kafka = kafka
        self.acked_roots = acked_roots
        self.fail = fail
        self.completed: dict[int, set[int]] = {p: set() for p in range(config.source_partitions)}
        self.dead: dict[int, set[int]] = {p: set() for p in range(config.source_partitions)}
        self._reference: dict[int, ReferenceAcker] = {}  # ack partition -> the model, fed its log
        self._decided: dict[int, tuple[int, int]] = {}  # root -> (OutcomeKind, owner) the model decided
        self._attempts: dict[tuple[int, int], int] = {}  # source (partition, offset) -> roots written
        self._read: dict[tuple[str, int], int] = {}
        self._mid_roots: dict[int, tuple[int, int]] = {}  # root -> source (partition, offset)

    def check(self) -> None:
        # the in-memory log's messages: headers a list of pairs, and every MID record has a value
        for message in self._new(MID):
            anchors = codec.decode_anchors(dict(cast(Headers, message.headers() or [])).get(codec.ANCHORS_HEADER))
            partition, offset = (int(x) for x in cast(bytes, message.value()).split(b":"))
            source = (partition, offset)
            for root in anchors:
                self._mid_roots[root] = source
                self._attempts[source] = self._attempts.get(source, 0) + 1
        # the acks before the outcomes: an acker decides only on acks already in the log
        for message in self._new(TOPOLOGY + ".acks"):
            self._model_fold(message)
        for message in self._new(TOPOLOGY + ".outcomes"):
            batch = codec.decode_outcomes(message.value())
            for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
                model = self._decided.get(root)
                if kind in (OutcomeKind.COMPLETED, OutcomeKind.FAILED) and model != (kind, batch.spout):
                    self.fail(
                        "sound outcomes",
                        f"an acker published {OutcomeKind(kind).name} for root {root} to "
                        f"owner {batch.spout}; the reference acker, fed the ack log, decided "
                        f"{'nothing' if model is None else f'{OutcomeKind(model[0]).name} for owner {model[1]}'}",
                    )
                if kind != OutcomeKind.COMPLETED:
                    continue
                if root not in self._mid_roots or root not in self.acked_roots:
                    self.fail(
                        "no premature completion",
                        f"root {root} COMPLETED but its tuple was "
                        f"{'never written' if root not in self._mid_roots else 'never acked'}",
                    )
                partition, offset = self._mid_roots[root]
                self.completed[partition].add(offset)
        for message in self._new(TOPOLOGY + ".dlq"):
            parked = codec.decode_parked(dict(cast(Headers, message.headers()))[codec.PARKED_HEADER])
            dead = self.dead[parked.source_partition]
            if self.config.transactional and parked.source_offset in dead:  # its effects appear once
                self.fail(
                    "one dead letter per record",
                    f"{SOURCE}[{parked.source_partition}]@{parked.source_offset} was dead-lettered again "
                    f"(attempt {parked.attempts}, {parked.reason}) by the transactional spout",
                )
            dead.add(parked.source_offset)
        for partition in range(self.config.source_partitions):
            committed = self.kafka.committed(SPOUT_GROUP, SOURCE, partition)
            if committed is None:
                continue
            for offset in range(committed[0]):
                if offset not in self.completed[partition] and offset not in self.dead[partition]:
                    self.fail(
                        "no loss",
                        f"{SOURCE}[{partition}] committed at {committed[0]}, but offset "
                        f"{offset} neither completed nor went to the DLQ",
                    )

    def _model_fold(self, message: Message) -> None:
        """Feed one ack record to its partition's reference acker; keep each root's first decision.

        The model never times a root out (its timeout is out of reach): a TIMED_OUT depends on the
        worker's clock and is not judged; a COMPLETED or FAILED must be the model's.
        """
        _, partition, offset = coordinates(message)
        model = self._reference.setdefault(partition, ReferenceAcker(message_timeout_ms=1 << 60, buckets=1))
        batch = codec.decode_ack_batch(message.value())
        keep = partitions_for_roots(batch.roots, self.config.ack_partitions) == partition
        for root, owner, kind in model.fold(
            batch.kinds[keep],
            batch.roots[keep],
            batch.vals[keep],
            sender=batch.sender,
            event_time_ms=message.timestamp()[1],
            offset=offset,
        ):
            self._decided.setdefault(root, (kind, owner))

    def check_quiet(self) -> None:
        """A run without faults, crashes or failing handlers completes every record on its first attempt."""
        for partition in range(self.config.source_partitions):
            for offset in range(self.kafka.topics[SOURCE].partitions[partition].end):
                attempts = self._attempts.get((partition, offset), 0)
                if offset not in self.completed[partition] or attempts != 1 or offset in self.dead[partition]:
                    self.fail(
                        "quiet run completes on the first attempt",
                        f"{SOURCE}[{partition}]@{offset}: {attempts} tuple(s) written, "
                        f"{'completed' if offset in self.completed[partition] else 'never completed'}"
                        f"{', dead-lettered' if offset in self.dead[partition] else ''}",
                    )

    def _new(self, topic: str) -> list[Message]:
        """The records of ``topic`` a read_committed consumer sees now and this checker has not seen yet.

        Reads on from where it stopped, up to the first open transaction (``MemoryKafka.messages``
        would build every message of the log again on every step: the checker's cost grew with the
        square of the log).
        """
        if topic not in self.kafka.topics:
            return []
        fresh = []
        for partition, log in enumerate(self.kafka.topics[topic].partitions):
            at = self._read.get((topic, partition), 0)  # an index into log.records
            records = log.records
            while at < len(records):
                record = records[at]
                if record.transaction is not None and record.transaction.state == "open":
                    break  # the last stable offset: what follows may still be aborted
                if record.visible(True):
                    fresh.append(record.message(topic, partition))
                at += 1
            self._read[(topic, partition)] = at
        return fresh
