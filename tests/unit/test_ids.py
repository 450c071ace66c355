"""Tuple ids (reliable_kafka.core.ids): random, non-zero, signed 64-bit, never repeated by a forked child."""

import multiprocessing
import os

import pytest

from reliable_kafka.core import ids


def test_new_id_is_a_non_zero_signed_64_bit_int_across_pool_refills():
    drawn = [ids.new_id() for _ in range(3 * ids._POOL_SIZE + 7)]
    assert all(type(i) is int and i != 0 and -(2**63) <= i < 2**63 for i in drawn)
    assert len(set(drawn)) == len(drawn)  # 64 random bits: a repeat here is a broken generator
    assert any(i < 0 for i in drawn) and any(i > 0 for i in drawn)


def _child_ids(queue) -> None:
    queue.put([ids.new_id() for _ in range(50)])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_does_not_hand_out_its_parents_pooled_ids():
    ids.new_id()  # the pool now holds ids the parent will hand out next
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_child_ids, args=(queue,))
    child.start()
    from_child = queue.get(timeout=60)
    child.join(60)
    from_parent = [ids.new_id() for _ in range(50)]
    assert not set(from_child) & set(from_parent)
