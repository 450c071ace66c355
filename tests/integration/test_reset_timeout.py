"""RESET_TIMEOUT reaches the owning spout (issue 9 item 5, docs/design.md sections 4 and 5).

A bolt that works long on one tuple keeps its tree alive with ``reset_timeout``. The acker pushes
its own deadline and, as Storm's acker does, tells the owning spout, whose backstop timer
(message timeout + grace) would otherwise fail the tree and redeliver the record.
"""

from __future__ import annotations

import time

from reliable_kafka import AckerWorker, Bolt, LocalCluster, Spout, Tracking, codec
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

TIMEOUT_MS, GRACE_MS = 2_000, 1_000
HOLD_S = 8.0  # well past timeout + grace: without the notices the spout's backstop fires at 3 s
RESET_EVERY_S = 0.5


class KeepAliveBolt(Bolt):
    """Holds the one tuple it gets, resets its timeout every half second, acks it after HOLD_S."""

    def __init__(self, **kwargs) -> None:
        super().__init__(handler=self._hold, **kwargs)
        self.held: list = []  # (tuple, when it came)
        self.resets = 0
        self.acked_at: float | None = None
        self._last_reset = 0.0

    def _hold(self, tuple_, collector) -> None:
        self.held.append((tuple_, time.monotonic()))

    def poll_once(self, timeout: float = 0.1) -> None:
        now = time.monotonic()
        if self.held and self.acked_at is None:
            tuple_, since = self.held[0]
            if now - since >= HOLD_S:
                self.collector.ack(tuple_)
                self.acked_at = now
            elif now - self._last_reset >= RESET_EVERY_S:
                self.collector.reset_timeout(tuple_)
                self.resets += 1
                self._last_reset = now
        super().poll_once(timeout)  # sends the ack entries queued above


def test_a_tree_kept_alive_past_the_backstop_completes_without_redelivery(kafka_bootstrap):
    topology = unique_name("reset")
    source, held = f"{topology}-source", f"{topology}.held"
    create_topics(kafka_bootstrap, {source: 1, held: 1})
    produce_values(kafka_bootstrap, source, [b"long work"])
    on = {"topology": topology, "connection": kafka_bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topology}-spout",
        emit_to=held,
        tracking=Tracking(message_timeout_ms=TIMEOUT_MS, backstop_grace_ms=GRACE_MS),
    )
    bolt = KeepAliveBolt(**on, source_topics=held, group_id=f"{topology}-bolt")
    acker = AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=TIMEOUT_MS))
    with LocalCluster(acker, spout, bolt) as cluster:
        cluster.wait_until(
            lambda: spout.stats.completed + spout.stats.replayed > 0,
            timeout=120,
            what="the held tree's outcome",
            progress=lambda: f"spout {spout.stats}, bolt held {len(bolt.held)}, resets {bolt.resets}",
        )
    assert spout.stats.replayed == 0 and spout.tracker.stats.backstop_expired == 0, (
        f"the spout's backstop failed a tree the bolt kept alive: {spout.stats}"
    )
    assert bolt.acked_at is not None and bolt.resets >= 2 * (TIMEOUT_MS + GRACE_MS) / 1000
    assert spout.stats.completed == 1
    assert len(bolt.held) == 1, "the record was delivered again"
    records = [
        codec.decode_outcomes(message.value()).kinds.tolist()
        for message in read_topic(kafka_bootstrap, TopologyTopics(topology).outcomes)
    ]
    kinds = [OutcomeKind(kind) for record in records for kind in record]
    # Notices travel in records of their own: a reader that predates the symbol loses only them.
    assert all(len(set(record) & {int(OutcomeKind.RESET_TIMEOUT)}) in (0, len(set(record))) for record in records)
    assert kinds.count(OutcomeKind.COMPLETED) == 1
    assert OutcomeKind.RESET_TIMEOUT in kinds
    assert OutcomeKind.TIMED_OUT not in kinds and OutcomeKind.FAILED not in kinds
