"""Every public constructor checks every argument at construction: a wrong type or a value out of
range is a ConfigError naming the component, the parameter and the value (reliable_kafka.validation).

The table below lists, per constructor, the bad values of each parameter; the signature test makes
a parameter added without a row (and so, most likely, without a check) fail here.
"""

from __future__ import annotations

import inspect
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reliable_kafka import (
    AckerWorker,
    Backoff,
    BasicBolt,
    Bolt,
    Connection,
    LocalCluster,
    Loop,
    Parallel,
    Spout,
    TopicCreation,
    TopologyTopics,
    Tracking,
)
from reliable_kafka.broker import EmbeddedCluster, EmbeddedKafka
from reliable_kafka.errors import ConfigError
from reliable_kafka.spark import SparkBolt, SparkOptions, SparkSpout
from reliable_kafka.spout.shell import SpoutShell
from reliable_kafka.testing import ListSource, ManualClock, MemoryKafka, TopicSink
from reliable_kafka.validation import require_int, require_number, require_output_topic, require_topics

CLOSED = "127.0.0.1:1"  # nothing listens there; constructors open no connection

NOT_INT = ["100", 1.5, True]
NOT_STR = [5, b"t", ""]
NOT_MAPPING = ["a=b", [("a", "b")], 5]
NOT_BOOL = [1, "true", None]
NOT_TOPICS = [5, [], [""], ["ok", 5], b"t", None]
NOT_CALLABLE = ["handler", 5]
NOT_CLIENTS = ["confluent", object()]
NOT_CLOCK = [None, "time", object()]


def _handler(record, collector):
    pass


KAFKA = {"topology": "t", "connection": CLOSED}
SPOUT = {**KAFKA, "source_topics": "in", "group_id": "g", "emit_to": "out"}
BOLT = {**KAFKA, "source_topics": "in", "group_id": "g", "handler": _handler}
SPARK = {
    "topology": "t",
    "connection": CLOSED,
    "source_topics": "in",
    "group_id": "g",
    "checkpoint_dir": "/tmp/rk-validation-never-made",
    "transform": lambda frame: frame,
    "output_topic": "out",
}
NOT_CONNECTION = [None, 5, b"host:9092", {"bootstrap_servers": CLOSED}]

SPOUT_BAD = {
    "topology": [None, 5, ""],
    "connection": NOT_CONNECTION,
    "source_topics": NOT_TOPICS,
    "group_id": [None, *NOT_STR],
    "emit_to": [5, "", "in", "t.acks", "t.dlq", "t.outcomes", "t.status", "t.failures", "t.quarantine", "t.roots"],
    "handler": NOT_CALLABLE,
    "tracking": [{"guarantee": "none"}, "at_least_once", 5],
    "transactional": NOT_BOOL,
    "loop": [{"batch_size": 1}, 500],
    "name": NOT_STR,
}
BOLT_BAD = {
    "topology": [None, 5, ""],
    "connection": NOT_CONNECTION,
    "source_topics": NOT_TOPICS,
    "group_id": [None, *NOT_STR],
    "handler": NOT_CALLABLE,
    "batch_handler": NOT_CALLABLE,
    "transactional": NOT_BOOL,
    "parallel": ["4", 0, None, True, 1.5],
    "loop": [{"batch_size": 1}, 500],
    "name": NOT_STR,
}
SPARK_BAD = {
    "topology": [None, 5, ""],
    "connection": [*NOT_CONNECTION, Connection(CLOSED, clients=MemoryKafka())],  # Spark's connector only
    "source_topics": NOT_TOPICS,
    "group_id": [None, *NOT_STR],
    "checkpoint_dir": [None, ""],
    "transform": NOT_CALLABLE,
    "output_topic": [None, 5, "", "in", "t.acks", "t.dlq"],
    "options": [{"trigger_seconds": 1.0}, 1.0, Loop()],
    "name": NOT_STR,
}

