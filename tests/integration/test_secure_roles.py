"""Least privilege on a secured broker (docs/design.md section 10): each role runs with exactly the ACLs that
`reliable-kafka acls` grants it, under its own principal, with no authorization denial in the
broker log; a missing permission stops the component with an AuthorizationError naming it, and
nothing goes to the dead-letter topic; an outsider cannot forge an ack."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from spark_helpers import wait_for

from reliable_kafka import Connection, Tracking, codec
from reliable_kafka.acker import AckerWorker
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.cli import main
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.core.spout_state import decode_spout_state
from reliable_kafka.errors import AuthorizationError
from reliable_kafka.spout import Spout
from reliable_kafka.testing.topics import unique_name
from reliable_kafka.topology import TopologyTopics

RECORDS = 20


class Running:
    """A component run in a thread; ``error`` is what stopped it (None: stopped cleanly)."""

    def __init__(self, component) -> None:
        self.component = component
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.component.run(self.stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def finish(self, timeout: float = 60.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.component.name} did not stop within {timeout:.0f} s"

    def stopped_by(self, timeout: float = 90.0) -> BaseException | None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.component.name} still runs after {timeout:.0f} s"
        return self.error


class Deployment:
    """One topology on the secured broker: topics created by the admin, ACLs granted by the CLI."""

    def __init__(self, secure_kafka, tmp_path: Path, *, transactional: bool = False) -> None:
        self.kafka = secure_kafka
        self.transactional = transactional  # TransactionalSpout and a transactional bolt
        self.topology = unique_name("rk-sec")
        self.topics = TopologyTopics(self.topology)
        self.source, self.middle, self.sink = (f"{self.topology}-{name}" for name in ("source", "middle", "sink"))
        self.admin_properties = tmp_path / "admin.properties"
        self.admin_properties.write_text(secure_kafka.security.client_properties("admin"))
        self.admin = AdminClient({**secure_kafka.config("admin"), "bootstrap.servers": secure_kafka.bootstrap})
        assert (
            main(
                [
                    "topics",
                    "--topology",
                    self.topology,
                    "--bootstrap-servers",
                    secure_kafka.bootstrap,
                    "--command-config",
                    str(self.admin_properties),
                ]
            )
            == 0
        )
        for future in self.admin.create_topics(
            [NewTopic(t, 1) for t in (self.source, self.middle, self.sink)]
        ).values():
            future.result(60)

    def grant(self, role: str, principal: str, *options: str) -> None:
        assert (
            main(
                [
                    "acls",
                    "--topology",
                    self.topology,
                    "--role",
                    role,
                    "--principal",
                    principal,
                    *options,
                    "--apply",
                    "--bootstrap-servers",
                    self.kafka.bootstrap,
                    "--command-config",
                    str(self.admin_properties),
                ]
            )
            == 0
        )

    def revoke(self, principal: str, resource_type: ResourceType, name: str, operation: AclOperation) -> None:
        match = AclBindingFilter(
            resource_type, name, ResourcePatternType.LITERAL, principal, None, operation, AclPermissionType.ANY
        )
        for future in self.admin.delete_acls([match]).values():
            assert future.result(60), f"no ACL {principal} {operation} {name} to revoke"
        wait_for(
            lambda: not self.admin.describe_acls(match).result(30),
            timeout=60,
            what=f"the broker to drop {principal} {operation} {name}",
        )

    def allow(self, principal: str, resource_type: ResourceType, name: str, operation: AclOperation) -> None:
        from reliable_kafka.acls import Acl
        from reliable_kafka.kafka.authorization import apply_acls

        apply_acls(self.admin, [Acl(resource_type.name, name, operation.name, principal)])

    def produce_source(self, count: int = RECORDS) -> None:
        producer = Producer({**self.kafka.config("admin"), "bootstrap.servers": self.kafka.bootstrap})
        for i in range(count):
            producer.produce(self.source, f"record {i}".encode(), key=str(i).encode())
        assert producer.flush(60) == 0

    def end_offset(self, topic: str) -> int:
        consumer = Consumer(
            {
                **self.kafka.config("admin"),
                "bootstrap.servers": self.kafka.bootstrap,
                "group.id": unique_name("rk-sec-reader"),
            }
        )
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)[1]
        finally:
            consumer.close()

    def emitted_upto(self) -> int | None:
        """Where the transactional spouts' committed state says emission stopped (None: no state yet)."""
        consumer = Consumer(
            {
                **self.kafka.config("admin"),
                "bootstrap.servers": self.kafka.bootstrap,
                "group.id": f"{self.topology}-spout",
            }
        )
        try:
            committed = consumer.committed([TopicPartition(self.source, 0)], timeout=30)[0]
        finally:
            consumer.close()
        if committed.offset < 0 or not committed.metadata:
            return None
        return decode_spout_state(committed.offset, committed.metadata)[1]

    def acker(self, *, timeout_ms: int = 20_000) -> AckerWorker:
        return AckerWorker(
            topology=self.topology,
            connection=Connection(self.kafka.bootstrap, kafka_config=self.kafka.config("acker")),
            tracking=Tracking(message_timeout_ms=timeout_ms),
            create_topics=False,
            name="acker",
        )

    def spout(
        self,
        *,
        principal: str = "spout",
        name: str = "spout",
        message_timeout_ms: int = 20_000,
        consumer_config: dict | None = None,
    ) -> Spout:
        return Spout(
            topology=self.topology,
            connection=Connection(
                self.kafka.bootstrap, kafka_config=self.kafka.config(principal), consumer_config=consumer_config
            ),
            source_topics=self.source,
            group_id=f"{self.topology}-spout",
            emit_to=self.middle,
            tracking=Tracking(message_timeout_ms=message_timeout_ms),
            transactional=self.transactional,
            name=name,
        )

    def bolt(self, *, principal: str = "bolt") -> BasicBolt:
        failed_once: set[bytes] = set()

        def forward(tuple_, collector):  # the sink ends the tree: its records are not anchored
            if tuple_.key == b"0" and tuple_.key not in failed_once:  # the failure path is used too
                failed_once.add(tuple_.key)
                raise RuntimeError("first attempt of record 0 fails")
            collector.emit(self.sink, tuple_.value, key=tuple_.key, anchors=[])

        return BasicBolt(
            topology=self.topology,
            connection=Connection(self.kafka.bootstrap, kafka_config=self.kafka.config(principal)),
            source_topics=self.middle,
            group_id=f"{self.topology}-bolt",
            handler=forward,
            name="bolt",
            transactional=self.transactional,
        )

    def grant_all(self) -> None:
        self.grant("acker", "User:acker")
        for role, source, output in (("spout", self.source, self.middle), ("bolt", self.middle, self.sink)):
            group = f"{self.topology}-{role}"
            transactional = ["--transactional-id", f"{group}.{role}"] if self.transactional else []
            self.grant(role, f"User:{role}", "--source", source, "--output", output, "--group", group, *transactional)


