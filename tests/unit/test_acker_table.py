"""The acker's per-partition table (reliable_kafka.core.acker_table) against Storm's XOR rule and
a plain-dict reference model of the same semantics."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reliable_kafka.core.acker_fold as acker_fold
import reliable_kafka.core.acker_table as acker_table
from reliable_kafka.core.acker_table import AckerTable, Outcomes
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.errors import ConfigError, ReliableKafkaError
from reliable_kafka.testing.reference_acker import ReferenceAcker

INIT, ACK, FAIL, RESET = (int(k) for k in EventKind)
COMPLETED, FAILED, TIMED_OUT, RESET_NOTICE = (int(k) for k in OutcomeKind)
SPOUT, OTHER_SPOUT, BOLT = 7, 8, 100


def fold(
    table: AckerTable, entries, *, sender: int = SPOUT, t: int = 0, offset: int = 0, kinds_dtype=np.uint8
) -> set[tuple[int, int, int]]:
    """Fold (kind, root, val) entries; the decisions as a set of (root, owner, kind)."""
    kinds = np.array([e[0] for e in entries], dtype=kinds_dtype)
    roots = np.array([e[1] for e in entries], dtype=np.int64)
    vals = np.array([e[2] for e in entries], dtype=np.int64)
    return as_set(table.fold(kinds, roots, vals, sender=sender, event_time_ms=t, offset=offset))


def as_set(out: Outcomes) -> set[tuple[int, int, int]]:
    assert out.roots.dtype == np.int64 and out.owners.dtype == np.int64
    assert out.kinds.dtype == np.uint8
    decided = list(zip(out.roots.tolist(), out.owners.tolist(), out.kinds.tolist()))
    assert len(decided) == len(set(decided)), "a root decided twice in one call"
    return set(decided)


def to_int64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def ref_fold(ref: ReferenceAcker, entries, *, sender: int, t: int, offset: int) -> list:
    """Fold (kind, root, val) entries into the reference model."""
    return ref.fold(
        [e[0] for e in entries],
        [e[1] for e in entries],
        [e[2] for e in entries],
        sender=sender,
        event_time_ms=t,
        offset=offset,
    )


def check_stats(table: AckerTable, ref: ReferenceAcker) -> None:
    assert dataclasses.replace(table.stats, rebuilds=0) == ref.stats


# ------------------------------------------------------------------------------- XOR examples


def test_storm_example_spout_tuple_with_two_children_in_every_order():
    # Spout emits root r with edge e; the bolt emits children c1, c2 anchored to it and acks it
    # with e ^ c1 ^ c2; each child is acked with its own edge. Any order completes on the last.
    r, e, c1, c2 = 0x1111, 0x0F0F, 0x3C3C, 0x5A5A
    events = [(INIT, r, e), (ACK, r, e ^ c1 ^ c2), (ACK, r, c1), (ACK, r, c2)]
    for order in itertools.permutations(events):
        table = AckerTable()
        for i, event in enumerate(order):
            decided = fold(table, [event], sender=SPOUT if event[0] == INIT else BOLT, offset=i)
            if i < len(order) - 1:
                assert decided == set() and table.pending == 1
            else:
                assert decided == {(r, SPOUT, COMPLETED)}
        assert table.pending == 0 and table.low_offset() is None


def test_seed_003_worked_example_ack_vals_step_by_step():
    # Seed 003: msg1 anchored to 1001 and 1010; Bolt1 acks 1001 with child 1110 (ack val 0100),
    # Bolt2 acks 1010 with child 1111 (0001), Bolt3 acks both children (0).
    r = 42
    table = AckerTable()
    steps = [
        ((INIT, r, 0b1001 ^ 0b1010), 0b0011),
        ((ACK, r, 0b1001 ^ 0b1110), 0b0100),
        ((ACK, r, 0b1010 ^ 0b1111), 0b0001),
    ]
    for i, (event, ack_val) in enumerate(steps):
        assert fold(table, [event], offset=i) == set()
        assert table._state_of(r)["val"] == ack_val
    assert fold(table, [(ACK, r, 0b1110), (ACK, r, 0b1111)], sender=BOLT) == {(r, SPOUT, COMPLETED)}
    assert table._state_of(r) is None


def test_ack_before_init_completes_when_the_init_arrives():
    table = AckerTable()
    r, e, c = 5, 0x77, 0x99
    assert fold(table, [(ACK, r, e ^ c)], sender=BOLT) == set()
    assert fold(table, [(ACK, r, c)], sender=BOLT) == set()
    assert table._state_of(r) == {"val": e, "owner": None, "failed": False, "bucket": table._state_of(r)["bucket"]}
    assert fold(table, [(INIT, r, e)], sender=OTHER_SPOUT) == {(r, OTHER_SPOUT, COMPLETED)}


def test_fail_before_init_waits_for_the_owner():
    table = AckerTable()
    assert fold(table, [(FAIL, 9, 0)], sender=BOLT) == set()
    assert table.pending == 1 and table._state_of(9)["failed"]
    # The INIT's edge is still outstanding (val != 0), but the FAIL decides.
    assert fold(table, [(INIT, 9, 0x1234)], sender=SPOUT) == {(9, SPOUT, FAILED)}
    assert table.pending == 0 and table.stats.failed == 1


def test_fail_wins_over_completion_in_the_same_batch():
    table = AckerTable()
    assert fold(table, [(INIT, 3, 0xAB), (ACK, 3, 0xAB), (FAIL, 3, 0)]) == {(3, SPOUT, FAILED)}
    assert fold(table, [(INIT, 4, 0xAB)]) == set()
    assert fold(table, [(ACK, 4, 0xAB), (FAIL, 4, 0)], sender=BOLT) == {(4, SPOUT, FAILED)}


def test_fail_and_reset_vals_are_ignored():
    table = AckerTable()
    fold(table, [(INIT, 3, 0xAB)])
    assert fold(table, [(FAIL, 4, 0x55), (RESET, 3, 0x66)], sender=BOLT) == {(3, SPOUT, RESET_NOTICE)}
    assert table._state_of(3)["val"] == 0xAB and table._state_of(4)["val"] == 0
    assert fold(table, [(ACK, 3, 0xAB)], sender=BOLT) == {(3, SPOUT, COMPLETED)}


def test_multi_anchoring_completes_both_roots_only_after_the_last_ack():
    # Spout tuples a (root r1, edge ea) and b (root r2, edge eb). A bolt emits o anchored to
    # both (fresh edges x for a, y for b): o.anchors = {r1: x, r2: y}; acks a and b; then o.
    r1, r2, ea, eb, x, y = 101, 202, 0x10, 0x20, 0x40, 0x80
    table = AckerTable()
    fold(table, [(INIT, r1, ea)])
    fold(table, [(INIT, r2, eb)], sender=OTHER_SPOUT)
    assert fold(table, [(ACK, r1, ea ^ x)], sender=BOLT) == set()
    assert fold(table, [(ACK, r2, eb ^ y)], sender=BOLT) == set()
    assert fold(table, [(ACK, r1, x), (ACK, r2, y)], sender=BOLT) == {
        (r1, SPOUT, COMPLETED),
        (r2, OTHER_SPOUT, COMPLETED),
    }


def test_batch_with_the_same_root_many_times():
    rng = random.Random(3)
    edges = [rng.getrandbits(63) + 1 for _ in range(200)]
    root = 77
    # The spout tuple's ack creates all 200 children; every child is acked; all in one batch.
    entries = [(INIT, root, edges[0]), (ACK, root, edges[0] ^ np.bitwise_xor.reduce(edges[1:]))]
    entries += [(ACK, root, e) for e in edges[1:]]
    rng.shuffle(entries)
    table = AckerTable()
    assert fold(table, entries) == {(root, SPOUT, COMPLETED)}
    assert table.stats.entries_folded == len(entries) and table.stats.completed == 1
    # Without the INIT it stays pending with the INIT's edge outstanding.
    table = AckerTable()
    assert fold(table, [e for e in entries if e[0] != INIT], sender=BOLT) == set()
    assert table.pending == 1 and table._state_of(root)["val"] == edges[0]


def test_root_zero_and_unknown_kinds_are_skipped_and_counted():
    table = AckerTable()
    entries = [(INIT, 0, 5), (INIT, 1, 5), (4, 2, 5), (255, 3, 5), (ACK, 0, 1), (INIT, 4, 6)]
    assert fold(table, entries) == set()
    assert table.pending == 2 and table.stats.invalid_entries == 4
    assert table.stats.entries_folded == 2
    assert table._state_of(0) is None and table._state_of(2) is None
    assert fold(table, [(ACK, 1, 5), (ACK, 4, 6)], sender=BOLT) == {(1, SPOUT, COMPLETED), (4, SPOUT, COMPLETED)}
    # Signed kind columns: negatives are unknown kinds too.
    assert fold(table, [(-1, 9, 1), (INIT, 9, 1)], kinds_dtype=np.int64) == set()
    assert table.stats.invalid_entries == 5 and table.pending == 1
    # A batch of nothing but invalid entries changes nothing.
    assert fold(table, [(9, 5, 5), (INIT, 0, 1)]) == set()
    assert table.pending == 1 and table._audit() == []


def test_fold_rejects_columns_of_different_lengths():
    with pytest.raises(ValueError, match="one length"):
        AckerTable().fold(
            np.zeros(2, np.uint8), np.ones(3, np.int64), np.ones(3, np.int64), sender=1, event_time_ms=0, offset=0
        )


def test_config_is_checked_by_name():
    for kwargs, name in (
        ({"message_timeout_ms": 0}, "message_timeout_ms"),
        ({"buckets": 0}, "buckets"),
        ({"buckets": 31}, "buckets"),
        ({"initial_capacity": 0}, "initial_capacity"),
    ):
        with pytest.raises(ConfigError, match=name):
            AckerTable(**kwargs)


def test_owner_ids_are_not_confused_with_owner_indices():
    # Task id 0 is a valid owner (index 0 means "no INIT yet" inside the table).
    table = AckerTable()
    assert fold(table, [(INIT, 1, 9)], sender=0) == set()
    assert fold(table, [(ACK, 1, 9)], sender=BOLT) == {(1, 0, COMPLETED)}
    assert fold(table, [(INIT, 2, 9)], sender=-(2**63)) == set()
    assert fold(table, [(ACK, 2, 9)], sender=BOLT) == {(2, -(2**63), COMPLETED)}


def test_by_owner_groups_decisions_per_spout():
    table = AckerTable()
    fold(table, [(INIT, r, r) for r in (1, 2, 3)], sender=SPOUT)
    fold(table, [(INIT, r, r) for r in (4, 5)], sender=OTHER_SPOUT)
    out = table.fold(
        np.array([ACK, ACK, ACK, FAIL, ACK], np.uint8),
        np.array([1, 4, 3, 5, 2]),
        np.array([1, 4, 3, 0, 2]),
        sender=BOLT,
        event_time_ms=0,
        offset=3,
    )
    groups = out.by_owner()
    assert set(groups) == {SPOUT, OTHER_SPOUT}
    roots, kinds = groups[SPOUT]
    assert sorted(roots.tolist()) == [1, 2, 3] and set(kinds.tolist()) == {COMPLETED}
    roots, kinds = groups[OTHER_SPOUT]
    assert dict(zip(roots.tolist(), kinds.tolist())) == {4: COMPLETED, 5: FAILED}
    assert Outcomes.empty().by_owner() == {} and len(Outcomes.empty()) == 0


def test_fold_records_matches_folding_one_by_one_even_for_a_late_stray_ack():
    batches = [
        ([(INIT, 1, 5), (INIT, 2, 6)], SPOUT),
        ([(ACK, 1, 5)], BOLT),
        ([(ACK, 1, 9), (ACK, 2, 6)], BOLT),
        ([(FAIL, 3, 0)], BOLT),
        ([(INIT, 3, 1)], OTHER_SPOUT),
    ]
    one_by_one = AckerTable()
    want = set()
    for i, (entries, sender) in enumerate(batches):
        want |= fold(one_by_one, entries, sender=sender, offset=i)
    table = AckerTable()
    out = table.fold_records(records_of(batches, 0))
    assert as_set(out) == want == {(1, SPOUT, COMPLETED), (2, SPOUT, COMPLETED), (3, OTHER_SPOUT, FAILED)}
    # Root 1 completed with record 1; record 2's stray ack starts a new, ownerless entry.
    assert table.pending == 1 and table._state_of(1) == one_by_one._state_of(1)
    assert table.stats == one_by_one.stats
    # Decided roots leave before new ones come: the low point is the stray ack's record, 2,
    # where a replay must start to rebuild that entry.
    assert one_by_one.low_offset() == table.low_offset() == 2


def test_fold_records_expires_between_records_across_a_bucket_boundary():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    records = (
        records_of([([(INIT, 1, 5)], SPOUT)], 0, t=0)
        + records_of([([(ACK, 1, 5)], BOLT)], 1, t=2000)
        + records_of([([(INIT, 2, 5)], SPOUT)], 2, t=2500)
    )
    assert as_set(table.fold_records(records)) == {(1, SPOUT, TIMED_OUT)}
    assert table.pending == 2 and table._state_of(1)["owner"] is None
    assert table.fold_records([]) == Outcomes.empty()


# ------------------------------------------------------------------------------------ timeouts


def test_reset_timeout_pushes_the_deadline():
    table = AckerTable(message_timeout_ms=30_000, buckets=4)  # buckets of 7.5 s
    fold(table, [(INIT, 1, 5), (INIT, 2, 5)], t=0)
    # Touched at 0: deadline bucket (0 + 30000) // 7500 = 4, expires once the clock is 37_500.
    # The owner hears of it (issue 9 item 5), so that its own backstop timer moves too.
    assert fold(table, [(RESET, 1, 0)], sender=BOLT, t=20_000) == {(1, SPOUT, RESET_NOTICE)}
    assert table.stats.reset_notices == 1
    assert as_set(table.advance(37_499)) == set()
    assert as_set(table.advance(37_500)) == {(2, SPOUT, TIMED_OUT)}
    # Root 1 was touched at 20_000: bucket 50_000 // 7500 = 6, expires at 52_500.
    assert as_set(table.advance(52_499)) == set() and table.pending == 1
    assert as_set(table.advance(52_500)) == {(1, SPOUT, TIMED_OUT)}
    assert table.stats.timed_out == 2 and table.pending == 0


def test_timeout_without_owner_expires_silently():
    table = AckerTable(message_timeout_ms=1000, buckets=2)
    fold(table, [(ACK, 1, 5)], sender=BOLT, t=0)
    fold(table, [(FAIL, 2, 0)], sender=BOLT, t=0)
    fold(table, [(INIT, 3, 5)], sender=SPOUT, t=0)
    assert as_set(table.advance(10_000)) == {(3, SPOUT, TIMED_OUT)}
    assert table.stats.expired_ownerless == 2 and table.stats.timed_out == 1
    assert table.pending == 0 and table.low_offset() is None


def test_late_init_moves_the_deadline():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    fold(table, [(ACK, 1, 5)], sender=BOLT, t=0)  # created at 0: expires at 2000
    fold(table, [(INIT, 1, 6)], t=1500)  # INIT at 1500: expires at 3000
    assert as_set(table.advance(2999)) == set()
    assert as_set(table.advance(3000)) == {(1, SPOUT, TIMED_OUT)}


def test_expiry_comes_before_the_batch_that_moved_the_clock():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    fold(table, [(INIT, 1, 5)], t=0)
    # The ack arrives at 2000, when the deadline has passed: TIMED_OUT, and the ack starts a
    # new, ownerless entry that expires silently later.
    assert fold(table, [(ACK, 1, 5)], sender=BOLT, t=2000) == {(1, SPOUT, TIMED_OUT)}
    assert table.pending == 1 and table._state_of(1)["owner"] is None
    assert as_set(table.advance(10_000)) == set() and table.stats.expired_ownerless == 1


def test_clock_never_moves_back():
    table = AckerTable(message_timeout_ms=1000, buckets=1)
    fold(table, [(INIT, 1, 5)], t=5000)
    assert as_set(table.advance(100)) == set() and table.clock_ms == 5000
    # A record with an older timestamp is folded at the partition clock: deadline from 5000.
    fold(table, [(INIT, 2, 5)], t=10)
    assert as_set(table.advance(6999)) == set()
    assert as_set(table.advance(7000)) == {(1, SPOUT, TIMED_OUT), (2, SPOUT, TIMED_OUT)}


@given(
    timeout=st.integers(1, 100_000),
    buckets=st.integers(1, 30),
    start=st.integers(-(10**12), 10**12),
    touch=st.sampled_from([INIT, ACK, RESET, FAIL]),
)
def test_expiry_bound_is_timeout_to_timeout_plus_one_bucket(timeout, buckets, start, touch):
    table = AckerTable(message_timeout_ms=timeout, buckets=buckets)
    width = table.bucket_width_ms
    assert width * buckets >= timeout > (width - 1) * buckets  # ceil(timeout / buckets)
    fold(table, [(touch, 1, 5)], sender=SPOUT, t=start)
    due = ((start + timeout) // width + 1) * width
    assert start + timeout < due <= start + timeout + width
    assert as_set(table.advance(start + timeout)) == set() and table.pending == 1
    assert as_set(table.advance(due - 1)) == set() and table.pending == 1
    expect = {(1, SPOUT, TIMED_OUT)} if touch == INIT else set()
    assert as_set(table.advance(due)) == expect and table.pending == 0


# ------------------------------------------------------------------------------ commit low point


def test_low_offset_tracks_the_oldest_pending_bucket():
    table = AckerTable(message_timeout_ms=30_000, buckets=4)
    assert table.low_offset() is None
    fold(table, [(INIT, 1, 5)], t=0, offset=10)
    fold(table, [(INIT, 2, 5)], t=100, offset=20)  # same bucket as root 1
    fold(table, [(INIT, 3, 5)], t=8000, offset=30)  # a later bucket
    assert table.low_offset() == 10
    fold(table, [(ACK, 1, 5)], sender=BOLT, t=8000, offset=31)
    assert table.low_offset() == 10  # root 2 still holds that bucket
    fold(table, [(ACK, 2, 5)], sender=BOLT, t=8000, offset=32)
    assert table.low_offset() == 30  # caught up
    fold(table, [(ACK, 3, 5)], sender=BOLT, t=8000, offset=33)
    assert table.low_offset() is None


def test_reset_carries_the_low_offset_to_the_new_bucket():
    table = AckerTable(message_timeout_ms=30_000, buckets=4)
    fold(table, [(INIT, 1, 5)], t=0, offset=10)
    fold(table, [(INIT, 2, 5)], t=0, offset=11)
    fold(table, [(RESET, 1, 0)], sender=BOLT, t=9000, offset=50)
    fold(table, [(ACK, 2, 5)], sender=BOLT, t=9000, offset=51)
    # Root 1 (first seen at 10) now lives in the newest bucket, which must not claim 50.
    assert table.low_offset() == 10
    assert as_set(table.advance(37_500)) == set()  # the old bucket expired, empty
    assert table.low_offset() == 10
    fold(table, [(ACK, 1, 5)], sender=BOLT, t=37_500, offset=60)
    assert table.low_offset() is None


# ------------------------------------------------------------------------------- table growth


def test_growth_under_many_roots_and_drain():
    table = AckerTable(initial_capacity=16)
    rng = np.random.default_rng(1)
    roots = np.unique(rng.integers(-(2**63), 2**63 - 1, 60_000, dtype=np.int64))
    roots = roots[roots != 0]
    edges = rng.integers(1, 2**62, len(roots), dtype=np.int64)
    small_bytes = table.nbytes
    for i in range(0, len(roots), 700):
        sl = slice(i, i + 700)
        out = table.fold(
            np.zeros(len(roots[sl]), np.uint8), roots[sl], edges[sl], sender=SPOUT, event_time_ms=0, offset=i
        )
        assert len(out) == 0
    assert table.pending == len(roots) and table.nbytes > small_bytes
    assert table.stats.rebuilds > 5 and table._audit() == []
    # 18 bytes a slot at a load of 0.68 or more: about 27 bytes a pending root at most.
    assert table.nbytes / table.pending <= 27.0
    peak = table.capacity
    perm = rng.permutation(len(roots))
    for i in range(0, len(roots), 900):
        idx = perm[i : i + 900]
        out = table.fold(
            np.ones(len(idx), np.uint8), roots[idx], edges[idx], sender=BOLT, event_time_ms=1, offset=100_000 + i
        )
        assert sorted(out.roots.tolist()) == sorted(roots[idx].tolist())
        assert set(out.kinds.tolist()) == {COMPLETED} and set(out.owners.tolist()) == {SPOUT}
    assert table.pending == 0 and table.low_offset() is None and table._audit() == []
    assert table.capacity < peak / 10  # shrank as the roots went


def test_churn_at_high_load_keeps_every_root_findable():
    rng = np.random.default_rng(7)
    table = AckerTable(initial_capacity=8 * 1009)  # 1009 groups: fill to ~0.8 without growth
    live: dict[int, int] = {}
    for step in range(120):
        new = rng.integers(1, 2**63 - 1, 60 if len(live) < 6400 else 40, dtype=np.int64)
        vals = rng.integers(1, 2**62, len(new), dtype=np.int64)
        table.fold(np.zeros(len(new), np.uint8), new, vals, sender=SPOUT, event_time_ms=0, offset=step)
        live.update(zip(new.tolist(), vals.tolist()))
        if len(live) > 6000:
            done = rng.choice(list(live), 40, replace=False)
            out = table.fold(
                np.ones(len(done), np.uint8),
                done.astype(np.int64),
                np.array([live.pop(int(r)) for r in done], np.int64),
                sender=BOLT,
                event_time_ms=0,
                offset=step,
            )
            assert len(out) == len(done)
    assert table.pending == len(live) and table._overflow.any()
    assert table._audit() == []
    for root in rng.choice(list(live), 200, replace=False):
        assert table._state_of(int(root))["val"] == live[int(root)]


def test_owner_indices_are_reused_once_their_roots_are_gone(monkeypatch):
    monkeypatch.setattr(acker_table, "_MAX_OWNER_INDEX", 3)
    table = AckerTable()
    for spout in (1, 2, 3):
        fold(table, [(INIT, spout * 10, 5)], sender=spout)
    fold(table, [(ACK, 10, 5), (ACK, 20, 5)], sender=BOLT)
    fold(table, [(INIT, 40, 5)], sender=4)  # index space full: spouts 1 and 2 forgotten
    fold(table, [(INIT, 50, 5)], sender=5)
    assert fold(table, [(ACK, 30, 5), (ACK, 40, 5), (ACK, 50, 5)], sender=BOLT) == {
        (30, 3, COMPLETED),
        (40, 4, COMPLETED),
        (50, 5, COMPLETED),
    }
    for spout in (6, 7, 8):
        fold(table, [(INIT, spout * 10, 5)], sender=spout)
    with pytest.raises(ReliableKafkaError, match="spout tasks"):
        fold(table, [(INIT, 90, 5)], sender=9)


def test_owner_index_widens_past_255_spouts_and_keeps_every_owner():
    table = AckerTable()
    assert table._owner.dtype == np.uint8
    spouts = range(1000, 1300)  # 300 spout tasks own pending roots at once
    for spout in spouts:
        assert fold(table, [(INIT, spout, 5)], sender=spout) == set()
    assert table._owner.dtype == np.uint16 and table._audit() == []
    table._rebuild(table.pending)  # the width survives a rebuild
    assert table._owner.dtype == np.uint16
    assert fold(table, [(ACK, spout, 5) for spout in spouts], sender=BOLT) == {
        (spout, spout, COMPLETED) for spout in spouts
    }


def test_owner_index_stays_one_byte_when_a_compaction_makes_room():
    table = AckerTable()
    for spout in range(1, 300):  # earlier incarnations: each root completes before the next
        fold(table, [(INIT, spout, 5)], sender=spout)
        assert fold(table, [(ACK, spout, 5)], sender=BOLT) == {(spout, spout, COMPLETED)}
    assert table._owner.dtype == np.uint8 and table._owner_compactions >= 1


# --------------------------------------------------------------------------- property: trees


def random_trees(rnd: random.Random, n_roots: int):
    """Events of random tuple trees built with the edge rule (docs/design.md section 2)."""

    def fresh() -> int:
        return to_int64(rnd.getrandbits(64) or 1)

    events = []  # (kind, root, val, sender)
    open_tuples = []  # [anchors: {root: id}, ack_val]
    owner = {}
    for _ in range(n_roots):
        root, edge, spout = fresh(), fresh(), rnd.choice([SPOUT, OTHER_SPOUT])
        owner[root] = spout
        events.append((INIT, root, edge, spout))
        open_tuples.append([{root: edge}, 0])
    budget = n_roots * 6
    while open_tuples:
        a = open_tuples.pop(rnd.randrange(len(open_tuples)))
        anchors = [a]
        if open_tuples and rnd.random() < 0.3:  # multi-anchoring: a second input
            anchors.append(rnd.choice(open_tuples))
        for _ in range(rnd.choice([0, 0, 1, 2, 3]) if budget > 0 else 0):
            budget -= 1
            child: dict[int, int] = {}
            for anchor in anchors:
                edge = fresh()
                anchor[1] ^= edge
                for root in anchor[0]:
                    child[root] = child.get(root, 0) ^ edge
            open_tuples.append([child, 0])
        for root, tuple_id in a[0].items():
            events.append((ACK, root, tuple_id ^ a[1], BOLT))
    return events, owner


def batches_of(rnd: random.Random, events):
    """Split events into batches at random points and wherever the INIT sender changes."""
    batches, current, sender = [], [], None
    for event in events:
        if current and (rnd.random() < 0.3 or (event[0] == INIT and sender not in (None, event[3]))):
            batches.append((current, sender if sender is not None else BOLT))
            current, sender = [], None
        current.append(event)
        if event[0] == INIT:
            sender = event[3]
    if current:
        batches.append((current, sender if sender is not None else BOLT))
    return batches


def records_of(batches, first_offset: int, t: int = 0):
    """fold_records input for (entries, sender) batches."""
    return [
        (
            np.array([e[0] for e in batch], np.uint8),
            np.array([e[1] for e in batch], np.int64),
            np.array([e[2] for e in batch], np.int64),
            sender,
            t,
            first_offset + i,
        )
        for i, (batch, sender) in enumerate(batches)
    ]


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_roots=st.integers(1, 12),
    capacity=st.sampled_from([8, 1024]),
    records_per_call=st.sampled_from([1, 1, 3, 50]),
)
def test_trees_complete_exactly_when_their_last_event_is_folded(seed, n_roots, capacity, records_per_call):
    rnd = random.Random(seed)
    events, owner = random_trees(rnd, n_roots)
    rnd.shuffle(events)  # any interleaving, not just causal
    last_index = {}
    for i, event in enumerate(events):
        last_index[event[1]] = i
    table = AckerTable(initial_capacity=capacity)
    batches = [([(k, r, v) for k, r, v, _ in batch], sender) for batch, sender in batches_of(rnd, events)]
    folded = 0
    for first in range(0, len(batches), records_per_call):
        call = batches[first : first + records_per_call]
        if records_per_call == 1:
            decided = fold(table, call[0][0], sender=call[0][1], offset=first)
        else:
            decided = as_set(table.fold_records(records_of(call, first)))
        size = sum(len(batch) for batch, _ in call)
        folded += size
        finished = {r for r, i in last_index.items() if folded - size <= i < folded}
        assert decided == {(r, owner[r], COMPLETED) for r in finished}
    assert table.pending == 0 and table.low_offset() is None
    assert table.stats.completed == n_roots and table._audit() == []


# ----------------------------------------------------- property: equivalence with the reference

kind_strategy = st.one_of(
    st.sampled_from([INIT, ACK, ACK, FAIL, RESET]), st.sampled_from([4, 9, 255])
)  # unknown kinds too
entry_strategy = st.tuples(kind_strategy, st.integers(-3, 12), st.integers(0, 3))
operation = st.one_of(
    st.tuples(
        st.just("fold"),
        st.lists(entry_strategy, max_size=12),
        st.sampled_from([0, SPOUT, -5]),
        st.one_of(st.just(0), st.integers(-5, 40)),
        st.booleans(),
    ),
    st.tuples(st.just("advance"), st.integers(-5, 60)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    timeout=st.integers(1, 40),
    buckets=st.integers(1, 5),
    start=st.integers(-100, 100),
    ops=st.lists(operation, max_size=40),
    seed=st.integers(0, 2**32),
    records_per_call=st.sampled_from([1, 1, 2, 5, 40]),
)
def test_equivalent_to_the_reference_model(timeout, buckets, start, ops, seed, records_per_call):
    rng = np.random.default_rng(seed)
    table = AckerTable(message_timeout_ms=timeout, buckets=buckets, initial_capacity=8)
    ref = ReferenceAcker(message_timeout_ms=timeout, buckets=buckets)
    now = start
    calls = []  # consecutive folds go to fold_records together, up to records_per_call
    for offset, op in enumerate(ops):
        if op[0] == "fold":
            _, entries, sender, dt, crowd = op
            if crowd:  # plus a crowd of fresh roots, to make the table grow, rehash and shrink
                entries = entries + [
                    (int(k), int(r), int(v))
                    for k, r, v in zip(
                        rng.choice([INIT, ACK, FAIL], 40),
                        rng.integers(-(2**63), 2**63 - 1, 40),
                        rng.integers(0, 2**62, 40),
                    )
                ]
            now += dt
            if calls and calls[-1][0] == "fold" and len(calls[-1][1]) < records_per_call:
                calls[-1][1].append((entries, sender, now, offset))
            else:
                calls.append(("fold", [(entries, sender, now, offset)]))
        else:
            now += op[1]
            calls.append(("advance", now))
    for kind, arg in calls:
        if kind == "advance":
            got, want = sorted(as_set(table.advance(arg))), sorted(ref.advance(arg))
        elif records_per_call == 1:
            entries, sender, t, offset = arg[0]
            got = sorted(fold(table, entries, sender=sender, t=t, offset=offset))
            want = sorted(ref_fold(ref, entries, sender=sender, t=t, offset=offset))
        else:
            out = table.fold_records(
                [
                    (
                        np.array([e[0] for e in entries], np.uint8),
                        np.array([e[1] for e in entries], np.int64),
                        np.array([e[2] for e in entries], np.int64),
                        sender,
                        t,
                        offset,
                    )
                    for entries, sender, t, offset in arg
                ]
            )
            got = sorted(zip(out.roots.tolist(), out.owners.tolist(), out.kinds.tolist()))
            want = sorted(
                d
                for entries, sender, t, offset in arg
                for d in ref_fold(ref, entries, sender=sender, t=t, offset=offset)
            )
        assert got == want
        assert table.pending == ref.pending
        truth = ref.low_bound()
        low = table.low_offset()
        assert (low is None) == (truth is None)
        assert low is None or low <= truth
    check_stats(table, ref)
    assert table._audit() == []
    for root, entry in ref.entries.items():
        state = table._state_of(root)
        assert (state["val"], state["owner"], state["failed"]) == entry.state()[:3]


@settings(max_examples=100, deadline=None)
@given(
    groups=st.sampled_from([2, 5, 13, 31]),
    seed=st.integers(0, 2**32),
    counts=st.lists(st.integers(1, 30), min_size=1, max_size=80),
)
def test_table_stays_sound_under_churn_near_its_fill_limit(groups, seed, counts):
    # Small tables kept near their fill limit: keys spill past both choices, overflow counts
    # go up and down; every pending root stays findable and its val intact.
    rng = np.random.default_rng(seed)
    table = AckerTable(initial_capacity=8 * groups)
    live: dict[int, int] = {}
    for offset, count in enumerate(counts):
        count = min(count, int(0.8 * table.capacity))
        if live and len(live) + count > 0.84 * table.capacity:
            done = rng.choice(list(live), min(count, len(live)), replace=False).astype(np.int64)
            vals = np.array([live.pop(int(r)) for r in done], np.int64)
            out = table.fold(np.ones(len(done), np.uint8), done, vals, sender=BOLT, event_time_ms=0, offset=offset)
            assert sorted(out.roots.tolist()) == sorted(done.tolist())
        roots = rng.integers(-(2**63), 2**63 - 1, count, dtype=np.int64)
        vals = rng.integers(1, 2**62, count, dtype=np.int64)
        assert (
            len(table.fold(np.zeros(count, np.uint8), roots, vals, sender=SPOUT, event_time_ms=0, offset=offset)) == 0
        )
        live.update(zip(roots.tolist(), vals.tolist()))
        assert table.pending == len(live)
        assert table._audit() == []
    for root in list(live)[:50]:
        assert table._state_of(root)["val"] == live[root]


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.lists(
                st.tuples(st.sampled_from([INIT, ACK, ACK, FAIL, RESET]), st.integers(1, 6), st.integers(0, 3)),
                max_size=6,
            ),
            st.sampled_from([SPOUT, OTHER_SPOUT]),
            st.integers(0, 3),
        ),
        max_size=12,
    ),
    timeout=st.sampled_from([5, 1000]),
)
def test_fold_records_decides_as_folding_one_by_one(records, timeout):
    one_by_one = AckerTable(message_timeout_ms=timeout, buckets=2, initial_capacity=8)
    together = AckerTable(message_timeout_ms=timeout, buckets=2, initial_capacity=8)
    ref = ReferenceAcker(message_timeout_ms=timeout, buckets=2)
    want, t = [], 0
    calls = []
    for offset, (entries, sender, dt) in enumerate(records):
        t += dt
        want += sorted(fold(one_by_one, entries, sender=sender, t=t, offset=offset))
        ref_fold(ref, entries, sender=sender, t=t, offset=offset)
        calls.append(
            (
                np.array([e[0] for e in entries], np.uint8),
                np.array([e[1] for e in entries], np.int64),
                np.array([e[2] for e in entries], np.int64),
                sender,
                t,
                offset,
            )
        )
    out = together.fold_records(calls)
    assert sorted(zip(out.roots.tolist(), out.owners.tolist(), out.kinds.tolist())) == sorted(want)
    assert together.stats == one_by_one.stats and together.pending == one_by_one.pending
    for root in range(1, 7):
        assert together._state_of(root) == one_by_one._state_of(root)
    for table in (together, one_by_one):  # never above a pending root's first record
        low, truth = table.low_offset(), ref.low_bound()
        assert (low is None) == (truth is None)
        assert low is None or low <= truth
    assert together._audit() == []


# --------------------------------------- property: realistic traffic, grouped, against the model


def traffic(rnd: random.Random, n_roots: int):
    """Records of tree traffic (docs/design.md section 2) with what real streams hold besides: a FAIL in
    place of some acks with the sibling's ACK after it, a FAIL before its INIT, RESET_TIMEOUTs,
    duplicated records, and time steps that let roots time out. (entries, sender, dt) each."""
    events, _ = random_trees(rnd, n_roots)
    out = []
    for kind, root, val, sender in events:
        if kind == ACK and rnd.random() < 0.1:  # this tuple fails; a sibling's ack still comes
            out.append((FAIL, root, 0, BOLT))
            if rnd.random() < 0.5:  # a sibling's bolt, still at work, resets the timeout
                out.append((RESET, root, 0, BOLT))
            out.append((ACK, root, to_int64(rnd.getrandbits(64)), BOLT))
            continue
        if rnd.random() < 0.1:
            out.append((RESET, root, 0, BOLT))
        out.append((kind, root, val, sender))
    if rnd.random() < 0.3:  # any order: a FAIL or an ACK before its INIT
        rnd.shuffle(out)
    records = [([(k, r, v) for k, r, v, _ in batch], sender) for batch, sender in batches_of(rnd, out)]
    if records and rnd.random() < 0.3:  # a duplicated record (a non-idempotent sender)
        i = rnd.randrange(len(records))
        records.insert(i + rnd.randint(0, 3), records[i])
    return [(entries, sender, rnd.choice([0, 0, 0, 1, 5, 40])) for entries, sender in records]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    n_roots=st.integers(1, 15),
    per_call=st.sampled_from([1, 3, 16]),
    timeout=st.sampled_from([20, 10_000]),
    buckets=st.sampled_from([1, 4]),
    capacity=st.sampled_from([8, 1024]),
)
def test_grouped_traffic_with_fails_resets_duplicates_and_timeouts_matches_the_model(
    seed, n_roots, per_call, timeout, buckets, capacity
):
    rnd = random.Random(seed)
    table = AckerTable(message_timeout_ms=timeout, buckets=buckets, initial_capacity=capacity)
    ref = ReferenceAcker(message_timeout_ms=timeout, buckets=buckets)
    records, t = [], 0
    for offset, (entries, sender, dt) in enumerate(traffic(rnd, n_roots)):
        t += dt
        records.append(
            (
                np.array([e[0] for e in entries], np.uint8),
                np.array([e[1] for e in entries], np.int64),
                np.array([e[2] for e in entries], np.int64),
                sender,
                t,
                offset,
            )
        )
    for first in range(0, len(records), per_call):
        call = records[first : first + per_call]
        got = sorted(zip(*(c.tolist() for c in astuple(table.fold_records(call)))))
        assert got == sorted(ref.fold_records(call))
        assert table.pending == ref.pending
        low, truth = table.low_offset(), ref.low_bound()
        assert (low is None) == (truth is None) and (low is None or low <= truth)
    t += 2 * timeout + 1
    assert sorted(zip(*(c.tolist() for c in astuple(table.advance(t))))) == sorted(ref.advance(t))
    check_stats(table, ref)
    assert table.pending == ref.pending == 0 and table._audit() == []


def astuple(out: Outcomes):
    return out.roots, out.owners, out.kinds


def test_fail_then_a_siblings_ack_in_one_group_is_folded_in_one_pass(monkeypatch):
    # Issue 11: a quarter of fold groups used to drop to record-by-record folding here, and
    # then to a second pass over the table for the entries after the decision.
    created, lookups = [], []

    class CountingGroup(acker_table.Group):
        def __init__(self, *args):
            created.append(len(args[1]))
            super().__init__(*args)

    monkeypatch.setattr(acker_table, "Group", CountingGroup)
    find = AckerTable._find
    monkeypatch.setattr(AckerTable, "_find", lambda self, keys, *a: lookups.append(len(keys)) or find(self, keys, *a))
    r, e, c1, c2 = 0x51, 0x0E, 0x0C1, 0x0C2
    batches = [
        ([(INIT, r, e)] + [(INIT, 100 + i, i + 1) for i in range(20)], SPOUT),
        ([(ACK, r, e ^ c1 ^ c2)], BOLT),
        ([(FAIL, r, 0)], BOLT),
    ]  # child 1 fails: FAILED here
    batches += [([(ACK, 100 + i, i + 1)], BOLT) for i in range(10)]
    batches += [([(ACK, r, c2)], BOLT)]  # the sibling's ack comes after
    table = AckerTable()
    ref = ReferenceAcker(message_timeout_ms=30_000, buckets=4)
    records = records_of(batches, 0)
    decided = as_set(table.fold_records(records))
    assert decided == set(ref.fold_records(records))
    assert (r, SPOUT, FAILED) in decided and len(decided) == 11
    assert created == [sum(len(b) for b, _ in batches)]  # the late ACK is in the same pass
    assert lookups == [21]  # each distinct root looked up once
    assert table.pending == ref.pending == 11  # ten INITs unacked, the late ACK's new entry
    assert table._state_of(r) == {"val": c2, "owner": None, "failed": False, "bucket": table._state_of(r)["bucket"]}


def test_a_root_decided_twice_in_one_group_is_decided_twice_in_one_pass(monkeypatch):
    # FAILED at its FAIL; the INIT and ACK of a replayed record after it begin a new entry that
    # completes within the same group: both decisions, each root looked up once.
    lookups = []
    find = AckerTable._find
    monkeypatch.setattr(AckerTable, "_find", lambda self, keys, *a: lookups.append(len(keys)) or find(self, keys, *a))
    r, e = 0x77, 0x1E
    batches = [
        ([(INIT, r, e), (INIT, 5, 6)], SPOUT),
        ([(FAIL, r, 0), (RESET, 5, 0)], BOLT),
        ([(INIT, r, e)], OTHER_SPOUT),
        ([(ACK, r, e), (RESET, r, 0)], BOLT),
    ]
    table = AckerTable()
    ref = ReferenceAcker(message_timeout_ms=30_000, buckets=4)
    records = records_of(batches, 0)
    got = sorted(zip(*(c.tolist() for c in astuple(table.fold_records(records)))))
    assert got == sorted(ref.fold_records(records))
    assert got == sorted([(r, SPOUT, FAILED), (r, OTHER_SPOUT, COMPLETED), (5, SPOUT, RESET_NOTICE)])
    assert lookups == [2] and table.pending == ref.pending == 1
    check_stats(table, ref)


@pytest.mark.parametrize("scratch_bits", [1, 3])
def test_the_model_holds_when_roots_meet_in_the_fold_scratch(monkeypatch, scratch_bits):
    # The fold finds equal roots with a scratch hash; a tiny one makes every root meet others
    # there and go round again. The property tests above must hold just the same.
    same_root = acker_fold.same_root
    monkeypatch.setattr(acker_fold, "same_root", lambda mixed: same_root(mixed, scratch_bits=scratch_bits))
    test_equivalent_to_the_reference_model()
    test_grouped_traffic_with_fails_resets_duplicates_and_timeouts_matches_the_model()
    test_fold_records_decides_as_folding_one_by_one()


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(-4, 40), max_size=300), scratch_bits=st.integers(1, 12))
def test_same_root_names_one_representative_per_root(keys, scratch_bits):
    roots = np.array(keys, np.int64)
    mixed = roots.view(np.uint64) * acker_fold.MIX
    rep = acker_fold.same_root(mixed, scratch_bits=scratch_bits)
    assert np.array_equal(roots[rep], roots)  # a representative holds the same root
    assert np.array_equal(rep[rep], rep)  # ... and represents itself
    assert len(np.unique(rep)) == len(set(keys))  # one per distinct root


# ----------------------------------------------------- the reference model itself


def test_reference_acker_decides_as_documented():
    model = ReferenceAcker(message_timeout_ms=100, buckets=2)  # buckets of 50 ms
    init, ack, fail = 0, 1, 2
    assert model.fold([ack], [7], [5], sender=1, event_time_ms=0, offset=0) == []
    assert model.fold([init], [7], [5], sender=9, event_time_ms=10, offset=1) == [(7, 9, 0)]
    assert model.fold([fail, ack], [8, 6], [0, 3], sender=1, event_time_ms=20, offset=2) == []
    assert model.low_bound() == 2 and model.pending == 2
    assert model.fold([init], [8], [4], sender=9, event_time_ms=30, offset=3) == [(8, 9, 1)]
    assert model.advance(149) == []  # root 6 seen at 20: deadline bucket (20+100)//50 = 2
    assert model.advance(150) == []  # ownerless: expires silently
    assert model.pending == 0 and model.low_bound() is None
    reset = 3  # a RESET_TIMEOUT is forwarded to the owner once it is known
    assert model.fold([reset], [5], [0], sender=1, event_time_ms=200, offset=4) == []
    assert model.fold([init, reset], [5, 5], [4, 0], sender=9, event_time_ms=200, offset=5) == [(5, 9, 3)]
    assert model.stats.reset_notices == 1 and model.pending == 1


def test_message_timeout_ms_is_the_name():
    assert AckerTable(message_timeout_ms=1234).message_timeout_ms == 1234
    assert ReferenceAcker(message_timeout_ms=1234, buckets=2).timeout_ms == 1234
    with pytest.raises(TypeError):
        AckerTable(timeout_ms=99)  # its old name, gone before the first release


@given(
    st.lists(
        st.tuples(st.sampled_from([3, 7, -5, 2**62]), st.integers(1, 2**63 - 1), st.integers(0, 3)),
        max_size=40,
    )
)
def test_outcomes_by_owner_keeps_each_owners_decisions_in_order(rows):
    """One record's worth per owner (by_owner), one owner or several, each in decision order."""
    outcomes = Outcomes(
        np.array([r[1] for r in rows], np.int64),
        np.array([r[0] for r in rows], np.int64),
        np.array([r[2] for r in rows], np.uint8),
    )
    expected: dict[int, list[tuple[int, int]]] = {}
    for owner, root, kind in rows:
        expected.setdefault(owner, []).append((root, kind))
    got = {owner: list(zip(roots.tolist(), kinds.tolist())) for owner, (roots, kinds) in outcomes.by_owner().items()}
    assert got == expected
