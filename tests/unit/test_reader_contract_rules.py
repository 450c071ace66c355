"""The reader's contract of the ack and outcome topics (schemas/*.avsc, docs/design.md "Wire formats"),
pinned at the codec and acker-table level. The worker-level rules (record keys not read, an empty
batch folded, trailing bytes quarantined) are pinned in tests/integration/test_reader_contract.py."""

import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.acker.worker import AckerWorker
from reliable_kafka.core.acker_table import AckerTable
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.errors import DecodeError
from reliable_kafka.kafka.outcomes import OutcomeListener
from reliable_kafka.topology import TopologyTopics

INIT, ACK, FAIL, RESET = (int(k) for k in EventKind)
SPOUT, BOLT = 7, 100


def _fold(table: AckerTable, entries, *, sender=SPOUT, t=0, offset=0) -> set:
    kinds = np.array([e[0] for e in entries], dtype=np.uint8)
    roots = np.array([e[1] for e in entries], dtype=np.int64)
    vals = np.array([e[2] for e in entries], dtype=np.int64)
    out = table.fold(kinds, roots, vals, sender=sender, event_time_ms=t, offset=offset)
    return set(zip(out.roots.tolist(), out.kinds.tolist()))


def _expire(table: AckerTable, now: int) -> set:
    out = table.advance(now)
    return set(zip(out.roots.tolist(), out.kinds.tolist()))


# --- bytes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoded, decode",
    [
        (codec.encode_ack_batch(SPOUT, [INIT], [1], [2]), codec.decode_ack_batch),
        (codec.encode_ack_batch(SPOUT, [], [], []), codec.decode_ack_batch),
        (codec.encode_outcomes(SPOUT, [1], [OutcomeKind.COMPLETED]), codec.decode_outcomes),
    ],
    ids=["ack batch", "empty ack batch", "outcome batch"],
)
@pytest.mark.parametrize("extra", [b"\x00", b"\x01\x02\x03"])
def test_trailing_bytes_after_the_avro_body_make_the_record_bad(encoded, decode, extra):
    decode(encoded)
    with pytest.raises(DecodeError, match=f"{len(extra)} trailing bytes"):
        decode(encoded + extra)


def test_an_empty_ack_batch_is_valid_and_decides_nothing():
    batch = codec.decode_ack_batch(codec.encode_ack_batch(SPOUT, [], [], []))
    assert batch.sender == SPOUT and len(batch) == 0
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    _fold(table, [(INIT, 1, 5)], t=0)
    assert _fold(table, [], t=500, offset=1) == set()
    assert table.pending == 1 and table.stats.invalid_entries == 0
    # its timestamp is event time like any record's: a later empty batch moves the clock
    assert _fold(table, [], t=2000, offset=2) == {(1, OutcomeKind.TIMED_OUT)}


def test_the_ack_batch_layout_is_the_one_the_schema_documents():
    raw = codec.encode_ack_batch(-3, [INIT, ACK], [-1, 2], [5, -6])
    assert raw[0] == 1  # format version byte, then the Avro body
    assert raw[1:2] == b"\x05"  # sender -3, zigzag varint
    assert raw[2:3] == b"\x04"  # count 2
    assert raw[3:6] == b"\x04\x00\x01"  # kinds: 2 bytes, one per entry
    assert raw[6:7] == b"\x20" and raw[7:23] == np.array([-1, 2], "<i8").tobytes()
    assert raw[23:24] == b"\x20" and raw[24:40] == np.array([5, -6], "<i8").tobytes()
    assert len(raw) == 40


# --- where outcomes go ---------------------------------------------------------------------------


@given(owner=st.integers(-(2**63), 2**63 - 1).filter(bool), partitions=st.integers(1, 64))
def test_outcomes_go_to_spout_id_mod_p_read_unsigned(owner, partitions):
    listener = OutcomeListener(bootstrap_servers="unused", topics=TopologyTopics("t"))
    listener._partitions = partitions  # what start() reads from the broker
    assert listener.partition_of(owner) == (owner % 2**64) % partitions