def denials(
    log_path: Path, since: int, topology: str, principals=("User:spout", "User:bolt", "User:acker")
) -> list[str]:
    """The broker's denials for ``principals`` logged after ``since`` (a byte offset into its log).

    Denials naming another deployment's resources are left out: the tests share one broker, and a
    client of an earlier test (one stopped by a refusal on purpose) may still be winding down.
    """
    with open(log_path, "rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    return [
        line
        for line in text.splitlines()
        if "Denied" in line
        and any(p + " " in line for p in principals)
        and all(name == topology for name in re.findall(r"rk-sec-[0-9a-f]{10}", line))
    ]


@pytest.fixture
def deployment(secure_kafka, tmp_path) -> Deployment:
    return Deployment(secure_kafka, tmp_path)


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_least_privilege_topology_completes_without_a_denial(secure_kafka, tmp_path, transactional):
    deployment = Deployment(secure_kafka, tmp_path, transactional=transactional)
    since = secure_kafka.log_path.stat().st_size
    deployment.grant_all()
    deployment.produce_source()
    acker = Running(deployment.acker())
    bolt = Running(deployment.bolt())
    spout = Running(deployment.spout())
    try:
        wait_for(
            lambda: spout.error or bolt.error or acker.error or spout.component.stats.completed >= RECORDS,
            timeout=180,
            what=f"{RECORDS} trees to complete under least privilege",
        )
        assert (spout.error, bolt.error, acker.error) == (None, None, None)
        assert spout.component.stats.dead_lettered == 0
        assert spout.component.stats.replayed == 1  # record 0, after its failure was read
    finally:
        for running in (spout, bolt, acker):
            running.finish()
    assert (spout.error, bolt.error, acker.error) == (None, None, None)
    assert spout.component.stats.committed.get((deployment.source, 0)) == RECORDS
    if transactional:  # a transaction's commit marker takes an offset too
        assert deployment.end_offset(deployment.sink) >= RECORDS
        assert deployment.end_offset(deployment.topics.failures) >= 1
    else:
        assert deployment.end_offset(deployment.sink) == RECORDS
        assert deployment.end_offset(deployment.topics.failures) == 1
    assert deployment.end_offset(deployment.topics.dlq) == 0
    assert denials(secure_kafka.log_path, since, deployment.topology) == []

    # an outsider (no ACLs) cannot forge an ack: the broker refuses the record
    acks_end = deployment.end_offset(deployment.topics.acks)
    forged = codec.encode_ack_batch(1, [int(EventKind.ACK)], [12345], [678])
    producer = Producer({**secure_kafka.config("outsider"), "bootstrap.servers": secure_kafka.bootstrap})
    reports: list = []
    producer.produce(deployment.topics.acks, forged, partition=0, on_delivery=lambda e, m: reports.append(e))
    producer.flush(60)
    assert reports and reports[0] is not None and reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert deployment.end_offset(deployment.topics.acks) == acks_end


