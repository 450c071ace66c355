"""A stream batch's output plan rebound to the next batch (reliable_kafka.spark.batch_plans):
the same rows and bytes as the plan built anew over that batch, and plans that read more than
the batch are not kept. Spark in local mode, no broker: a batch is a ``localCheckpoint`` (a
``LogicalRDD``, as ``foreachBatch`` hands over), two of them over one source having the same
output attributes, as a streaming query's batches do."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from reliable_kafka.spark import spark_session
from reliable_kafka.spark.batch_plans import BatchPlans
from reliable_kafka.spark.jvm_functions import MODE_ENV, use_jvm_functions
from reliable_kafka.spark.spout import _stream_inputs
from reliable_kafka.spark.writer import (
    children_from_metrics,
    in_session,
    observed_metrics,
    output_rows_jvm,
    v2_write_session,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    import os

    os.environ[MODE_ENV] = "on"
    session = spark_session("rk-test-spark-batch-plans", master="local[2]")
    assert use_jvm_functions(session)
    yield v2_write_session(session)
    session.stop()
    os.environ.pop(MODE_ENV, None)


def _source(spark):
    """Rows shaped as Spark's Kafka source's (the columns ``_stream_inputs`` reads)."""
    return spark.range(0, 400, 1, 3).selectExpr(
        "CAST(CAST(id AS STRING) AS BINARY) AS key",
        "CAST(concat('w', id, ' x', id % 7, ' y') AS BINARY) AS value",
        "'src' AS topic",
        "CAST(id % 2 AS INT) AS partition",
        "id AS offset",
        "current_timestamp() AS timestamp",
        "IF(id % 5 = 0, array(named_struct('key', 'h', 'value', CAST(CAST(id AS STRING) AS BINARY))), NULL) AS headers",
    )


def _batches(spark):
    source = _source(spark)
    first = source.where("offset < 150").localCheckpoint()
    second = source.where("offset >= 150").localCheckpoint()
    assert first._jdf.logicalPlan().output().equals(second._jdf.logicalPlan().output())
    return first, second


def split_words(df):
    words = F.explode(F.split(F.col("value").cast("string"), " "))
    return df.select(words.alias("value"), "anchors", "headers")


def _built(batch, salt, spark, transform=split_words):
    """(observed rows, observation) as ``SparkJob._write`` builds them."""
    return output_rows_jvm(in_session(transform(_stream_inputs(batch, salt)), spark), salt)


def _rows(observed) -> tuple[list[tuple], tuple]:
    """The rows' values, headers and our header, and the observation's (rows, roots, XORs)."""
    df, observation = observed
    rows = sorted(
        (r["value"], [(h["key"], bytes(h["value"])) for h in r["headers"]], bytes(r["rk_header"] or b""))
        for r in df.collect()
    )
    metrics = observed_metrics(observation, df.sparkSession, timeout=60, what="test")
    written, roots, xors = children_from_metrics(metrics, what="test")
    assert written == len(rows)
    return rows, (written, roots.tolist(), xors.tolist())


def test_a_rebound_plan_writes_the_rows_a_built_one_does(spark) -> None:
    first, second = _batches(spark)
    plans = BatchPlans("test")
    plans.remember(*_built(first, 11, spark), first, 11)
    assert plans.refused is None
    rebound = plans.rows(second, 12345, spark)
    assert rebound is not None and plans.rebound == 1
    expected = _rows(_built(second, 12345, spark))
    assert len(expected[0]) == 250 * 3 and len(expected[1][1]) == 250
    # the values, the user's headers, our header byte for byte; the observation's children
    assert _rows(rebound) == expected
    assert _rows(plans.rows(second, 11, spark))[0] != expected[0]  # the salt is swapped, not kept
    again = plans.rows(first, 11, spark)  # the template is left as it was
    assert _rows(again) == _rows(_built(first, 11, spark))


def test_a_plan_reading_more_than_the_batch_is_not_kept(spark) -> None:
    first, _ = _batches(spark)
    other = spark.range(0, 5).selectExpr("CAST(id AS STRING) AS w")

    def joined(df):
        return split_words(df).join(other, F.col("value") == F.col("w"), "left_semi")

    def random_words(df):
        return split_words(df).where(F.rand() < 0.5)

    for transform in (joined, random_words):
        plans = BatchPlans("test")
        plans.remember(*_built(first, 11, spark, transform), first, 11)
        assert plans.refused is not None, transform.__name__
        assert plans.rows(first, 12, spark) is None


def test_another_leaf_drops_the_template(spark) -> None:
    first, _ = _batches(spark)
    plans = BatchPlans("test")
    plans.remember(*_built(first, 11, spark), first, 11)
    unrelated = _source(spark).localCheckpoint()  # the same columns, other attributes: another query
    assert plans.rows(unrelated, 12, spark) is None
    assert plans.rows(first, 12, spark) is None  # dropped: the next batch builds and keeps anew
