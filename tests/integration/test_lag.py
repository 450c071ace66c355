"""``reliable-kafka lag`` against the real broker: the true figure beside Kafka's (docs/design.md section 5)."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from reliable_kafka.cli import main
from reliable_kafka.core.commit_metadata import encode_done_above
from reliable_kafka.offsets import true_lag
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_lag_subtracts_what_the_commit_metadata_records_done(kafka_bootstrap, capsys):
    topic, group = unique_name("rk-lag"), unique_name("rk-lag-group")
    create_topics(kafka_bootstrap, {topic: 3})
    placed = produce_values(kafka_bootstrap, topic, [b"v"] * 90, keys=[f"k{i}".encode() for i in range(90)])
    ends = {p: 0 for p in range(3)}
    for partition, offset in placed:
        ends[partition] = max(ends[partition], offset + 1)
    # partition 0: commit point 1, offsets 2, 3 and 5 done above it; partition 1: foreign metadata;
    # partition 2: never committed.
    metadata, truncated = encode_done_above(1, [2, 3, 5])
    assert not truncated and min(ends.values()) > 5, ends
    commit(
        kafka_bootstrap,
        group,
        [TopicPartition(topic, 0, 1, metadata=metadata), TopicPartition(topic, 1, 2, metadata="someone else's")],
    )

    rows = {row.partition: row for row in true_lag(kafka_bootstrap, group, topic)}
    assert (rows[0].committed, rows[0].done_above) == (1, 3)
    assert (rows[0].kafka_lag, rows[0].lag) == (ends[0] - 1, ends[0] - 1 - 3)
    assert rows[1].done_above is None and "not reliable-kafka metadata" in rows[1].note
    assert rows[1].lag == rows[1].kafka_lag == ends[1] - 2
    assert rows[2].committed is None and rows[2].lag == ends[2]

    assert main(["lag", "--group", group, "--topic", topic, "--bootstrap-servers", kafka_bootstrap]) == 0
    out = capsys.readouterr().out
    total = out.splitlines()[-1].split()
    assert total == [
        "total",
        "3",
        str(sum(r.kafka_lag for r in rows.values())),
        str(sum(r.lag for r in rows.values())),
    ], out
    assert "commit metadata ignored" in out


def test_lag_of_a_missing_topic_says_so(kafka_bootstrap, capsys):
    assert main(["lag", "--group", "g", "--topic", unique_name("rk-lag-none"), "--bootstrap", kafka_bootstrap]) == 1
    assert "not found" in capsys.readouterr().out