def test_least_privilege_takeover_reads_in_flight_records_again_without_a_denial(secure_kafka, tmp_path):
    """A second TransactionalSpout (its own transactional id, the spout role's ACLs only) adopts
    the records a first one left in flight, reads the one whose tree failed again through the
    `<group>.refetch` group, and completes every tree with no denial in the broker log."""
    deployment = Deployment(secure_kafka, tmp_path, transactional=True)
    group = f"{deployment.topology}-spout"
    since = secure_kafka.log_path.stat().st_size
    deployment.grant_all()
    deployment.grant(
        "spout",
        "User:spout",
        "--source",
        deployment.source,
        "--output",
        deployment.middle,
        "--group",
        group,
        "--transactional-id",
        f"{group}.spout-b",
    )
    deployment.produce_source()
    # static members do not leave the group on close: a short session hands the partition over
    # soon; trees are given a minute, so that none times out while the partition changes hands
    options = {"consumer_config": {"session.timeout.ms": 6000}, "message_timeout_ms": 60_000}
    acker = Running(deployment.acker(timeout_ms=60_000))
    first = Running(deployment.spout(**options))
    bolt = second = None
    try:
        wait_for(
            lambda: first.error or deployment.emitted_upto() == RECORDS,
            timeout=120,
            what=f"the first spout to commit the emission of {RECORDS} records",
        )
        first.finish()  # no bolt runs yet: every record is left in flight
        assert first.error is None and first.component.stats.completed == 0
        bolt = Running(deployment.bolt())  # fails record 0's first attempt
        second = Running(deployment.spout(name="spout-b", **options))
        wait_for(
            lambda: (
                second.error
                or bolt.error
                or acker.error
                or second.component.stats.committed.get((deployment.source, 0)) == RECORDS
            ),
            timeout=180,
            what="the second spout to complete the adopted trees",
        )
        assert (second.error, bolt.error, acker.error) == (None, None, None)
    finally:
        for running in (second, bolt, acker):
            if running is not None:
                running.finish()
    stats = second.component.stats
    assert stats.read == 0  # every record was adopted, none read anew
    assert stats.replayed == 1  # record 0: never held by this spout, read again by offset (refetch)
    assert stats.dead_lettered == 0 and deployment.end_offset(deployment.topics.dlq) == 0
    assert denials(secure_kafka.log_path, since, deployment.topology) == []


