"""reliable_kafka.spark.parsed: SQL parsed once per session and ANSI mode, the same plans as
``selectExpr``. Spark in local mode, no broker."""

from __future__ import annotations

import re

import pytest
from pyspark.sql import functions as F

from reliable_kafka.spark import spark_session
from reliable_kafka.spark.parsed import parsed_column, select_parsed

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = spark_session("rk-test-spark-parsed", master="local[1]")
    yield session
    session.stop()


def test_same_text_same_column_other_text_other_column(spark):
    a = parsed_column(spark, "CAST(id AS STRING) AS s")
    assert parsed_column(spark, "CAST(id AS STRING) AS s") is a
    assert parsed_column(spark, "CAST(id AS INT) AS s") is not a


def test_each_session_parses_its_own(spark):
    other = spark.newSession()
    assert parsed_column(other, "id + 1 AS n") is not parsed_column(spark, "id + 1 AS n")


def test_ansi_mode_is_part_of_the_key(spark):
    # the parser captures the mode in the CAST it builds: a column parsed under the other mode
    # would fail (ANSI) or give NULL (not ANSI) against what selectExpr does now
    session = spark.newSession()
    df = session.createDataFrame([("x",)], "v string")
    session.conf.set("spark.sql.ansi.enabled", "false")
    assert select_parsed(df, "CAST(v AS INT) AS n").collect()[0].n is None
    session.conf.set("spark.sql.ansi.enabled", "true")
    with pytest.raises(Exception, match="CAST_INVALID_INPUT"):
        select_parsed(df, "CAST(v AS INT) AS n").collect()


def plan(df) -> str:
    return re.sub(r"#\d+", "#", df._jdf.queryExecution().optimizedPlan().toString())


def test_same_plan_and_rows_as_select_expr(spark):
    df = spark.range(5).selectExpr("id", "id * 3 AS k")
    sqls = ["*", "`k` AS kk", "IF(id > 2, concat('a', CAST(k AS STRING)), NULL) AS t"]
    expected = df.selectExpr(*sqls)
    for _ in range(2):  # the second time from the cache
        got = select_parsed(df, *sqls)
        assert got.schema == expected.schema
        assert got.collect() == expected.collect()
        assert plan(got) == plan(expected)


def test_columns_among_the_texts_are_taken_as_they_are(spark):
    df = spark.range(3)
    assert [r.x for r in select_parsed(df, F.expr("id * 2 AS x")).collect()] == [0, 2, 4]