def test_p_defaults_to_the_acker_count_and_is_part_of_the_topology_shape():
    assert TopologyTopics("t", ackers=3).shapes()["t.outcomes"] == 3
    assert TopologyTopics("t", ackers=0).shapes()["t.outcomes"] == 1
    assert TopologyTopics("t", ackers=3, outcome_partitions=8).shapes()["t.outcomes"] == 8


def test_the_oversize_threshold_default_is_100000_entries():
    assert inspect.signature(AckerWorker).parameters["max_entries_per_record"].default == 100_000


# --- deadlines -----------------------------------------------------------------------------------


def test_the_deadline_starts_at_the_partition_clock_not_the_records_own_timestamp():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    _fold(table, [(INIT, 1, 5)], t=10_000)
    _fold(table, [(INIT, 2, 5)], t=0, offset=1)  # an older timestamp: the clock stays at 10_000
    assert _expire(table, 11_999) == set()
    assert _expire(table, 12_000) == {(1, OutcomeKind.TIMED_OUT), (2, OutcomeKind.TIMED_OUT)}


def test_reset_timeout_restarts_the_whole_timeout_from_its_own_time_and_does_not_add_up():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    _fold(table, [(INIT, 1, 5), (INIT, 2, 5)], t=0)
    _fold(table, [(RESET, 1, 0), (RESET, 1, 0), (RESET, 2, 0)], sender=BOLT, t=900, offset=1)
    _fold(table, [(RESET, 2, 0)], sender=BOLT, t=900, offset=2)  # a second one at the same time
    # touched at 900: deadline bucket (900 + 1000) // 1000 = 1, expires once the clock reaches 2000
    assert _expire(table, 1999) == set()
    assert _expire(table, 2000) == {(1, OutcomeKind.TIMED_OUT), (2, OutcomeKind.TIMED_OUT)}


def test_ack_and_fail_entries_do_not_move_the_deadline():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    _fold(table, [(INIT, 1, 5), (INIT, 2, 7)], t=0)
    _fold(table, [(ACK, 1, 3)], sender=BOLT, t=900, offset=1)
    assert _expire(table, 2000) == {(1, OutcomeKind.TIMED_OUT), (2, OutcomeKind.TIMED_OUT)}


# --- duplicated records --------------------------------------------------------------------------


def test_a_duplicated_init_record_completes_its_tree_before_any_ack():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    init = [(INIT, 1, 0b1010)]
    assert _fold(table, init, t=0, offset=0) == set()
    assert _fold(table, init, t=0, offset=1) == {(1, OutcomeKind.COMPLETED)}  # no bolt acked


def test_a_duplicated_ack_record_makes_its_tree_time_out():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    _fold(table, [(INIT, 1, 0b1010)], t=0)
    ack = [(ACK, 1, 0b1010)]
    assert _fold(table, ack, sender=BOLT, t=1, offset=1) == {(1, OutcomeKind.COMPLETED)}
    _fold(table, [(INIT, 2, 0b0110)], t=2, offset=2)
    assert _fold(table, [(ACK, 2, 0b0010)], sender=BOLT, t=3, offset=3) == set()
    assert _fold(table, [(ACK, 2, 0b0010)], sender=BOLT, t=3, offset=4) == set()  # the duplicate
    assert _fold(table, [(ACK, 2, 0b0100)], sender=BOLT, t=4, offset=5) == set()  # never zero
    assert _expire(table, 3000) == {(2, OutcomeKind.TIMED_OUT)}


def test_a_duplicated_fail_record_is_harmless():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    _fold(table, [(INIT, 1, 5)], t=0)
    fail = [(FAIL, 1, 0)]
    assert _fold(table, fail, sender=BOLT, t=1, offset=1) == {(1, OutcomeKind.FAILED)}
    # the copy finds no root: it waits for an INIT that never comes and expires silently, counted
    assert _fold(table, fail, sender=BOLT, t=1, offset=2) == set()
    assert _expire(table, 3000) == set()
    assert table.stats.failed == 1 and table.stats.expired_ownerless == 1 and table.pending == 0
