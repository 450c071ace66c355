"""The transactional spout and bolts on a real broker: fencing and adoption of failed trees."""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from reliable_kafka import AckerWorker, LocalCluster, Loop, Spout, Tracking
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.cli import main
from reliable_kafka.core.commit_metadata import DEFAULT_MAX_BYTES, encode_done_above
from reliable_kafka.core.spout_state import encode_spout_state
from reliable_kafka.core.tracker import Backoff
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets, lag
from reliable_kafka.ops import dlq
from reliable_kafka.spout import transactional
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics


def _topology(bootstrap: str, prefix: str, *, source_partitions: int = 2) -> tuple[str, dict[str, str]]:
    topology = unique_name(prefix)
    topics = {name: f"{topology}-{name}" for name in ("source", "stage", "sink")}
    create_topics(bootstrap, {topics["source"]: source_partitions, topics["stage"]: 2, topics["sink"]: 2})
    ensure_topics(admin_client(bootstrap), TopologyTopics(topology, ackers=2))
    return topology, topics


def _components(bootstrap: str, topology: str, topics: dict[str, str]):
    on = {"topology": topology, "connection": bootstrap}
    # exactly once holds unless a tree times out: the timeout must hold under load (as the harness's)
    acker = AckerWorker(
        **on, tracking=Tracking(ackers=2, message_timeout_ms=120_000), loop=Loop(commit_interval_ms=200), name="acker"
    )
    spout = Spout(
        **on,
        name="spout",
        source_topics=topics["source"],
        group_id=f"{topology}-spout",
        emit_to=topics["stage"],
        transactional=True,
        tracking=Tracking(max_retries=5, backoff=Backoff(initial_ms=20, max_ms=200), message_timeout_ms=120_000),
        loop=Loop(commit_interval_ms=100),
    )

    def sink(tuple_, collector):
        collector.emit(topics["sink"], tuple_.value, key=tuple_.key, anchors=())  # the effect

    bolt = BasicBolt(
        **on,
        name="sink",
        source_topics=topics["stage"],
        group_id=f"{topology}-sink",
        handler=sink,
        transactional=True,
        loop=Loop(commit_interval_ms=100),
    )
    return acker, spout, bolt


def _predecessor_left(bootstrap: str, group: str, source: str, *, failed: int, emitted_upto: int, attempt: int) -> None:
    """The commit a previous spout left on ``source`` partition 0: offsets ``0..failed-1`` in flight
    with their ``attempt`` failed (the outcome consumed), emission stopped at ``emitted_upto``."""
    metadata, truncated = encode_spout_state(
        0,
        [],
        emitted_upto=emitted_upto,
        outcome_position=0,
        attempts=dict.fromkeys(range(failed), attempt),
        failed=range(failed),
    )
    assert not truncated
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(source, 0, 0, metadata)], asynchronous=False)
    committer.close()


def _caught_up(bootstrap: str, topology: str, source: str) -> bool:
    return lag(bootstrap, f"{topology}-spout", source) == 0


def _effects(bootstrap: str, topic: str) -> Counter:
    return Counter(int(m.value()) for m in read_topic(bootstrap, topic))


def test_a_fenced_spout_producer_is_replaced_not_blamed_on_the_records(kafka_bootstrap):
    topology, topics = _topology(kafka_bootstrap, "txn-fence")
    produce_values(kafka_bootstrap, topics["source"], [str(i).encode() for i in range(400)])
    acker, spout, bolt = _components(kafka_bootstrap, topology, topics)
    with LocalCluster(acker, spout, bolt) as cluster:
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, topology, topics["source"]), timeout=120, what="first half committed"
        )
        # a zombie with the spout's transactional.id fences the running spout's producer
        zombie = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topology}-spout.spout"})
        zombie.init_transactions(30)
        produce_values(kafka_bootstrap, topics["source"], [str(i).encode() for i in range(400, 800)])
        cluster.wait_until(
            lambda: _caught_up(kafka_bootstrap, topology, topics["source"]),
            timeout=180,
            what="second half committed after the fence",
            progress=lambda: str(spout.stats),
        )
    assert spout.stats.handler_errors == 0  # a dead producer is not the records' fault
    effects = _effects(kafka_bootstrap, topics["sink"])
    assert sorted(effects) == list(range(800)) and set(effects.values()) == {1}


