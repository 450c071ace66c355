"""The acker sends one outcome record per owner for a whole poll, not one per fold group: each
record is a produce request for the acker and a fetch for the spout. In-memory Kafka, manual clock."""

from __future__ import annotations

from reliable_kafka import Connection, Loop, codec
from reliable_kafka.acker.worker import FOLD_GROUP, AckerWorker
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka

TOPOLOGY = "t"
ACKS = f"{TOPOLOGY}.acks"
OUTCOMES = f"{TOPOLOGY}.outcomes"


def _assigned_acker(kafka: MemoryKafka, clock: ManualClock) -> AckerWorker:
    acker = AckerWorker(topology=TOPOLOGY, connection=Connection("memory", clients=kafka), loop=Loop(clock=clock))
    acker.start()
    for _ in range(10):
        acker.poll_once(0)
        if acker._partitions:
            return acker
    raise AssertionError("the acker was not assigned its partition")


def _decoded_outcomes(kafka: MemoryKafka) -> list[codec.OutcomeBatch]:
    return [codec.decode_outcomes(m.value()) for m in kafka.messages(OUTCOMES)]


def test_one_poll_over_several_fold_groups_sends_one_outcome_record_per_owner():
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _assigned_acker(kafka, clock)
    init, ack, fail = int(EventKind.INIT), int(EventKind.ACK), int(EventKind.FAIL)
    records = 3 * FOLD_GROUP + 5  # four fold groups in one poll
    owners = (7, 8)
    expected: dict[int, list[tuple[int, OutcomeKind]]] = {7: [], 8: []}
    for root in range(1, records + 1):
        owner = owners[root % 2]
        if root % 5:  # completes
            value = codec.encode_ack_batch(owner, [init, ack], [root, root], [root * 3, root * 3])
            expected[owner].append((root, OutcomeKind.COMPLETED))
        else:  # fails
            value = codec.encode_ack_batch(owner, [init, fail], [root, root], [root * 3, 0])
            expected[owner].append((root, OutcomeKind.FAILED))
        ListSource(kafka, ACKS).send([{"value": value, "partition": 0}])
    acker.poll_once(0)
    batches = _decoded_outcomes(kafka)
    assert sorted(batch.spout for batch in batches) == [7, 8], "one record per owner for the whole poll"
    assert acker.stats.outcome_records == 2
    for batch in batches:  # every decision, in the order the acker folded them
        got = list(zip(batch.roots.tolist(), (OutcomeKind(k) for k in batch.kinds.tolist())))
        assert got == expected[batch.spout]
    assert (acker.stats.completed, acker.stats.failed) == (records - records // 5, records // 5)
    acker.close()


def test_a_poll_that_decides_nothing_sends_no_outcome_record():
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _assigned_acker(kafka, clock)
    init = int(EventKind.INIT)
    for root in range(1, 2 * FOLD_GROUP + 1):  # pending trees only
        ListSource(kafka, ACKS).send([{"value": codec.encode_ack_batch(7, [init], [root], [root]), "partition": 0}])
    acker.poll_once(0)
    assert _decoded_outcomes(kafka) == []
    assert acker.stats.outcome_records == 0
    acker.close()


def test_every_outcome_kind_is_counted_and_sent_to_its_owner_in_fold_order():
    """The poll's counters (completed, failed, timed out, expired before any INIT) and the records
    of one owner and of two: each owner gets its decisions in the order they were made."""
    clock = ManualClock()
    kafka = MemoryKafka(clock=clock)
    acker = _assigned_acker(kafka, clock)
    init, ack, fail = int(EventKind.INIT), int(EventKind.ACK), int(EventKind.FAIL)

    def send(sender: int, kinds: list[int], roots: list[int], vals: list[int]) -> None:
        ListSource(kafka, ACKS).send([{"value": codec.encode_ack_batch(sender, kinds, roots, vals), "partition": 0}])

    send(7, [init, init, init, init], [11, 12, 13, 14], [5, 6, 7, 8])  # 14 never acked: times out
    send(9, [ack], [21], [3])  # no INIT ever: expires without an owner
    acker.poll_once(0)
    send(42, [ack, fail, ack], [11, 12, 13], [5, 0, 7])  # 11 and 13 complete, 12 fails
    acker.poll_once(0)
    assert [(b.spout, b.roots.tolist(), b.kinds.tolist()) for b in _decoded_outcomes(kafka)] == [
        (7, [11, 12, 13], [OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.COMPLETED])
    ]
    assert (acker.stats.completed, acker.stats.failed, acker.stats.timed_out) == (2, 1, 0)

    send(8, [init, init], [31, 32], [4, 4])  # another owner's roots, pending
    send(7, [init], [15], [9])
    acker.poll_once(0)
    clock.advance(acker.message_timeout_ms * 2)  # idle: wall time expires all that is pending
    acker.poll_once(0)
    later = [(b.spout, sorted(b.roots.tolist()), set(b.kinds.tolist())) for b in _decoded_outcomes(kafka)[1:]]
    assert sorted(later) == [(7, [14, 15], {OutcomeKind.TIMED_OUT}), (8, [31, 32], {OutcomeKind.TIMED_OUT})]
    assert (acker.stats.completed, acker.stats.failed, acker.stats.timed_out) == (2, 1, 4)
    assert acker.stats.expired_ownerless == 1
    acker.close()