# constructor -> (make(**kwargs), the valid arguments, each parameter's bad values)
CONSTRUCTORS = {
    "Spout": (Spout, SPOUT, SPOUT_BAD),
    "TransactionalSpout": (  # Spout(transactional=True): its errors name the class it makes
        lambda **kw: Spout(**kw, transactional=True),
        {**SPOUT, "name": "s1"},
        {**{k: v for k, v in SPOUT_BAD.items() if k not in ("name", "transactional")}, "name": [None, 5, ""]},
    ),
    "Bolt": (Bolt, BOLT, BOLT_BAD),
    "BasicBolt": (BasicBolt, BOLT, BOLT_BAD),
    "AckerWorker": (
        AckerWorker,
        KAFKA,
        {
            "topology": [None, 5, ""],
            "connection": NOT_CONNECTION,
            "tracking": [{"ackers": 1}, 5, Tracking(ackers=0), Tracking(message_timeout_ms=None)],
            "timeout_buckets": [*NOT_INT, 0, 10_000],
            "group_id": NOT_STR,
            "create_topics": [1, "true", None, {"replication_factor": 3}],
            "max_entries_per_record": [*NOT_INT, -1, 0, 100],
            "loop": [{"batch_size": 1}, 500],
            "name": NOT_STR,
        },
    ),
    "Connection": (
        Connection,
        {"bootstrap_servers": CLOSED},
        {
            "bootstrap_servers": [None, *NOT_STR],
            "kafka_config": NOT_MAPPING,
            "consumer_config": NOT_MAPPING,
            "producer_config": NOT_MAPPING,
            "clients": NOT_CLIENTS,
        },
    ),
    "Tracking": (
        Tracking,
        {},
        {
            "guarantee": ["exactly_once", None, 1],
            "ackers": [*NOT_INT, -1],
            "max_pending": [*NOT_INT, 0],
            "max_retries": [*NOT_INT, -1],
            "backoff": [100, {"initial_ms": 1}],
            "message_timeout_ms": [*NOT_INT, "1s", 0],
            "backstop_grace_ms": [*NOT_INT, -1, None],
            "max_dead_letter_ratio": ["0.5", True, -0.1, 1, 1.5, float("nan")],
            "dead_letter_window": [*NOT_INT, 0, None],
            "root_index": NOT_BOOL,
        },
    ),
    "Loop": (
        Loop,
        {},
        {
            "batch_size": [*NOT_INT, 0, None],
            "commit_interval_ms": [*NOT_INT, "1s", -1, None],
            "metrics_port": [*NOT_INT, -1, 70000],
            "clock": NOT_CLOCK,
        },
    ),
    "TopicCreation": (
        TopicCreation,
        {},
        {"replication_factor": [*NOT_INT, 0], "min_insync_replicas": [*NOT_INT, 0]},
    ),
    "Parallel": (
        Parallel,
        {},
        {
            "parallelism": [*NOT_INT, 0, None],
            "ordering": ["fields", None, 1],
            "key_of": NOT_CALLABLE,
            "max_in_flight": [*NOT_INT, 0],
            "revoke_wait_s": ["10", -1, None, float("nan")],
            "executor": ["threads", 5],
        },
    ),
    "Backoff": (
        Backoff,
        {},
        {
            "initial_ms": [*NOT_INT, -1],
            "multiplier": ["2", True, 0.5, float("nan")],
            "max_ms": [*NOT_INT, 10],  # below initial_ms (1000)
            "jitter": ["0.1", -0.1, 1.5],
            "rng": [42, "seed"],
        },
    ),
    "TopologyTopics": (
        TopologyTopics,
        {"topology": "t"},
        {"topology": [None, 5, "", "a b"], "ackers": [*NOT_INT, -1], "outcome_partitions": [*NOT_INT, 0]},
    ),
    "LocalCluster": (
        lambda components: LocalCluster(*components),
        {"components": []},
        {"components": [[object()], [Spout(**SPOUT), "acker"]]},
    ),
    "SparkSpout": (
        lambda **kw: SparkSpout(None, **kw),
        SPARK,
        {
            **SPARK_BAD,
            "tracking": [{"max_retries": 1}, 5, Tracking(guarantee="at_most_once"), Tracking(guarantee="none")],
        },
    ),
    "SparkOptions": (
        SparkOptions,
        {},
        {
            "trigger_seconds": ["1", True, 0, -1.0, float("nan")],
            "available_now": NOT_BOOL,
            "max_offsets_per_trigger": [*NOT_INT, 0],
            "on_batch_error": ["ignore", None],
            "spark_kafka_options": NOT_MAPPING,
            "commit_interval_ms": [*NOT_INT, -1],
            "reuse_batch_plans": NOT_BOOL,
            "single_query": NOT_BOOL,
            "real_time": [5, "", "soon", "5 parsecs", b"5 minutes", "0 seconds"],
        },
    ),
    "SparkBolt": (lambda **kw: SparkBolt(None, **kw), SPARK, SPARK_BAD),
    "EmbeddedKafka": (
        EmbeddedKafka,
        {},
        {
            "data_dir": [5],
            "keep_data": NOT_BOOL,
            "port": [*NOT_INT, -1, 70000],
            "extra_config": NOT_MAPPING,
            "detach": NOT_BOOL,
            "startup_timeout": ["60", 0],
            "version": ["", 4, b"4.4.0"],
            "security": ["SASL"],
        },
    ),
    "EmbeddedCluster": (
        EmbeddedCluster,
        {},
        {
            "brokers": [*NOT_INT, 0],
            "data_dir": [5],
            "keep_data": NOT_BOOL,
            "port": [*NOT_INT, -1, 65535],  # three brokers from 65535 run past the last port
            "extra_config": NOT_MAPPING,
            "detach": NOT_BOOL,
            "startup_timeout": ["60", 0],
            "version": ["", 4, b"4.4.0"],
            "security": ["SASL"],
        },
    ),
    "MemoryKafka": (
        MemoryKafka,
        {},
        {
            "clock": ["now", 5],
            "auto_create_topics": NOT_BOOL,
            "default_partitions": [*NOT_INT, 0],
            "idle_waits_advance_clock": NOT_BOOL,
        },
    ),
    "ManualClock": (ManualClock, {}, {"start_ms": [*NOT_INT, -1]}),
    "ListSource": (
        lambda **kw: ListSource(**kw),
        {"kafka": MemoryKafka(), "topic": "t"},
        {"kafka": [None, "memory"], "topic": NOT_STR, "records": [5], "partitions": [*NOT_INT, 0]},
    ),
    "TopicSink": (
        lambda **kw: TopicSink(**kw),
        {"kafka": MemoryKafka(), "topic": "t"},
        {"kafka": [None, "memory"], "topic": NOT_STR},
    ),
}