def test_a_successor_redelivers_thousands_of_failed_in_flight_records(kafka_bootstrap):
    """The state a spout left when a broker restart timed out its trees: 3000 records in flight,
    their TIMED_OUT outcomes consumed. Its successor reads them again in a few passes and brings
    each to the sink once (one read per record took half a second: 25 minutes here)."""
    topology, topics = _topology(kafka_bootstrap, "txn-adopt", source_partitions=1)
    records = 3000
    produce_values(kafka_bootstrap, topics["source"], [str(i).encode() for i in range(records)])
    group = f"{topology}-spout"
    _predecessor_left(kafka_bootstrap, group, topics["source"], failed=records, emitted_upto=records, attempt=1)
    acker, spout, bolt = _components(kafka_bootstrap, topology, topics)
    with LocalCluster(acker, spout, bolt) as cluster:
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topics["source"]).get(0) == records,
            timeout=240,
            what="every adopted record redelivered and completed",
            progress=lambda: str(spout.stats),
        )
    assert spout.stats.replayed == records and spout.stats.read == 0  # nothing past e was read again
    effects = _effects(kafka_bootstrap, topics["sink"])
    assert sorted(effects) == list(range(records)) and set(effects.values()) == {1}


def test_a_record_deleted_while_in_flight_is_parked_as_a_reference_that_dlq_shows_and_replay_skips(
    kafka_bootstrap, capsys, monkeypatch
):
    """A predecessor left 0-4 failed (their outcomes consumed); retention (here delete_records) took
    0-2 before the successor read them again. Each leaves a dead-letter reference with its
    coordinates and attempt history, the commit passes it, and 3-19 reach the sink once: nothing
    else is lost. The first round that parks them aborts: they are parked and counted once."""
    topology, topics = _topology(kafka_bootstrap, "txn-gone", source_partitions=1)
    source, group = topics["source"], f"{topology}-spout"
    produce_values(kafka_bootstrap, topics["source"], [str(i).encode() for i in range(20)])
    _predecessor_left(kafka_bootstrap, group, source, failed=5, emitted_upto=5, attempt=2)
    admin = admin_client(kafka_bootstrap)  # held: its futures resolve only while the client lives
    for future in admin.delete_records([TopicPartition(source, 0, 3)]).values():
        assert future.result(timeout=30).low_watermark == 3
    acker, spout, bolt = _components(kafka_bootstrap, topology, topics)
    park_reference, parked, commit, forced = transactional.park_reference, [], spout._transactions.commit, []

    def noted(*args, **kwargs):
        parked.append(kwargs["parked"].source_offset)
        park_reference(*args, **kwargs)

    def abort_the_first_round_with_references(offsets, group_metadata):
        written, parked[:] = list(parked), []
        if written and not forced:  # references were written in this transaction
            forced.append(written)
            raise KafkaException(KafkaError(KafkaError._FAIL, "forced abort (test)"))
        commit(offsets, group_metadata)

    monkeypatch.setattr(transactional, "park_reference", noted)
    spout._transactions.commit = abort_the_first_round_with_references
    with LocalCluster(acker, spout, bolt) as cluster:
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, source).get(0) == 20,
            timeout=180,
            what="the commit passed the deleted records and the rest completed",
            progress=lambda: str(spout.stats),
        )
    assert forced and set(forced[0]) <= {0, 1, 2} and spout._transactions.aborted >= 1  # it did abort
    assert spout.stats.expired_in_flight == 3  # counted once committed: not for the aborted round too
    assert spout.stats.read == 20 - 5  # 5-19 counted once, as committed, whatever the aborted round read
    effects = _effects(kafka_bootstrap, topics["sink"])
    assert sorted(effects) == list(range(3, 20)) and set(effects.values()) == {1}
    letters = dlq.read_dead_letters(kafka_bootstrap, topology)
    assert [(d.key, d.value, d.source, d.parked.attempts, d.parked.reason) for d in letters] == [
        (None, None, (source, 0, offset), 2, "deleted from Kafka (retention) while in flight") for offset in range(3)
    ]
    on = ["--topology", topology, "--bootstrap-servers", kafka_bootstrap]
    capsys.readouterr()
    assert main(["dlq", "list", *on]) == 0
    listed = capsys.readouterr().out
    assert listed.count("[reference, no value] deleted from Kafka (retention)") == 3 and f"{source}[0]@2" in listed
    assert main(["dlq", "show", str(letters[0].offset), "--partition", str(letters[0].partition), *on]) == 0
    shown = capsys.readouterr().out
    assert f"value     none: a reference without the record: Kafka deleted {source}[0]@0" in shown
    assert "  attempt 2: FAILED at " in shown  # the attempt history (rk-attempts), as a copy shows it
    assert [[(a.attempt, a.outcome) for a in d.attempts] for d in letters] == [[(2, "FAILED")]] * 3
    assert main(["dlq", "replay", *on, "--all"]) == 0
    replayed = capsys.readouterr().out
    assert "0 sent, 3 skipped (3 references without the record)" in replayed
    assert f"Kafka deleted {source}[0]@1 before it could be parked; nothing to replay" in replayed
    assert end_offsets(kafka_bootstrap, source) == {0: 20}  # nothing (no empty record) was sent back


