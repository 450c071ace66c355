"""Which Spark releases run a spout in real-time mode (reliable_kafka.spark.single_query): Spark 4.1's
JVM has the mode though PySpark 4.1's ``trigger()`` does not take ``realTime``; 4.0 has neither.
That the 4.1 path really runs the query in real-time mode is checked on PySpark 4.1 by
``tests/integration/test_spark_single_query.py`` (.ci/spark-versions.sh)."""

from __future__ import annotations

import pyspark
import pytest

from reliable_kafka.spark import single_query


@pytest.mark.parametrize(("version", "supported"), [("4.0.5", False), ("4.1.0", True), ("4.1.3", True)])
def test_real_time_mode_is_spark_41_and_later_even_without_the_python_api(monkeypatch, version, supported):
    monkeypatch.setattr(single_query, "_python_real_time", lambda: False)
    monkeypatch.setattr(pyspark, "__version__", version)
    assert single_query.real_time_supported() is supported


def test_pyspark_with_the_python_api_is_supported(monkeypatch):
    monkeypatch.setattr(single_query, "_python_real_time", lambda: True)
    monkeypatch.setattr(pyspark, "__version__", "4.2.0")
    assert single_query.real_time_supported() is True


def test_with_the_python_api_the_trigger_is_pysparks_own(monkeypatch):
    calls = []

    class Writer:
        def trigger(self, **kwargs):
            calls.append(kwargs)
            return self

    monkeypatch.setattr(single_query, "_python_real_time", lambda: True)
    writer = Writer()
    assert single_query.real_time_trigger(writer, "10 seconds") is writer
    assert calls == [{"realTime": "10 seconds"}]
