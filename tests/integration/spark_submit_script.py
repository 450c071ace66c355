"""An application for spark-submit (tests/integration/test_spark_deploy.py).

Creates its session with ``spark_session()`` and no master, reads a topic with Spark's Kafka source
(batch), and prints one JSON line: the master it got, the driver host, the records it counted and
the one-pair header reliable-kafka's Java functions give (false when they are not there).

    spark-submit [OPTIONS] spark_submit_script.py BOOTSTRAP TOPIC
"""

from __future__ import annotations

import json
import sys


def main(bootstrap: str, topic: str) -> int:
    from reliable_kafka.errors import ConfigError
    from reliable_kafka.spark import spark_session

    try:
        spark = spark_session("rk-submit-test")
    except ConfigError as error:
        print(json.dumps({"error": str(error)}), flush=True)
        return 3
    count = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .count()
    )
    conf = spark.sparkContext.getConf()
    from reliable_kafka.spark.jvm_functions import use_jvm_functions

    # reliable-kafka's Java functions: on the driver's classpath only if spark-submit was given their jar
    header = use_jvm_functions(spark) and spark.sql("SELECT rk_anchors_v2(1L, 2L) AS h").collect()[0].h
    print(
        json.dumps(
            {
                "master": spark.sparkContext.master,
                "driver_host": conf.get("spark.driver.host", None),
                "count": count,
                "jvm_functions": bool(header) and bytes(header).hex(),
            }
        ),
        flush=True,
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
