"""An ack sender folds each root's ACK entries into one before it sends them (merge_acks): the
acker then folds, and the broker stores, one entry where a count bolt acked 8 words of a sentence.
What must hold: every root's XOR is the same, and a root with any other kind of entry keeps all its
entries in order (FAIL-then-ACK, INIT and ACK from one sender)."""

from __future__ import annotations

from functools import reduce

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable_kafka import codec
from reliable_kafka.core.acker_table import AckerTable
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.kafka.ack_sender import AckSender, merge_acks
from reliable_kafka.testing import MemoryKafka

INIT, ACK, FAIL, RESET = (int(k) for k in (EventKind.INIT, EventKind.ACK, EventKind.FAIL, EventKind.RESET_TIMEOUT))
INT64 = st.integers(-(2**63), 2**63 - 1)


def _columns(entries):
    kinds, roots, vals = zip(*entries) if entries else ((), (), ())
    return np.array(kinds, np.uint8), np.array(roots, np.int64), np.array(vals, np.int64)


def _entries(kinds, roots, vals):
    return list(zip(kinds.tolist(), roots.tolist(), vals.tolist()))


def test_a_roots_acks_become_one_entry_with_their_xor_in_the_place_of_the_first():
    entries = [(ACK, 5, 1), (ACK, 6, 8), (ACK, 5, 2), (ACK, 5, 4), (ACK, 6, 16), (ACK, 7, 32)]
    assert _entries(*merge_acks(*_columns(entries))) == [(ACK, 5, 1 ^ 2 ^ 4), (ACK, 6, 8 ^ 16), (ACK, 7, 32)]


def test_a_root_with_another_kind_of_entry_keeps_all_its_entries_in_order():
    entries = [(ACK, 5, 1), (FAIL, 5, 0), (ACK, 5, 2), (INIT, 6, 3), (ACK, 6, 3), (ACK, 7, 1), (ACK, 7, 1)]
    assert _entries(*merge_acks(*_columns(entries))) == [
        (ACK, 5, 1),
        (FAIL, 5, 0),
        (ACK, 5, 2),
        (INIT, 6, 3),
        (ACK, 6, 3),
        (ACK, 7, 0),  # merged, even to 0: the same XOR as the two entries
    ]


def test_entries_without_a_repeated_ack_are_returned_as_they_are():
    columns = _columns([(INIT, 5, 1), (ACK, 6, 2), (ACK, 7, 3), (RESET, 6, 0)])
    assert all(a is b for a, b in zip(merge_acks(*columns), columns))


ENTRY = st.tuples(st.sampled_from([INIT, ACK, ACK, ACK, FAIL, RESET]), st.integers(1, 6), INT64)


@settings(max_examples=300, deadline=None)
@given(st.lists(ENTRY, max_size=40))
def test_each_roots_xor_is_kept_and_other_roots_entries_are_untouched(entries):
    merged = _entries(*merge_acks(*_columns(entries)))
    for root in {r for _, r, _ in entries}:
        before = [(k, v) for k, r, v in entries if r == root]
        after = [(k, v) for k, r, v in merged if r == root]
        if any(k != ACK for k, _ in before):
            assert after == before, "a root with another kind of entry keeps its entries as sent"
        else:
            assert len(after) == 1 and after[0][0] == ACK
            assert after[0][1] == reduce(lambda a, b: a ^ b, (v for _, v in before))
    # the merged entries keep the order of the entries they come from
    firsts = []
    for kind, root, _ in merged:
        firsts.append(next(i for i, e in enumerate(entries) if e[1] == root and e[0] == kind and i not in firsts))
    assert firsts == sorted(firsts)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.booleans(), st.booleans()), min_size=1, max_size=12),
    st.integers(0, 2**32),
)
def test_the_acker_table_decides_the_same_from_merged_entries(trees, seed):
    """Trees as the protocol makes them (an INIT, then ACKs whose edges XOR to its val when the
    tree is whole; some trees miss an ack or fail): the acker decides the same from the ACK
    record as sent and merged."""
    rng = np.random.default_rng(seed)
    inits, acks = [], []
    for root, (edges, whole, failed) in enumerate(trees, start=1):
        vals = rng.integers(1, 2**63 - 1, edges, dtype=np.int64)
        inits.append((INIT, root, reduce(lambda a, b: a ^ b, vals.tolist())))
        acks.extend((ACK, root, v) for v in vals.tolist()[: None if whole else -1])
        if failed:
            acks.append((FAIL, root, 0))
    acks = [acks[i] for i in rng.permutation(len(acks))]
    decisions = []
    for ack_columns in (_columns(acks), merge_acks(*_columns(acks))):
        table = AckerTable(message_timeout_ms=30_000)
        outcomes = table.fold_records([(*_columns(inits), 9, 1_000, 0), (*ack_columns, 3, 1_000, 1)])
        decisions.append((sorted(zip(outcomes.roots.tolist(), outcomes.kinds.tolist())), table.pending))
    assert decisions[0] == decisions[1]


def test_the_sender_sends_the_merged_entries_and_counts_what_it_sent():
    kafka = MemoryKafka()
    kafka.create_topic("t.acks", partitions=2)
    producer = kafka.producer({})
    sender = AckSender(producer, acks_topic="t.acks", ack_partitions=2, sender=3)
    sender.extend(EventKind.ACK, [4, 5, 4, 4, 5], [1, 2, 4, 8, 16])  # roots 4 and 5: partitions 0 and 1
    sender.add(EventKind.FAIL, 7)
    sender.add(EventKind.ACK, 7, 32)
    assert sender.send() == 4
    producer.flush()
    got = {}
    for message in kafka.messages("t.acks"):
        batch = codec.decode_ack_batch(message.value())
        got[message.partition()] = _entries(batch.kinds, batch.roots, batch.vals)
    assert got == {0: [(ACK, 4, 1 ^ 4 ^ 8)], 1: [(ACK, 5, 2 ^ 16), (FAIL, 7, 0), (ACK, 7, 32)]}
    assert (sender.records_sent, sender.entries_sent) == (2, 4)
