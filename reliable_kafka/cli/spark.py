"""``reliable-kafka spark-submit``: spark-submit with Spark's Kafka connector on --jars."""

from __future__ import annotations

import argparse
import sys

from reliable_kafka.cli.arguments import Subparsers

__all__ = ["register"]


def register(subparsers: Subparsers) -> None:
    # prefix_chars "+": every argument, --master included, is spark-submit's, passed on as given.
    submit = subparsers.add_parser(
        "spark-submit",
        prefix_chars="+",
        add_help=False,
        help="spark-submit with Spark's Kafka connector added to --jars (from the jar cache)",
        description="Runs pyspark's spark-submit (or $SPARK_HOME's) with the connector jars added to "
        "--jars; every argument is spark-submit's. `reliable-kafka spark-submit ++print-jars` prints "
        "the jars (comma-separated) instead.",
    )
    submit.add_argument(
        "++print-jars",
        dest="print_jars",
        action="store_true",
        help="print the connector jars, comma-separated, and exit",
    )
    submit.add_argument("submit_args", nargs=argparse.REMAINDER, metavar="ARGS")
    submit.set_defaults(handler=_spark_submit)


def _spark_submit(args: argparse.Namespace) -> int:
    import os

    from reliable_kafka.spark.jvm_functions import functions_jar_or_none
    from reliable_kafka.spark.session import connector_jars, spark_submit_command

    jars = connector_jars()
    functions = functions_jar_or_none()  # reliable-kafka's Java functions; without them, the SQL path
    if functions is not None:
        jars.append(functions)
    if args.print_jars:
        print(",".join(str(jar) for jar in jars))
        return 0
    command = spark_submit_command(list(args.submit_args), jars=jars)
    # Python workers default to this interpreter, which has reliable_kafka installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.execv(command[0], command)
    return 1  # not reached