def test_the_largest_commit_metadata_we_write_is_accepted_by_the_broker(kafka_bootstrap):
    """Kafka 4.1 refuses exactly 4096 characters, though offset.metadata.max.bytes is 4096; a
    spout whose state filled it could then never commit again."""
    topology, topics = _topology(kafka_bootstrap, "txn-meta", source_partitions=1)
    produce_values(kafka_bootstrap, topics["source"], [b"x"])
    every_other = range(1, 200_000, 2)
    plain, plain_truncated = encode_done_above(0, every_other)
    state, state_truncated = encode_spout_state(
        0,
        every_other,
        emitted_upto=200_000,
        outcome_position=10**9,
        attempts={o: 2 for o in range(0, 200_000, 2)},
        failed=range(0, 200_000, 4),
    )
    assert plain_truncated and state_truncated
    assert len(plain) >= DEFAULT_MAX_BYTES - 3 and len(state) >= DEFAULT_MAX_BYTES - 3  # full to the brim
    group = f"{topology}-spout"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topics["source"], 0, 0, plain)], asynchronous=False)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topology}.meta"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition(topics["source"], 0, 1, state)], consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
    (committed,) = consumer.committed([TopicPartition(topics["source"], 0)], timeout=30)
    consumer.close()
    assert (committed.offset, committed.metadata) == (1, state)


def test_a_dead_letter_and_the_commit_past_its_record_are_one_transaction(kafka_bootstrap):
    """A predecessor left 0-4 failed on their last attempt: the successor parks them in the DLQ.
    The round after the transaction that parked them aborts (as a crash there would end it): the
    spout rebuilds from that transaction's commit, which already passed them, so each is parked
    once (before, that commit left them failed in flight, and the rebuild parked them again)."""
    topology, topics = _topology(kafka_bootstrap, "txn-dlq", source_partitions=1)
    source, group = topics["source"], f"{topology}-spout"
    produce_values(kafka_bootstrap, source, [str(i).encode() for i in range(20)])
    # their attempt 6 failed; max_retries is 5: dead letters
    _predecessor_left(kafka_bootstrap, group, source, failed=5, emitted_upto=5, attempt=6)
    acker, spout, bolt = _components(kafka_bootstrap, topology, topics)
    write_dead_letters, commit = spout._roots.write_dead_letters, spout._transactions.commit
    rounds: list[str] = []  # what each transaction that held dead letters, and the one after, did

    def noted() -> int:
        written = write_dead_letters()
        if written:
            rounds.append(f"parked {written}")
        return written

    def abort_the_round_after_the_dead_letters(offsets, group_metadata):
        if rounds and rounds[-1].startswith("parked"):
            commit(offsets, group_metadata)
            rounds.append("committed")
            return
        if rounds == ["parked 5", "committed"]:
            rounds.append("aborted")
            raise KafkaException(KafkaError(KafkaError._FAIL, "forced abort (test)"))
        commit(offsets, group_metadata)

    spout._roots.write_dead_letters = noted
    spout._transactions.commit = abort_the_round_after_the_dead_letters
    with LocalCluster(acker, spout, bolt) as cluster:
        cluster.wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, source).get(0) == 20,
            timeout=180,
            what="the commit passed the dead letters and the rest completed",
            progress=lambda: f"{spout.stats}; rounds {rounds}",
        )
    assert rounds[:3] == ["parked 5", "committed", "aborted"], rounds
    letters = dlq.read_dead_letters(kafka_bootstrap, topology)
    assert sorted(d.source for d in letters) == [(source, 0, offset) for offset in range(5)]  # each once
    assert spout.stats.dead_lettered == 5
    effects = _effects(kafka_bootstrap, topics["sink"])
    assert sorted(effects) == list(range(5, 20)) and set(effects.values()) == {1}
