"""The spout's fast SourceRecord construction makes exactly what SourceRecord(...) makes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.spout.spout import SourceRecord, source_record
from reliable_kafka.testing.memory_broker import new_message


@given(
    offset=st.integers(min_value=0, max_value=2**62),
    key=st.none() | st.binary(max_size=8),
    value=st.none() | st.binary(max_size=8),
    headers=st.none() | st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=3),
    timestamp=st.tuples(st.integers(0, 2), st.integers(0, 2**41)),
)
def test_source_record_matches_the_dataclass(offset, key, value, headers, timestamp):
    message = new_message(
        topic="t", partition=3, offset=offset, key=key, value=value, headers=headers, timestamp=timestamp
    )
    record = source_record(message)
    expected = SourceRecord("t", 3, offset, key, value, list(headers or []), timestamp[1])
    assert record == expected
    # every field is set (a field added to SourceRecord must be added to source_record too)
    assert {f.name for f in dataclasses.fields(SourceRecord)} == set(vars(record))
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.offset = 1  # still frozen
    if headers is not None:
        assert record.headers is not headers  # the handler's list is its own