# the classes behind each entry, whose signatures the table must cover
SIGNATURES = {
    "Spout": Spout,
    "TransactionalSpout": None,  # Spout(transactional=True): the spout's keywords, name required
    "Bolt": Bolt,
    "BasicBolt": BasicBolt,
    "AckerWorker": AckerWorker,
    "Connection": Connection,
    "Tracking": Tracking,
    "Loop": Loop,
    "TopicCreation": TopicCreation,
    "Parallel": Parallel,
    "Backoff": Backoff,
    "TopologyTopics": TopologyTopics,
    "LocalCluster": LocalCluster,
    "SparkSpout": SparkSpout,
    "SparkBolt": SparkBolt,
    "SparkOptions": SparkOptions,
    "EmbeddedKafka": EmbeddedKafka,
    "EmbeddedCluster": EmbeddedCluster,
    "MemoryKafka": MemoryKafka,
    "ManualClock": ManualClock,
    "ListSource": ListSource,
    "TopicSink": TopicSink,
}
UNCHECKED = {"spark"}  # a SparkSession, used as given (unit tests pass None: nothing of Spark runs)

CASES = [
    # the id names the bad value by its place in the table: an object's repr holds its address,
    # and parallel test workers must collect the same ids
    pytest.param(name, parameter, bad, id=f"{name}-{parameter}-{index}")
    for name, (_, _, table) in CONSTRUCTORS.items()
    for parameter, bads in table.items()
    for index, bad in enumerate(bads)
]