def assert_refused(error, *, principal, operation, resource_type, resource):
    assert isinstance(error, AuthorizationError), f"expected an AuthorizationError, got {error!r}"
    assert (error.principal, error.operation, error.resource_type, error.resource) == (
        principal,
        operation,
        resource_type,
        resource,
    ), str(error)
    for word in (principal, operation, resource):
        assert word in str(error)


def refused_beside_an_acker(deployment: Deployment, make, **refusal) -> Running:
    """``make()``'s component, run beside an acker over the source records, stops refused as
    ``refusal`` says (``assert_refused``), and nothing is dead-lettered; returns it, stopped."""
    deployment.produce_source()
    acker = Running(deployment.acker())
    try:
        running = Running(make())
        assert_refused(running.stopped_by(), **refusal)
    finally:
        acker.finish()
    assert deployment.end_offset(deployment.topics.dlq) == 0
    return running


def test_bolt_that_cannot_see_the_ack_topic_says_so(deployment, secure_kafka):
    since = secure_kafka.log_path.stat().st_size
    deployment.grant_all()
    deployment.revoke("User:bolt", ResourceType.TOPIC, deployment.topics.acks, AclOperation.WRITE)
    bolt = Running(deployment.bolt())
    assert_refused(
        bolt.stopped_by(),
        principal="User:bolt",
        operation="DESCRIBE",
        resource_type="TOPIC",
        resource=deployment.topics.acks,
    )
    # what to grant: WRITE (which implies DESCRIBE), not the DESCRIBE that was refused
    assert f"a bolt needs WRITE on {deployment.topics.acks}" in str(bolt.stopped_by())
    assert "reliable-kafka acls --role bolt" in str(bolt.stopped_by())
    # the broker logs the refusal: the least-privilege tests' "no denial" can fail
    assert any(
        deployment.topics.acks in line
        for line in denials(secure_kafka.log_path, since, deployment.topology, ("User:bolt",))
    )


def test_spout_refused_write_on_the_ack_topic_stops_and_dead_letters_nothing(deployment):
    deployment.grant_all()
    deployment.revoke("User:spout", ResourceType.TOPIC, deployment.topics.acks, AclOperation.WRITE)
    deployment.allow("User:spout", ResourceType.TOPIC, deployment.topics.acks, AclOperation.DESCRIBE)
    spout = refused_beside_an_acker(
        deployment,
        deployment.spout,
        principal="User:spout",
        operation="WRITE",
        resource_type="TOPIC",
        resource=deployment.topics.acks,
    )
    assert spout.component.stats.dead_lettered == 0


def test_spout_refused_write_on_its_output_stops_and_dead_letters_nothing(deployment):
    deployment.grant_all()
    deployment.revoke("User:spout", ResourceType.TOPIC, deployment.middle, AclOperation.WRITE)
    spout = refused_beside_an_acker(
        deployment,
        deployment.spout,
        principal="User:spout",
        operation="WRITE",
        resource_type="TOPIC",
        resource=deployment.middle,
    )
    # The stopped spout's producer purged what it could not deliver: it no longer asks for the
    # refused topic (before, it did so every few hundred milliseconds while the object lived).
    stopped_at = deployment.kafka.log_path.stat().st_size
    time.sleep(3)
    asking = [
        line
        for line in denials(deployment.kafka.log_path, stopped_at, deployment.topology)
        if deployment.middle in line
    ]
    assert asking == [], (
        f"{len(asking)} requests for {spout.component.name}'s output {deployment.middle} after it stopped"
    )


