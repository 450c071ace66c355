"""The XOR edge rule: any tree built with anchor_child/ack_entries folds to zero exactly at the end."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.core.ack_packer import AckPacker
from reliable_kafka.core.anchors import Anchored, ack_entries, anchor_child, anchor_to_pairs, fail_roots, spout_root
from reliable_kafka.core.ids import new_id, partition_for_root
from reliable_kafka.core.kinds import EventKind


def _fold(entries):
    vals: dict[int, int] = {}
    for root, val in entries:
        vals[root] = vals.get(root, 0) ^ val
    return vals


@given(st.data())
def test_random_dag_xors_to_zero_only_when_every_tuple_is_acked(data):
    roots = [new_id() for _ in range(data.draw(st.integers(1, 3)))]
    sources = [spout_root(r) for r in roots]
    level = []
    for source in sources:
        for _ in range(data.draw(st.integers(1, 3))):
            level.append(Anchored(anchor_child([source])))
    events = [entry for source in sources for entry in ack_entries(source)]  # the INITs
    acked = []
    frontier = list(level)
    while frontier:
        parent_count = data.draw(st.integers(1, min(3, len(frontier))))
        parents = data.draw(st.lists(st.sampled_from(frontier), min_size=1, max_size=parent_count, unique_by=id))
        if data.draw(st.booleans()) and len(acked) < 20:
            frontier.append(Anchored(anchor_child(parents)))
        tuple_ = frontier.pop(0)
        acked.append(ack_entries(tuple_))
    # every tuple acked: all trees fold to zero
    assert all(v == 0 for v in _fold(events + [e for a in acked for e in a]).values())
    # leave one tuple un-acked: its trees are not zero
    if acked:
        missing = data.draw(st.integers(0, len(acked) - 1))
        partial = events + [e for i, a in enumerate(acked) if i != missing for e in a]
        folded = _fold(partial)
        assert any(folded.get(root, 0) != 0 for root, _ in acked[missing])


def test_distinct_edge_per_anchor_when_two_anchors_share_a_root():
    root = new_id()
    source = spout_root(root)
    a, b = Anchored(anchor_child([source])), Anchored(anchor_child([source]))
    child = Anchored(anchor_child([a, b]))
    assert child.anchors[root] != 0  # one shared edge would have cancelled itself
    events = ack_entries(source) + ack_entries(a) + ack_entries(b)
    assert _fold(events)[root] != 0
    assert _fold(events + ack_entries(child))[root] == 0


def test_multi_anchored_child_keeps_both_trees_open():
    r1, r2 = new_id(), new_id()
    s1, s2 = spout_root(r1), spout_root(r2)
    a, b = Anchored(anchor_child([s1])), Anchored(anchor_child([s2]))
    child = Anchored(anchor_child([a, b]))
    assert set(child.anchors) == {r1, r2}
    before = _fold(ack_entries(s1) + ack_entries(s2) + ack_entries(a) + ack_entries(b))
    assert before[r1] != 0 and before[r2] != 0
    after = _fold(ack_entries(s1) + ack_entries(s2) + ack_entries(a) + ack_entries(b) + ack_entries(child))
    assert after[r1] == 0 and after[r2] == 0


@given(
    st.lists(
        st.lists(st.one_of(st.none(), st.tuples(st.sampled_from([0, 11, 12, 13]), st.integers(1, 99))), max_size=4),
        max_size=20,
    )
)
def test_pair_anchored_outputs_complete_their_trees_exactly_with_the_owed_acks(rows):
    """A Spark batch: a tree (INIT with the input edges, the driver's input acks, the writer's owed
    acks) folds to zero once every output is acked, and stays open while any one is not."""
    owed: dict[int, int] = {}
    outputs = [anchor_to_pairs(pairs, owed) for pairs in rows]
    inputs = {pair for pairs in rows for pair in pairs if pair is not None and pair[0]}
    init = [(root, edge) for root, edge in inputs]
    input_acks = [(root, edge) for root, edge in inputs]  # the driver acks each input's own edge
    assert set(owed) == {root for root, _ in inputs}
    for output in outputs:
        assert set(output) <= set(owed) and all(output.values()), "every tracked output anchored, no edge 0"
    events = init + input_acks + list(owed.items())
    output_acks = [(root, edge) for output in outputs for root, edge in output.items()]
    assert not any(_fold(events + output_acks).values())
    for left_out in range(len(output_acks)):
        held_back = output_acks[:left_out] + output_acks[left_out + 1 :]
        assert _fold(events + held_back)[output_acks[left_out][0]] != 0, "a tree completed with an output unacked"


def test_untracked_parents_give_untracked_children():
    assert anchor_child([Anchored()]) == {}
    assert not Anchored().tracked
    assert fail_roots(Anchored({5: 1, 6: 2})) == [5, 6]


@given(
    st.lists(st.tuples(st.sampled_from(list(EventKind)), st.integers(1, 2**63 - 1), st.integers()), max_size=100),
    st.integers(1, 16),
)
def test_packer_groups_by_root_partition_and_keeps_every_entry(entries, partitions):
    packer = AckPacker(ack_partitions=partitions)
    for kind, root, val in entries:
        packer.add(kind, root, val % 2**63)
    assert len(packer) == len(entries)
    packed = packer.drain()
    assert len(packer) == 0 and packer.drain() == {}
    seen = []
    for partition, (kinds, roots, vals) in packed.items():
        assert all(partition_for_root(int(r), partitions) == partition for r in roots)
        seen += list(zip(kinds.tolist(), roots.tolist(), vals.tolist()))
    assert sorted(seen) == sorted((int(k), r, v % 2**63) for k, r, v in entries)


@given(
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1).filter(bool), st.integers(0, 2**63 - 1)), max_size=200),
    st.integers(1, 7),
)
def test_packer_keeps_each_partitions_entries_in_the_order_added(entries, partitions):
    # roots are signed: the partition is root mod N read unsigned, as the acker checks it
    packer = AckPacker(ack_partitions=partitions)
    packer.add_many(EventKind.ACK, entries)
    expected: dict[int, list] = {}
    for root, val in entries:
        expected.setdefault(partition_for_root(root, partitions), []).append((int(EventKind.ACK), root, val))
    packed = packer.drain()
    assert {p: list(zip(k.tolist(), r.tolist(), v.tolist())) for p, (k, r, v) in packed.items()} == expected
    assert all(k.dtype == np.uint8 and r.dtype == np.int64 and v.dtype == np.int64 for k, r, v in packed.values())


def test_packer_with_zero_ackers_drops_everything():
    packer = AckPacker(ack_partitions=0)
    packer.add(EventKind.INIT, 5, 1)
    assert len(packer) == 0 and packer.drain() == {}