@pytest.mark.parametrize(("name", "parameter", "bad"), CASES)
def test_a_bad_argument_is_a_config_error_naming_the_component_and_the_parameter(name, parameter, bad):
    make, valid, _ = CONSTRUCTORS[name]
    with pytest.raises(ConfigError) as raised:
        make(**{**valid, parameter: bad})
    message = str(raised.value)
    assert parameter.replace("components", "components[") in message or parameter in message, message
    assert name in message or name.replace("Embedded", "") in message, message


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_the_valid_arguments_construct(name):
    make, valid, _ = CONSTRUCTORS[name]
    make(**valid)


def _parameters(cls) -> set[str]:
    return {
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name not in UNCHECKED
    }


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_every_parameter_of_every_public_constructor_has_bad_values_in_the_table(name):
    cls = SIGNATURES[name]
    parameters = _parameters(SpoutShell) - {"transactional"} if cls is None else _parameters(cls)
    if cls is EmbeddedKafka:
        parameters.discard("brokers")
    table = set(CONSTRUCTORS[name][2])
    assert parameters - table == set(), f"{name}: parameters without a check in this table"
    assert table - parameters == set(), f"{name}: rows for parameters it no longer has"


def test_every_public_class_is_in_the_table_or_not_constructed_by_users():
    import reliable_kafka
    import reliable_kafka.broker
    import reliable_kafka.spark
    import reliable_kafka.testing

    made_by_the_library = {  # results, records, collectors, errors: users receive these
        "AckerStats",
        "SpoutStats",
        "BoltStats",
        "SparkJobStats",
        "SpoutCollector",
        "BoltCollector",
        "SourceRecord",
        "Tuple",
        "ResumePoint",
    }
    classes = {
        name
        for module in (reliable_kafka, reliable_kafka.broker, reliable_kafka.spark, reliable_kafka.testing)
        for name in module.__all__
        if inspect.isclass(getattr(module, name)) and not issubclass(getattr(module, name), BaseException)
    }
    assert classes - made_by_the_library - set(SIGNATURES) == set()


def test_a_spout_without_group_id_is_refused_before_librdkafka_sees_it():
    """confluent-kafka asserts in C on a None group.id: the interpreter aborted (exit 134)."""
    program = (
        "from reliable_kafka import Spout\n"
        f"Spout(topology='t', connection={CLOSED!r}, source_topics='in', group_id=None, emit_to='out')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "ConfigError: Spout: group_id must be a non-empty str, got None" in done.stderr


def test_a_transactional_spout_refuses_a_name_that_is_not_a_str():
    with pytest.raises(ConfigError, match="TransactionalSpout: name must be a non-empty str"):
        Spout(**SPOUT, transactional=True, name=5)


def test_a_message_says_what_is_allowed_and_the_type_given():
    with pytest.raises(ConfigError) as raised:
        Loop(commit_interval_ms="1s")
    assert str(raised.value) == "Loop: commit_interval_ms must be an int >= 0, got '1s' (str)"
    with pytest.raises(ConfigError, match=r"a topic of topology 't'"):
        Spout(**{**SPOUT, "emit_to": "t.acks"})
    with pytest.raises(ConfigError, match=r"own source"):
        Spout(**{**SPOUT, "source_topics": ["a", "in"], "emit_to": "a"})


def test_the_checks_take_what_they_should():
    require_int("C", "n", 0, minimum=0)
    require_int("C", "n", None, optional=True)
    require_number("C", "r", 0, minimum=0, below=1)
    require_number("C", "r", 0.99, minimum=0, below=1)
    assert require_topics("C", "t", ("a", "b")) == ["a", "b"]
    assert require_topics("C", "t", "a") == ["a"]
    require_output_topic("C", "emit_to", "t.acks-mirror", {"t.acks": "a topic of topology 't'"})
    Backoff(initial_ms=0, max_ms=0, rng=random.Random(1))
    LocalCluster(Spout(**SPOUT))
    Spout(**{**SPOUT, "loop": Loop(clock=ManualClockLike())})
    EmbeddedKafka(data_dir=Path("/tmp/rk-never-made"))


class ManualClockLike:
    def monotonic(self) -> float:
        return 0.0

    def time(self) -> float:
        return 0.0

    def sleep(self, seconds: float, /) -> None:
        threading.Event().wait(0)
