"""The live page's dead-letter panel summarises a letter from its headers, old and new."""

from __future__ import annotations

import pytest

from reliable_kafka import codec
from reliable_kafka.ops.dead_letter_panel import reason_group, summarise


@pytest.mark.parametrize(
    ("reason", "group"),
    [
        ("ValueError: cannot parse b'record 7'", "ValueError"),
        ("json.decoder.JSONDecodeError: Expecting value", "json.decoder.JSONDecodeError"),
        ("TIMED_OUT", "timed_out"),
        ("backstop timeout", "backstop_expired"),
        ("backstop_expired", "backstop_expired"),
        ("the price is negative", "the price is negative"),
    ],
)
def test_letters_are_counted_by_error_type_or_outcome_word(reason, group):
    assert reason_group(reason) == group


def test_a_letter_is_summarised_from_rk_reason_and_rk_parked():
    parked = codec.ParkedRecord("FAILED after 3 attempts", 3, "in", 0, 41, component="spout-1", parked_at_ms=1000)
    headers = [(codec.PARKED_HEADER, codec.encode_parked(parked)), ("rk-reason", b"ValueError: bad")]
    letter = summarise(0, 9, 2000, headers)
    assert letter == {
        "partition": 0,
        "offset": 9,
        "at_ms": 1000,
        "reason": "ValueError: bad",
        "group": "ValueError",
        "kind": "failed",
        "source": "in[0]@41",
        "component": "spout-1",
        "attempts": 3,
    }


def test_a_letter_without_our_headers_still_shows():
    letter = summarise(1, 2, 3000, [("other", b"x")])
    assert (letter["reason"], letter["kind"], letter["source"], letter["at_ms"]) == (
        "unknown (no rk-parked header)",
        "other",
        None,
        3000,
    )
