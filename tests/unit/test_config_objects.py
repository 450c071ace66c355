"""The configuration objects (Connection, Tracking, Loop, TopicCreation, Parallel, SparkOptions),
the components' short constructors, ``Spout(transactional=True)`` and the deprecated ``TransactionalSpout``.

Each object's bad values are in tests/unit/test_validation.py's table (a ConfigError naming the
object and the field); here: what the objects carry into the components, and the constructors' size.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import (
    AckerWorker,
    BasicBolt,
    Bolt,
    Connection,
    Loop,
    Parallel,
    Spout,
    TopicCreation,
    Tracking,
    TransactionalSpout,
)
from reliable_kafka.errors import ConfigError
from reliable_kafka.kafka.config import consumer_settings, producer_settings
from reliable_kafka.spark import SparkBolt, SparkOptions, SparkSpout
from reliable_kafka.spout.shell import SpoutShell
from reliable_kafka.testing import ManualClock, MemoryKafka

CLOSED = "127.0.0.1:1"  # nothing listens: nothing here reaches a broker
SPOUT = {"topology": "t", "connection": CLOSED, "source_topics": "in", "group_id": "g", "emit_to": "out"}

# Every public component constructor takes at most this many keywords; the groups are the objects.
MAX_KEYWORDS = 10
COMPONENTS = [Spout, Bolt, BasicBolt, AckerWorker, SparkSpout, SparkBolt]
SPARK = {  # a Spark job made with spark=None: nothing of Spark runs, nothing reaches a broker
    "topology": "t",
    "connection": CLOSED,
    "source_topics": "in",
    "group_id": "g",
    "checkpoint_dir": "/tmp/rk-config-objects-never-made",
    "transform": lambda frame: frame,
    "output_topic": "out",
}


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.__name__)
def test_no_component_constructor_takes_more_than_ten_keywords(component):
    keywords = [p for p in inspect.signature(component).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert len(keywords) <= MAX_KEYWORDS, [p.name for p in keywords]
    assert [p for p in inspect.signature(component).parameters.values() if p.kind is p.VAR_KEYWORD] == []


def test_the_common_spout_is_one_short_line():
    spout = Spout(topology="wc", connection=CLOSED, source_topics="in", group_id="g", handler=lambda r, c: None)
    assert spout.bootstrap_servers == CLOSED and spout.guarantee == "at_least_once" and spout.batch_size == 500
    assert isinstance(spout.connection, Connection) and spout.connection == Connection(CLOSED)


def test_a_connection_is_shared_and_its_dicts_are_copied_into_each_component():
    shared = {"client.id": "app", "security.protocol": "PLAINTEXT"}
    kafka = Connection(
        CLOSED, kafka_config=shared, consumer_config={"fetch.max.bytes": 1}, producer_config={"linger.ms": 5}
    )
    spout, bolt = (
        Spout(**{**SPOUT, "connection": kafka}),
        Bolt(topology="t", connection=kafka, source_topics="mid", group_id="b", handler=lambda t, c: None),
    )
    for component in (spout, bolt):
        assert consumer_settings(component.kafka_config) == {**shared, "fetch.max.bytes": 1}
        assert producer_settings(component.kafka_config) == {**shared, "linger.ms": 5}
    spout.kafka_config["client.id"] = "changed"
    assert shared["client.id"] == "app" and bolt.kafka_config["client.id"] == "app"


def test_the_tracking_and_loop_fields_reach_the_spout_and_its_tracker():
    clock = ManualClock()
    spout = Spout(
        **SPOUT,
        tracking=Tracking(max_pending=7, max_retries=2, max_dead_letter_ratio=None, dead_letter_window=9),
        loop=Loop(batch_size=3, commit_interval_ms=4, metrics_port=0, clock=clock),
    )
    assert (spout.tracker.max_pending, spout.tracker.max_retries) == (7, 2)
    assert (spout.max_dead_letter_ratio, spout.dead_letter_window) == (None, 9)
    assert (spout.batch_size, spout.commit_interval_ms, spout.metrics_port, spout._clock) == (3, 4, 0, clock)


def test_an_acker_reads_ackers_and_the_timeout_from_tracking_and_replication_from_topic_creation():
    acker = AckerWorker(
        topology="t",
        connection=CLOSED,
        tracking=Tracking(ackers=3, message_timeout_ms=1234),
        create_topics=TopicCreation(replication_factor=2, min_insync_replicas=1),
    )
    assert (acker.ackers, acker.message_timeout_ms, acker.topics.ackers) == (3, 1234, 3)
    assert (acker.create_topics, acker.replication_factor, acker.min_insync_replicas) == (True, 2, 1)
    refusing = AckerWorker(topology="t", connection=CLOSED, create_topics=False)
    assert refusing.create_topics is False and refusing.replication_factor is None


def test_a_bolts_parallel_is_an_int_or_a_parallel():
    def make(parallel):
        return Bolt(
            topology="t",
            connection=CLOSED,
            source_topics="in",
            group_id="g",
            handler=lambda t, c: None,
            parallel=parallel,
        )

    assert make(4).parallel == Parallel(4) and make(4).parallelism == 4
    assert make(Parallel(2, ordering="none", revoke_wait_s=1.5)).revoke_wait_s == 1.5
    with pytest.raises(ConfigError, match=r"Bolt: parallel=0: Parallel: parallelism must be an int >= 1"):
        make(0)


@given(
    batch_size=st.integers(-3, 3),
    commit_interval_ms=st.integers(-3, 3),
    metrics_port=st.one_of(st.none(), st.integers(-2, 65_537)),
)
def test_a_loop_is_made_exactly_when_every_field_is_in_range(batch_size, commit_interval_ms, metrics_port):
    valid = batch_size >= 1 and commit_interval_ms >= 0 and (metrics_port is None or 0 <= metrics_port <= 65_535)
    try:
        Loop(batch_size=batch_size, commit_interval_ms=commit_interval_ms, metrics_port=metrics_port)
    except ConfigError as error:
        assert not valid and str(error).startswith("Loop: ")
    else:
        assert valid


@given(
    ackers=st.one_of(st.none(), st.integers(-2, 4)),
    max_pending=st.one_of(st.none(), st.integers(-1, 3)),
    ratio=st.one_of(st.none(), st.floats(-1, 2), st.just(float("nan"))),
    window=st.integers(-1, 3),
)
def test_tracking_is_made_exactly_when_every_field_is_in_range(ackers, max_pending, ratio, window):
    valid = (
        (ackers is None or ackers >= 0)
        and (max_pending is None or max_pending >= 1)
        and (ratio is None or 0 <= ratio < 1)
        and window >= 1
    )
    try:
        Tracking(ackers=ackers, max_pending=max_pending, max_dead_letter_ratio=ratio, dead_letter_window=window)
    except ConfigError as error:
        assert not valid and str(error).startswith("Tracking: ")
    else:
        assert valid


def test_the_objects_are_frozen_and_replace_makes_a_changed_copy():
    tracking = Tracking(max_retries=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tracking.max_retries = 2  # type: ignore[misc]
    assert dataclasses.replace(tracking, max_retries=2).max_retries == 2
    with pytest.raises(ConfigError, match="Tracking: max_retries"):
        dataclasses.replace(tracking, max_retries=-1)  # checked again


def test_spout_transactional_true_is_the_transactional_spout_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spout = Spout(**SPOUT, transactional=True, name="s1")
    assert isinstance(spout, TransactionalSpout) and isinstance(spout, SpoutShell)
    assert spout.transactional is True and spout.component == "transactional-spout"
    plain = Spout(**SPOUT)
    assert type(plain) is Spout and plain.transactional is False


def test_the_old_class_name_still_makes_one_with_a_deprecation_warning_naming_the_new_spelling():
    with pytest.warns(DeprecationWarning, match=r"TransactionalSpout is deprecated; use Spout\(transactional=True\)"):
        spout = TransactionalSpout(**SPOUT, name="s1")
    assert spout.transactional is True


def test_a_transactional_spout_refuses_what_it_cannot_promise():
    with pytest.raises(ConfigError, match="guarantee must be at_least_once"):
        Spout(**SPOUT, transactional=True, name="s1", tracking=Tracking(guarantee="none"))
    with pytest.raises(ConfigError, match="with ackers"):
        Spout(**SPOUT, transactional=True, name="s1", tracking=Tracking(ackers=0))


def test_the_connection_string_is_the_bootstrap_servers_and_anything_else_is_refused():
    kafka = MemoryKafka()
    assert Connection.of("Spout", "a:1") == Connection("a:1")
    assert Connection.of("Spout", Connection("memory", clients=kafka)).clients is kafka
    with pytest.raises(ConfigError, match=r"Bolt: connection must be a bootstrap servers string or a Connection"):
        Connection.of("Bolt", {"bootstrap_servers": "a:1"})


def test_a_spark_job_takes_the_connection_and_its_options_from_the_objects():
    kafka = Connection(
        CLOSED,
        kafka_config={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
        consumer_config={"fetch.max.bytes": 1},
        producer_config={"linger.ms": 5},
    )
    options = SparkOptions(
        trigger_seconds=0.5,
        max_offsets_per_trigger=40,
        on_batch_error="stop",
        spark_kafka_options={"kafka.isolation.level": "read_uncommitted"},
        commit_interval_ms=200,
        reuse_batch_plans=False,
    )
    spout = SparkSpout(None, **{**SPARK, "connection": kafka}, options=options, name="job")
    bolt = SparkBolt(None, **{**SPARK, "connection": kafka}, options=SparkOptions(available_now=True))
    assert (spout.connection, spout.options, spout.bootstrap_servers) == (kafka, options, CLOSED)
    assert (spout.trigger_seconds, spout.available_now, spout.max_offsets_per_trigger) == (0.5, False, 40)
    assert (spout.on_batch_error, spout.commit_interval_ms, spout.reuse_batch_plans) == ("stop", 200, False)
    assert (
        bolt.available_now is True
        and bolt.on_batch_error == "fail_roots"
        and bolt.options == SparkOptions(available_now=True)
    )
    for job in (spout, bolt):  # the security settings reach Spark's reader, the given options win
        assert consumer_settings(job.kafka_config)["fetch.max.bytes"] == 1
        assert producer_settings(job.kafka_config)["linger.ms"] == 5
        assert job.spark_kafka_options["kafka.security.protocol"] == "SASL_SSL"
    assert spout.spark_kafka_options["kafka.isolation.level"] == "read_uncommitted"
    assert bolt.spark_kafka_options["kafka.isolation.level"] == "read_committed"
    assert SparkBolt(None, **SPARK).options == SparkOptions() and SparkBolt(None, **SPARK).trigger_seconds == 1.0


def test_a_spark_spouts_tracking_reaches_its_tracker_and_root_owner():
    spout = SparkSpout(
        None,
        **SPARK,
        tracking=Tracking(max_pending=7, max_retries=2, message_timeout_ms=1234, max_dead_letter_ratio=None),
    )
    assert (spout.tracker.max_pending, spout.tracker.max_retries) == (7, 2)
    assert spout.tracking.message_timeout_ms == 1234
    default = SparkSpout(None, **SPARK)
    assert default.tracking == Tracking() and (default.tracker.max_pending, default.tracker.max_retries) == (10_000, 5)
    with pytest.raises(ConfigError, match=r"SparkSpout: tracking.guarantee must be 'at_least_once'.*'at_most_once'"):
        SparkSpout(None, **SPARK, tracking=Tracking(guarantee="at_most_once"))


def test_a_single_query_with_the_java_functions_turned_off_is_refused_when_made(monkeypatch):
    monkeypatch.setenv("RK_SPARK_JVM_FUNCTIONS", "off")
    with pytest.raises(
        ConfigError, match=r"SparkSpout: options.single_query .*TrackedRows.*RK_SPARK_JVM_FUNCTIONS=off"
    ):
        SparkSpout(None, **SPARK, options=SparkOptions(single_query=True))
    assert SparkSpout(None, **SPARK).single_query is False  # the foreachBatch path has its SQL fallback


def test_a_real_time_batch_not_shorter_than_the_message_timeout_is_refused_when_made(monkeypatch):
    monkeypatch.setattr("reliable_kafka.spark.spout.real_time_supported", lambda: True)
    for batch, timeout in (("30 seconds", 30_000), ("5 minutes", 30_000), ("2 minutes", 60_000)):
        with pytest.raises(ConfigError, match=rf"options.real_time='{batch}' is not below .*={timeout}: .*replayed"):
            SparkSpout(
                None, **SPARK, options=SparkOptions(real_time=batch), tracking=Tracking(message_timeout_ms=timeout)
            )
    taken = SparkSpout(None, **SPARK, options=SparkOptions(real_time="29 seconds"))  # the default timeout: 30 s
    assert taken.single_query and taken.options.real_time_seconds == 29.0
    longer = Tracking(message_timeout_ms=600_000)
    assert SparkSpout(None, **SPARK, options=SparkOptions(real_time="5 minutes"), tracking=longer).single_query


def test_a_spark_job_refuses_a_connection_with_its_own_clients():
    with pytest.raises(ConfigError, match=r"SparkBolt: connection.clients must be None"):
        SparkBolt(None, **{**SPARK, "connection": Connection(CLOSED, clients=MemoryKafka())})


@given(
    trigger_seconds=st.one_of(st.floats(-1, 2), st.just(float("nan")), st.integers(-1, 2)),
    max_offsets=st.one_of(st.none(), st.integers(-2, 3)),
    commit_interval_ms=st.integers(-3, 3),
    on_batch_error=st.sampled_from(["fail_roots", "stop", "ignore", "FAIL_ROOTS"]),
)
def test_spark_options_are_made_exactly_when_every_field_is_in_range(
    trigger_seconds, max_offsets, commit_interval_ms, on_batch_error
):
    valid = (
        trigger_seconds > 0  # NaN > 0 is False
        and (max_offsets is None or max_offsets >= 1)
        and commit_interval_ms >= 0
        and on_batch_error in ("fail_roots", "stop")
    )
    try:
        SparkOptions(
            trigger_seconds=trigger_seconds,
            max_offsets_per_trigger=max_offsets,
            commit_interval_ms=commit_interval_ms,
            on_batch_error=on_batch_error,
        )
    except ConfigError as error:
        assert not valid and str(error).startswith("SparkOptions: ")
    else:
        assert valid


def test_spark_options_are_frozen_and_compare_by_value():
    options = SparkOptions(trigger_seconds=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.trigger_seconds = 3.0  # type: ignore[misc]
    assert options == SparkOptions(trigger_seconds=2.0) != SparkOptions()
