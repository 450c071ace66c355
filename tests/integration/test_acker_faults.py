"""An acker worker that dies of an error loses no outcome; the ack topic's timestamps (issue 9).

docs/design.md section 4: never commit past a record that was read but not folded, and a worker that dies
of an error commits nothing on its way out beyond what was safe before the error.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ResourceType

from reliable_kafka import AckerWorker, Connection, LocalCluster, Loop, Tracking, codec
from reliable_kafka.acker import worker as worker_module
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets
from reliable_kafka.testing.records import read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

RECORDS = 40  # one complete tree each; the injected error hits the group holding offset FAIL_AT
FAIL_AT = 20


def _outcomes(bootstrap: str, topics: TopologyTopics) -> dict[int, int]:
    decided = {}
    for message in read_topic(bootstrap, topics.outcomes):
        batch = codec.decode_outcomes(message.value())
        decided.update(zip(batch.roots.tolist(), batch.kinds.tolist()))
    return decided


def test_a_worker_dying_mid_batch_commits_nothing_past_unfolded_records(kafka_bootstrap, monkeypatch):
    topics = TopologyTopics(unique_name("acker-dies"), ackers=1)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    spout, roots = new_id(), [new_id() for _ in range(RECORDS)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for root in roots:
        edge = new_id()
        producer.produce(
            topics.acks,
            codec.encode_ack_batch(spout, [EventKind.INIT, EventKind.ACK], [root, root], [edge, edge]),
            partition=0,
        )
    assert producer.flush(30) == 0

    fold_records = worker_module.AckerTable.fold_records

    def failing_fold(table, records):
        records = list(records)
        if any(record[5] >= FAIL_AT for record in records):
            raise RuntimeError("injected: the fold failed")
        return fold_records(table, records)

    monkeypatch.setattr(worker_module.AckerTable, "fold_records", failing_fold)
    dying = AckerWorker(topology=topics.topology, connection=kafka_bootstrap, loop=Loop(commit_interval_ms=0))
    cluster = LocalCluster(dying).start()
    try:
        deadline = time.monotonic() + 60
        while dying.name not in cluster.errors:
            assert time.monotonic() < deadline, f"the injected error did not stop the worker: {dying.stats}"
            time.sleep(0.1)
    finally:
        cluster.stop()
    committed = committed_offsets(kafka_bootstrap, dying.group_id, topics.acks).get(0, 0)
    assert committed <= FAIL_AT, f"committed {committed}, past records never folded (from {FAIL_AT})"

    monkeypatch.setattr(worker_module.AckerTable, "fold_records", fold_records)
    successor = AckerWorker(topology=topics.topology, connection=kafka_bootstrap, loop=Loop(commit_interval_ms=100))
    with LocalCluster(successor) as cluster:
        cluster.wait_until(
            lambda: set(roots) <= _outcomes(kafka_bootstrap, topics).keys(),
            timeout=60,
            what="every tree got its outcome after the restart",
            progress=lambda: str(successor.stats),
        )
    assert {root: kind for root, kind in _outcomes(kafka_bootstrap, topics).items()} == {
        root: OutcomeKind.COMPLETED for root in roots
    }


def _timestamp_type(bootstrap: str, topic: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_client(bootstrap)  # kept alive until the answer came
    described = admin.describe_configs([resource])[resource].result(timeout=30)
    return described["message.timestamp.type"].value


def test_the_ack_topic_is_created_with_log_append_time(kafka_bootstrap):
    topics = TopologyTopics(unique_name("append-time"), ackers=2)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    assert _timestamp_type(kafka_bootstrap, topics.acks) == "LogAppendTime"


def test_an_ack_topic_with_create_time_is_warned_about_once(kafka_bootstrap, caplog):
    topics = TopologyTopics(unique_name("create-time"), ackers=1)
    create_topics(kafka_bootstrap, {topics.acks: 1})  # made by hand: the broker's default, CreateTime
    assert _timestamp_type(kafka_bootstrap, topics.acks) == "CreateTime"
    caplog.set_level(logging.WARNING, logger="reliable_kafka.topology")
    for _ in range(2):
        worker = AckerWorker(topology=topics.topology, connection=kafka_bootstrap)
        with LocalCluster(worker):
            pass
    warnings = [r.getMessage() for r in caplog.records if "CreateTime" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert topics.acks in warnings[0] and "docs/guarantees.md" in warnings[0]
    assert "--add-config message.timestamp.type=LogAppendTime" in warnings[0]


def _members(bootstrap: str, group: str) -> list[str]:
    admin = admin_client(bootstrap)  # kept alive until the answer came
    description = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return [member.client_id for member in description.members]


def test_a_worker_that_stops_cleanly_leaves_the_group_at_once(kafka_bootstrap):
    # Its partitions then move on the survivor's next heartbeat, not when its session expires: the
    # session is made far longer than the wait, so only leaving can pass this test.
    topics = TopologyTopics(unique_name("acker-leaves"), ackers=2)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    long_session = {"session.timeout.ms": 600_000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 600_000}
    staying, leaving = (
        AckerWorker(
            topology=topics.topology,
            connection=Connection(kafka_bootstrap, kafka_config=long_session),
            tracking=Tracking(ackers=2),
        )
        for _ in range(2)
    )
    with LocalCluster(staying) as cluster:
        with LocalCluster(leaving):
            cluster.wait_until(
                lambda: len(staying._partitions) == len(leaving._partitions) == 1,
                timeout=60,
                what="each worker owns one partition (the rebalance is over)",
            )
        cluster.wait_until(
            lambda: len(_members(kafka_bootstrap, staying.group_id)) == 1,
            timeout=120,
            what="the stopped worker left the group (its session lasts 600 s)",
        )
        cluster.wait_until(
            lambda: len(staying._partitions) == 2, timeout=120, what="the remaining worker took both partitions"
        )
