"""One vocabulary for why a tree ended and why a record was dead-lettered (snake_case words).

The same words are used as metric label values (``rk_trees_total{outcome}``,
``rk_dead_letters_total{reason}``), in the docs and, for the spout's own backstop, in the
dead-letter headers it writes. :func:`reason_word` reads older spellings too (``backstop timeout``
in letters parked before the words were settled; the protocol's upper-case outcome names
``FAILED``, ``TIMED_OUT`` and ``POISON_PILL``, which the dead-letter headers still carry), so old
letters stay readable and every reader can speak the same words.
"""

from __future__ import annotations

__all__ = ["OUTCOMES", "DEAD_LETTER_REASONS", "reason_word"]

OUTCOMES = ("completed", "failed", "timed_out", "backstop_expired")
"""How a tree ended at the spout: the acker's three outcomes, and the spout's own backstop."""

DEAD_LETTER_REASONS = ("failed", "timed_out", "backstop_expired", "poison_pill", "deleted", "other")
"""Why a record was parked: its last attempt's outcome, ``poison_pill`` (failed with
``retry=False``), ``deleted`` (Kafka deleted it while in flight: parked as a reference), ``other``
(anything else, so that a label never holds free text)."""

_SPELLINGS = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "backstop_expired": "backstop_expired",
    "backstop timeout": "backstop_expired",  # dead letters parked before the words were settled
    "poison_pill": "poison_pill",
    "deleted": "deleted",
}


def reason_word(reason: str | None) -> str:
    """The vocabulary's word for ``reason`` (any spelling, any case); ``other`` for anything else."""
    text = (reason or "").strip()
    word = _SPELLINGS.get(text.lower())
    if word is not None:
        return word
    if text.startswith("deleted from Kafka"):  # spout.dead_letters.GONE_REASON
        return "deleted"
    return "other"
