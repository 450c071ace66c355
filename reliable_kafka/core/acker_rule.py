"""The acker's rule, as Storm's ``Acker.execute``: one XOR update, then one decision per root.

Per root the acker keeps ``val`` (the XOR of every INIT and ACK val received), ``owner`` (the
spout task that sent the INIT; 0 here means "no INIT yet") and ``failed`` (a FAIL was seen).
After a record's entries are folded, each root it touched is decided:

* ``failed`` and the owner known: FAILED (FAIL wins over a completion in the same record);
* ``val == 0`` and the owner known: COMPLETED;
* a RESET_TIMEOUT in the record and the owner known: the root stays pending with a new deadline,
  and the owner hears RESET_TIMEOUT so that its own backstop timer moves too;
* otherwise nothing: the root waits. A FAIL or ACK that comes before the INIT waits here for the
  owner, as in Storm (the one explicit out-of-order rule).

Both functions work on columns (one element per root, NumPy arrays), so the table applies them to
a whole batch at once; :mod:`reliable_kafka.core.acker_fold` applies them record by record within
a batch, and :class:`~reliable_kafka.core.acker_table.AckerTable` only stores the result.
"""

from __future__ import annotations

import numpy as np

from reliable_kafka.core.kinds import OutcomeKind

__all__ = ["INIT_BIT", "ACK_BIT", "FAIL_BIT", "RESET_BIT", "KIND_BITS", "NOTHING", "update", "decide"]

# The bit each EventKind (its value is the index) sets in a root's summary of one record.
INIT_BIT, ACK_BIT, FAIL_BIT, RESET_BIT = 1, 2, 4, 8
KIND_BITS = np.array([INIT_BIT, ACK_BIT, FAIL_BIT, RESET_BIT], dtype=np.uint8)
NOTHING = np.uint8(255)  # decide(): the root stays pending and nobody is told

_COMPLETED, _FAILED, _RESET = (
    np.uint8(k) for k in (OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.RESET_TIMEOUT)
)


def update(
    val: np.ndarray, owner: np.ndarray, failed: np.ndarray, xor: np.ndarray, bits: np.ndarray, sender: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold one record's entries into each root's state.

    ``xor`` is the XOR of the root's INIT and ACK vals in the record (FAIL and RESET_TIMEOUT
    carry none), ``bits`` the OR of its kinds' bits, ``sender`` the record's sender: the owner,
    if the record holds the root's INIT.
    """
    return (val ^ xor, np.where(bits & INIT_BIT, sender, owner), failed | ((bits & FAIL_BIT) != 0))


def decide(val: np.ndarray, owner: np.ndarray, failed: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Each root's decision after a record: an OutcomeKind value, or NOTHING."""
    decision: np.ndarray = np.where(
        failed, _FAILED, np.where(val == 0, _COMPLETED, np.where(bits & RESET_BIT, _RESET, NOTHING))
    )
    decision[owner == 0] = NOTHING  # no INIT yet: whatever came waits for the owner
    return decision
