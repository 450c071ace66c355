"""The XOR edge rule (docs/design.md section 2): how emits and acks move a tree's ack val.

A tuple being processed is an :class:`Anchored`: the trees it belongs to (root -> its edge id) and
its ``ack_val``, the XOR of the edges drawn for the children it emitted. Emitting a child anchored
to inputs a1..ak draws one fresh edge per input (a shared edge would cancel itself when two inputs
share a root); acking an input sends ``(root, edge ^ ack_val)`` for each of its trees.

A spout root is the same thing seen from the top: an ``Anchored({root: 0})`` whose children are
the emitted tuples; its ack entries are the INIT entries.
"""

from __future__ import annotations

from collections.abc import Iterable

from reliable_kafka.core.ids import new_id

__all__ = ["Anchored", "anchor_child", "anchor_to_pairs", "ack_entries", "fail_roots", "spout_root"]


class Anchored:
    """Tracking state of one tuple: ``anchors`` (root -> edge) and ``ack_val``."""

    __slots__ = ("anchors", "ack_val")

    def __init__(self, anchors: dict[int, int] | None = None) -> None:
        self.anchors = anchors or {}
        self.ack_val = 0

    @property
    def tracked(self) -> bool:
        """False for a tuple that carries no anchors (its tree, if any, is not tracked)."""
        return bool(self.anchors)

    def __repr__(self) -> str:
        return f"Anchored(anchors={self.anchors!r}, ack_val={self.ack_val})"


def spout_root(root: int) -> Anchored:
    """The virtual parent of a spout's emitted tuples: its ack entries are the INIT entries."""
    return Anchored({root: 0})


def anchor_child(parents: Iterable[Anchored]) -> dict[int, int]:
    """Anchors for a new child of ``parents``; updates each parent's ack val.

    Untracked parents contribute nothing; a child of only untracked parents is untracked ({}).
    """
    child: dict[int, int] = {}
    for parent in parents:
        if not parent.anchors:
            continue
        edge = new_id()
        parent.ack_val ^= edge
        for root in parent.anchors:
            child[root] = child.get(root, 0) ^ edge
    return child


def anchor_to_pairs(pairs: Iterable[tuple[int, int] | None], owed: dict[int, int]) -> dict[int, int]:
    """:func:`anchor_child` for parents given as (root, edge) pairs, as a Spark row's anchors column
    holds them: anchors for the new child, and each parent's ack val kept per root in ``owed``
    (``owed[root] ^= edge``), which the writer acks for its inputs; their own edges are acked apart.

    Pairs that are None or have root 0 (untracked) contribute nothing.
    """
    child: dict[int, int] = {}
    for pair in pairs:
        if pair is None or not pair[0]:
            continue
        root = pair[0]
        edge = new_id()  # one fresh edge per parent: two parents of one root must not cancel
        owed[root] = owed.get(root, 0) ^ edge
        child[root] = child.get(root, 0) ^ edge
    return child


def ack_entries(tuple_: Anchored) -> list[tuple[int, int]]:
    """The (root, val) ACK entries that acking ``tuple_`` sends, one per tree."""
    return [(root, edge ^ tuple_.ack_val) for root, edge in tuple_.anchors.items()]


def fail_roots(tuple_: Anchored) -> list[int]:
    """The roots that failing ``tuple_`` fails."""
    return list(tuple_.anchors)