@pytest.mark.parametrize("describe", [False, True], ids=["nothing", "describe-only"])
@pytest.mark.parametrize("role", ["spout", "bolt"])
def test_refused_transactional_id_stops_the_transactional_component_naming_it(secure_kafka, tmp_path, role, describe):
    """A TransactionalSpout or transactional bolt whose principal may not use its transactional id
    stops at init_transactions, naming the id: refused either when finding the transaction
    coordinator (no DESCRIBE) or when asking for a producer id (DESCRIBE without WRITE)."""
    deployment = Deployment(secure_kafka, tmp_path, transactional=True)
    deployment.grant_all()
    transactional_id = f"{deployment.topology}-{role}.{role}"  # <group>.<name>
    deployment.revoke(f"User:{role}", ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE)
    if describe:
        deployment.allow(f"User:{role}", ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.DESCRIBE)
    refused_beside_an_acker(
        deployment,
        deployment.spout if role == "spout" else deployment.bolt,
        principal=f"User:{role}",
        operation="WRITE",
        resource_type="TRANSACTIONAL_ID",
        resource=transactional_id,
    )


def test_bolt_refused_read_on_its_source_stops(deployment):
    deployment.grant_all()
    deployment.revoke("User:bolt", ResourceType.TOPIC, deployment.middle, AclOperation.READ)
    bolt = Running(deployment.bolt())
    assert_refused(
        bolt.stopped_by(), principal="User:bolt", operation="READ", resource_type="TOPIC", resource=deployment.middle
    )


def test_transactional_spout_refused_read_on_its_source_stops(secure_kafka, tmp_path):
    deployment = Deployment(secure_kafka, tmp_path, transactional=True)
    deployment.grant_all()
    deployment.revoke("User:spout", ResourceType.TOPIC, deployment.source, AclOperation.READ)
    spout = Running(deployment.spout())
    assert_refused(
        spout.stopped_by(), principal="User:spout", operation="READ", resource_type="TOPIC", resource=deployment.source
    )


def test_acker_refused_its_group_stops(deployment):
    deployment.grant_all()
    deployment.revoke("User:acker", ResourceType.GROUP, f"{deployment.topology}.ackers", AclOperation.READ)
    acker = Running(deployment.acker())
    assert_refused(
        acker.stopped_by(),
        principal="User:acker",
        operation="READ",
        resource_type="GROUP",
        resource=f"{deployment.topology}.ackers",
    )


def test_acker_refused_write_on_outcomes_stops(deployment):
    deployment.grant_all()
    deployment.revoke("User:acker", ResourceType.TOPIC, deployment.topics.outcomes, AclOperation.WRITE)
    deployment.allow("User:acker", ResourceType.TOPIC, deployment.topics.outcomes, AclOperation.DESCRIBE)
    deployment.produce_source(1)
    acker, bolt, spout = Running(deployment.acker()), Running(deployment.bolt()), Running(deployment.spout())
    try:
        assert_refused(
            acker.stopped_by(),
            principal="User:acker",
            operation="WRITE",
            resource_type="TOPIC",
            resource=deployment.topics.outcomes,
        )
    finally:
        spout.finish()
        bolt.finish()
    assert deployment.end_offset(deployment.topics.dlq) == 0


def test_acker_left_to_create_topics_needs_no_permission_on_the_topics_it_does_not_use(deployment):
    deployment.grant("acker", "User:acker")  # no --create-topics: nothing on the dlq, failures or roots
    acker = AckerWorker(
        topology=deployment.topology,
        connection=Connection(deployment.kafka.bootstrap, kafka_config=deployment.kafka.config("acker")),
        name="acker",
    )  # create_topics=True
    running = Running(acker)
    try:
        wait_for(
            lambda: acker.ready.is_set() or running.error is not None,
            timeout=90,
            what="the acker to take its partitions",
        )
        assert running.error is None, running.error
    finally:
        running.finish()
    assert running.error is None, running.error


