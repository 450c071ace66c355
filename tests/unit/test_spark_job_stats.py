"""The figures a Spark job keeps of its stream batches (``SparkJob._on_batch``), which a Python
StreamingQueryListener used to give: the last batch id and the rate its inputs arrived at; and the
columns a transform's outputs may not have (Spark not started)."""

from __future__ import annotations

import pytest

from reliable_kafka.errors import ConfigError
from reliable_kafka.spark import job as spark_job
from reliable_kafka.spark.bolt import SparkBolt

CLOSED = "127.0.0.1:1"  # nothing is started: no client is made before start()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _bolt(transform=lambda df: df) -> SparkBolt:
    """A SparkBolt not started (no Spark session, no client)."""
    return SparkBolt(
        None,
        topology="t",
        connection=CLOSED,
        source_topics="in",
        group_id="g",
        checkpoint_dir="/nonexistent",
        transform=transform,
        output_topic="out",
    )


def _job(monkeypatch, rows_per_batch: list[int], clock: Clock, *, fail: bool = False) -> SparkBolt:
    job = _bolt()
    batches = iter(rows_per_batch)

    def batch(df, batch_id: int) -> None:
        job.stats.inputs += next(batches)
        clock.now += 0.5  # the batch's own time: not between two starts
        if fail:
            raise RuntimeError("transform failed")

    monkeypatch.setattr(job, "_on_stream_batch", batch)
    monkeypatch.setattr(spark_job.time, "monotonic", clock)
    return job


def test_last_batch_and_its_input_rate(monkeypatch):
    clock = Clock()
    job = _job(monkeypatch, [100, 300, 50], clock)
    job._on_batch(None, 7)
    assert job.stats.last_batch_id == 7
    assert job.stats.last_input_rows_per_second is None, "no previous batch: no rate"
    clock.now += 1.5  # batch 8 starts 2 s after batch 7 did
    job._on_batch(None, 8)
    assert job.stats.last_batch_id == 8
    assert job.stats.last_input_rows_per_second == pytest.approx(300 / 2.0)
    clock.now += 3.5
    job._on_batch(None, 9)
    assert job.stats.last_input_rows_per_second == pytest.approx(50 / 4.0)


def test_a_failed_batch_is_still_the_last_one(monkeypatch):
    clock = Clock()
    job = _job(monkeypatch, [10], clock, fail=True)
    with pytest.raises(RuntimeError, match="transform failed"):
        job._on_batch(None, 3)
    assert job.stats.last_batch_id == 3


class _Outputs:
    """What the job reads of a transform's outputs before it asks Spark anything: the columns."""

    def __init__(self, *columns: str) -> None:
        self.columns = list(columns)


@pytest.mark.parametrize("column", ["rk_row", "rk_header", "rk_headers", "rk_anchors", "rk_children", "rk_pairs"])
def test_outputs_with_a_column_the_output_path_adds_are_refused(column):
    job = _bolt(lambda df: _Outputs("value", "anchors", column))
    with pytest.raises(ConfigError, match=rf"\['{column}'\].*rename or drop"):
        job._write(None, 1)
