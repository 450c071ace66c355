"""Which master a session gets, and how spark-submit gets the connector (no Spark started)."""

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.cli import build_parser
from reliable_kafka.spark.session import DEFAULT_SPARK_CONF, LOCAL_MODE_CONF, given_master, spark_submit_command

JARS = ["/c/spark-sql-kafka-0-10_2.13-4.2.0.jar", "/c/kafka-clients-3.9.2.jar"]


def test_no_master_given_anywhere():
    assert given_master({}) is None
    assert given_master({"PYSPARK_SUBMIT_ARGS": "pyspark-shell"}) is None


def test_master_from_a_running_spark_submit_jvm_wins():
    env = {"PYSPARK_SUBMIT_ARGS": "--master local[3] pyspark-shell", "MASTER": "yarn"}
    assert given_master(env, running_conf={"spark.master": "spark://h:7077"}) == "spark://h:7077"


@pytest.mark.parametrize(
    "args, master",
    [
        ("--master spark://127.0.0.1:7077 pyspark-shell", "spark://127.0.0.1:7077"),
        ("--master=yarn pyspark-shell", "yarn"),
        ("--conf spark.master=k8s://https://h:6443 pyspark-shell", "k8s://https://h:6443"),
        ("--verbose -c spark.master=local[4] pyspark-shell", "local[4]"),
        ("--name x --jars a.jar,b.jar --master 'local[1]' pyspark-shell", "local[1]"),
        # arguments after the application are the application's, not spark-submit's
        ("app.py --master spark://nope:1", None),
    ],
)
def test_master_from_pyspark_submit_args(args, master):
    assert given_master({"PYSPARK_SUBMIT_ARGS": args}) == master


def test_master_from_spark_defaults_and_properties_file(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("# comment\nspark.master    spark://d:7077\n")
    assert given_master({"SPARK_CONF_DIR": str(conf_dir)}) == "spark://d:7077"
    assert given_master({"SPARK_HOME": str(tmp_path)}) == "spark://d:7077"
    props = tmp_path / "my.properties"
    props.write_text("spark.master=local[5]\n")
    env = {"SPARK_CONF_DIR": str(conf_dir), "PYSPARK_SUBMIT_ARGS": f"--properties-file {props} pyspark-shell"}
    assert given_master(env) == "local[5]"  # spark-submit reads spark-defaults.conf only without one


def test_master_from_the_master_variable_last():
    assert given_master({"MASTER": "spark://m:7077"}) == "spark://m:7077"
    assert given_master({"MASTER": "yarn", "PYSPARK_SUBMIT_ARGS": "--master local[1] x"}) == "local[1]"


def test_loopback_pinning_is_local_mode_only():
    assert "spark.master" not in DEFAULT_SPARK_CONF
    for key in ("spark.driver.host", "spark.driver.bindAddress", "spark.pyspark.python"):
        assert key not in DEFAULT_SPARK_CONF
        assert key in LOCAL_MODE_CONF


def test_submit_command_adds_jars_before_the_application():
    command = spark_submit_command(
        ["--master", "spark://m:7077", "app.py", "--jars", "x"], jars=JARS, spark_submit="/s/spark-submit"
    )
    assert command == [
        "/s/spark-submit",
        "--jars",
        ",".join(JARS),
        "--master",
        "spark://m:7077",
        "app.py",
        "--jars",
        "x",
    ]


@pytest.mark.parametrize(
    "given, expected",
    [
        (["--jars", "u.jar", "app.py"], ["--jars", ",".join([*JARS, "u.jar"]), "app.py"]),
        (
            ["--verbose", "--jars=u.jar,v.jar", "app.py"],
            ["--verbose", f"--jars={','.join([*JARS, 'u.jar', 'v.jar'])}", "app.py"],
        ),
    ],
)
def test_submit_command_merges_given_jars(given, expected):
    assert spark_submit_command(given, jars=JARS, spark_submit="s") == ["s", *expected]


@given(
    st.lists(st.sampled_from(["--verbose", "--name", "n", "--master", "local[1]", "--conf", "a=b"]), max_size=8),
    st.lists(st.text(min_size=1, max_size=5), max_size=4),
)
def test_submit_command_keeps_every_argument_in_order(options, app_args):
    args = [*options, "app.py", *app_args]
    assert spark_submit_command(args, jars=JARS, spark_submit="s") == ["s", "--jars", ",".join(JARS), *args]


def test_cli_passes_every_argument_to_spark_submit():
    args = build_parser().parse_args(
        ["spark-submit", "--master", "spark://m:7077", "--conf", "a=b", "app.py", "--x", "1"]
    )
    assert args.submit_args == ["--master", "spark://m:7077", "--conf", "a=b", "app.py", "--x", "1"]
    assert not args.print_jars
    assert build_parser().parse_args(["spark-submit", "++print-jars"]).print_jars
    assert isinstance(args, argparse.Namespace)


def test_a_jvm_this_process_started_is_not_a_submitted_one(monkeypatch):
    from pyspark import SparkContext

    from reliable_kafka.spark.session import _running_conf

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(SparkContext, "_gateway", object())  # an earlier session's JVM: not consulted
    assert _running_conf() is None