@pytest.mark.spark
def test_least_privilege_spark_spout_completes_without_a_denial(deployment, secure_kafka, tmp_path):
    from reliable_kafka.spark import SparkSpout, spark_session

    since = secure_kafka.log_path.stat().st_size
    group = f"{deployment.topology}-job"
    deployment.grant("acker", "User:acker")
    deployment.grant(
        "spark", "User:spark", "--source", deployment.source, "--output", deployment.middle, "--group", group
    )
    deployment.grant(
        "bolt",
        "User:bolt",
        "--source",
        deployment.middle,
        "--output",
        deployment.sink,
        "--group",
        f"{deployment.topology}-bolt",
    )
    deployment.produce_source()
    spark = spark_session("rk-test-secure-spark", master="local[2]")
    acker, bolt = Running(deployment.acker()), Running(deployment.bolt())
    try:
        job = SparkSpout(
            spark,
            topology=deployment.topology,
            connection=Connection(secure_kafka.bootstrap, kafka_config=secure_kafka.config("spark")),
            source_topics=deployment.source,
            group_id=group,
            checkpoint_dir=str(tmp_path / "ckpt"),
            transform=lambda df: df.select("key", "value", "anchors"),
            output_topic=deployment.middle,
            tracking=Tracking(message_timeout_ms=20_000),
        )
        job.start()
        try:
            assert job.run_until(lambda j: j.caught_up(), timeout=300), job.progress()
        finally:
            job.stop()
    finally:
        bolt.finish()
        acker.finish()
        spark.stop()
    assert (bolt.error, acker.error) == (None, None)
    assert deployment.end_offset(deployment.topics.dlq) == 0
    assert (
        denials(secure_kafka.log_path, since, deployment.topology, principals=("User:spark", "User:bolt", "User:acker"))
        == []
    )


@pytest.mark.spark
def test_least_privilege_spark_bolt_completes_without_a_denial(deployment, secure_kafka, tmp_path):
    """A SparkBolt needs exactly a bolt's ACLs: here it runs as User:spark granted the bolt role,
    ends the trees of a Python spout (its outputs are not anchored) and acks their inputs."""
    from pyspark.sql import functions as F

    from reliable_kafka.spark import SparkBolt, spark_session

    since = secure_kafka.log_path.stat().st_size
    group = f"{deployment.topology}-spark-bolt"
    deployment.grant("acker", "User:acker")
    deployment.grant(
        "spout",
        "User:spout",
        "--source",
        deployment.source,
        "--output",
        deployment.middle,
        "--group",
        f"{deployment.topology}-spout",
    )
    deployment.grant("bolt", "User:spark", "--source", deployment.middle, "--output", deployment.sink, "--group", group)
    deployment.produce_source()
    spark = spark_session("rk-test-secure-spark-bolt", master="local[2]")
    # a slow first Spark batch must not time the trees out (then they replay: more work, same result)
    acker = Running(deployment.acker(timeout_ms=120_000))
    spout = Running(deployment.spout(message_timeout_ms=120_000))
    try:
        job = SparkBolt(
            spark,
            topology=deployment.topology,
            connection=Connection(secure_kafka.bootstrap, kafka_config=secure_kafka.config("spark")),
            source_topics=deployment.middle,
            group_id=group,
            checkpoint_dir=str(tmp_path / "ckpt"),
            transform=lambda df: df.select("key", "value", F.expr("filter(anchors, a -> false)").alias("anchors")),
            output_topic=deployment.sink,
        )
        job.start()
        try:
            wait_for(
                lambda: (
                    spout.error
                    or acker.error
                    or job.raise_if_failed()
                    or spout.component.stats.committed.get((deployment.source, 0)) == RECORDS
                ),
                timeout=300,
                what=f"{RECORDS} trees to complete through the Spark bolt",
            )
        finally:
            job.stop()
    finally:
        spout.finish()
        acker.finish()
        spark.stop()
    assert (spout.error, acker.error) == (None, None)
    assert spout.component.stats.dead_lettered == 0 and deployment.end_offset(deployment.topics.dlq) == 0
    assert deployment.end_offset(deployment.sink) >= RECORDS
    assert (
        denials(
            secure_kafka.log_path, since, deployment.topology, principals=("User:spark", "User:spout", "User:acker")
        )
        == []
    )
