"""bench_spark_pipeline's cold and steady spans and its reading of HotSpot's counters: the figures
docs/performance.md reports come from these, so a span off by one batch or a counter read from the
wrong bytes would misstate them."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

_PATH = Path(__file__).parents[2] / "bench" / "bench_spark_pipeline.py"
_SPEC = importlib.util.spec_from_file_location("bench_spark_pipeline", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _marks(ends: list[int]):
    """BatchMarks as a run leaves them: batch i ended at wall i + 1 having used 10 * (i + 1) s of JVM CPU."""
    marks = bench.BatchMarks("/nonexistent", 0, detail=False, threads=None)
    marks.marks = {i: {"wall": i + 1.0, "py": 0.0, "jvm": 10.0 * (i + 1)} for i in range(-1, len(ends))}
    marks.ends = ends
    return marks


def test_spans_skip_the_warmup_and_the_short_tail():
    # Spark's rate limit rounds each partition's share down: 25,000-record batches end a record
    # short per batch, and a last batch of a few records follows
    ends = [24_999 * (i + 1) for i in range(8)] + [200_000]
    cold, steady = _marks(ends).cold_and_steady(100_000, 4)
    assert (cold["batches"], cold["sentences"], cold["wall"], cold["jvm"]) == (4, 99_996, 4.0, 40.0)
    # batches 4 to 7: from the end of batch 3 (wall 4) to the end of batch 7 (wall 8)
    assert (steady["batches"], steady["sentences"], steady["wall"], steady["jvm"]) == (4, 99_996, 4.0, 40.0)


def test_no_warmup_batches_no_steady_span():
    cold, steady = _marks([25_000, 50_000]).cold_and_steady(50_000, 0)
    assert steady is None and cold["batches"] == 2 and cold["sentences"] == 50_000


def test_a_run_shorter_than_its_warmup_is_refused():
    with pytest.raises(SystemExit):
        _marks([25_000, 50_000]).cold_and_steady(25_000, 2)


@given(st.lists(st.integers(1, 1000), min_size=2, max_size=20), st.data())
def test_steady_starts_right_after_the_warmup(sizes, data):
    ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    warmup = data.draw(st.integers(1, len(sizes) - 1))
    sentences = data.draw(st.integers(1, ends[-1]))
    cold, steady = _marks(ends).cold_and_steady(sentences, warmup)
    assert steady["wall"] == steady["batches"]  # one second a batch: the span's batches, no more
    assert steady["sentences"] == sum(sizes[warmup : warmup + steady["batches"]])
    assert cold["sentences"] == sum(sizes[: cold["batches"]])


def _perf_image(entries: list[tuple[str, bytes, int, int]], little: bool = True) -> bytes:
    """An hsperfdata image: (name, type, vector length, value) entries after a 32-byte prologue."""
    order = "<" if little else ">"
    body = b""
    for name, kind, vector, value in entries:
        name_bytes = name.encode() + b"\0"
        header_size = struct.calcsize(order + "IIIBBBBI")
        data = struct.pack(order + "q", value) if kind == b"J" else b"abcdefgh"
        length = header_size + len(name_bytes) + len(data)
        body += (
            struct.pack(
                order + "IIIBBBBI", length, header_size, vector, kind[0], 0, 0, 0, header_size + len(name_bytes)
            )
            + name_bytes
            + data
        )
    prologue = struct.pack(order + "IBBBBIIqII", 0xCAFEC0C0, 1 if little else 0, 2, 0, 1, 0, 0, 0, 32, len(entries))
    return prologue + body


@pytest.mark.parametrize("little", [True, False])
def test_parse_perf_reads_the_long_counters_it_knows(little):
    image = _perf_image(
        [
            ("sun.rt.javaCommand", b"B", 8, 0),  # a string: skipped
            ("sun.ci.totalCompiles", b"J", 0, 1489),
            ("sun.ci.unknownCounter", b"J", 0, 7),
            ("java.cls.loadedClasses", b"J", 0, 9094),
            ("sun.ci.standardTime", b"J", 0, -(2**40)),
        ],
        little,
    )
    assert bench.parse_perf(image) == {"compiles": 1489, "classes": 9094, "jit_ticks": -(2**40)}
