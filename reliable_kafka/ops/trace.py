"""``reliable-kafka trace``: one source record's trees, read back from the topology's logs.

Roots are random, so a record's roots are found in a small index the spout writes about once a
second (the Spark spout: with each batch's INITs): ``<topology>.roots``, one record per source
partition and send, key ``<topic>:<partition>``, value = format byte 1, the spout's task id (int64
big-endian), then (offset, root) pairs as little-endian int64: 16 bytes per root (an INIT entry
itself is 17 bytes). The trace then reads, from a little before the index entry's time:
the ack partition of each root (``root mod N``) for its INIT, ACK, FAIL and RESET_TIMEOUT entries
and their senders, the spout's outcome partition for the outcome, ``<topology>.failures`` for the
reasons and ``<topology>.dlq`` for a dead letter. Task ids become component names through the
status snapshots (``task_id``) and the failure records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from confluent_kafka import TopicPartition

from reliable_kafka import codec
from reliable_kafka.codec.root_index import decode_root_index
from reliable_kafka.core.kinds import EventKind, OutcomeKind
from reliable_kafka.errors import DecodeError, ReliableKafkaError
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

__all__ = [
    "parse_coordinates",
    "trace",
    "last_ack_before",
    "last_acks",
    "render",
    "recent_failures",
    "render_failures",
]

_MARGIN_MS = 60_000  # clocks of producers and the broker differ a little; entries are read this far back
_U64 = (1 << 64) - 1


def parse_coordinates(text: str) -> tuple[str, int, int]:
    """``TOPIC:PARTITION@OFFSET`` (also ``TOPIC[PARTITION]@OFFSET``)."""
    try:
        where, offset = text.rsplit("@", 1)
        if where.endswith("]"):
            topic, partition = where[:-1].rsplit("[", 1)
        else:
            topic, partition = where.rsplit(":", 1)
        return topic, int(partition), int(offset)
    except ValueError:
        raise ReliableKafkaError(
            f"trace: cannot read {text!r}; give TOPIC:PARTITION@OFFSET, e.g. orders:3@1200"
        ) from None


def _consumer(bootstrap_servers: str, topology: str, kafka_config: dict[str, Any] | None) -> Consumer:
    from reliable_kafka.kafka.clients import new_consumer

    overrides: dict[str, Any] = {"isolation.level": "read_committed"}  # not a Python name: passed as a dict
    return new_consumer(bootstrap_servers, f"{topology}.trace-reader", kafka_config, **overrides)


def _scan(consumer: Consumer, topic: str, partitions: list[int], since_ms: int, *, timeout: float) -> Iterator[Message]:
    """Every committed message of ``partitions`` written at or after ``since_ms``, up to the end of now."""
    ends: dict[int, int] = {}
    starts = consumer.offsets_for_times([TopicPartition(topic, p, max(0, since_ms)) for p in partitions], timeout=10)
    assign = []
    for tp in starts:
        end = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10, cached=False)[1]
        if tp.offset >= 0 and tp.offset < end:
            ends[tp.partition] = end
            assign.append(TopicPartition(topic, tp.partition, tp.offset))
    if not assign:
        return
    consumer.assign(assign)
    deadline = time.monotonic() + timeout
    try:
        while ends:
            if time.monotonic() > deadline:
                raise ReliableKafkaError(
                    f"trace: reading {topic} took longer than {timeout:.0f}s; try a larger --timeout"
                )
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is None:
                    yield message
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
    finally:
        consumer.unassign()


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    described = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        return []
    return sorted(described.partitions)


def trace(
    bootstrap_servers: str,
    topology: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    kafka_config: dict[str, Any] | None = None,
    since_ms: int | None = None,
    timeout: float = 120.0,
    transactional_group: str | None = None,
    max_attempts: int = 20,
) -> dict[str, Any]:
    """The trace document of the source record ``topic[partition]@offset`` (docs/operations.md).

    ``transactional_group``: the record was read by a transactional spout of this consumer group,
    whose roots are derived from (group, topic, partition, offset, attempt): attempts 1 to
    ``max_attempts`` are derived instead of looked up, and those with no ack entry are dropped.
    """
    from reliable_kafka.ops import dlq as dlq_module
    from reliable_kafka.ops.failures import decode_failure
    from reliable_kafka.ops.status import read_snapshots

    topics = TopologyTopics(topology)
    names: dict[int, str] = {}  # task id -> component name
    consumer = _consumer(bootstrap_servers, topology, kafka_config)
    try:
        record_ms = _record_time(consumer, topic, partition, offset)
        start_ms = since_ms if since_ms is not None else (record_ms - _MARGIN_MS if record_ms is not None else 0)
        key = f"{topic}:{partition}".encode()
        roots: dict[int, dict[str, Any]] = {}  # root -> attempt document
        for message in _scan(consumer, topics.roots, _partitions(consumer, topics.roots), start_ms, timeout=timeout):
            if message.key() != key:
                continue
            try:
                spout, pairs = decode_root_index(message.value())
            except DecodeError:
                continue
            for at, root in pairs:
                if at == offset and root not in roots:
                    roots[root] = {
                        "root": root,
                        "spout_task_id": spout,
                        "indexed_ms": message.timestamp()[1],
                        "events": [],
                        "outcome": None,
                        "failures": [],
                    }
        if transactional_group is not None:
            from reliable_kafka.core.ids import derive_root, owner_id

            owner = owner_id(transactional_group, topic, partition)
            for attempt in range(1, max_attempts + 1):
                roots[derive_root(owner, offset, attempt)] = {
                    "root": derive_root(owner, offset, attempt),
                    "spout_task_id": owner,
                    "derived_attempt": attempt,
                    "indexed_ms": record_ms if record_ms is not None else start_ms + _MARGIN_MS,
                    "events": [],
                    "outcome": None,
                    "failures": [],
                }
        ack_partitions = _partitions(consumer, topics.acks)
        if roots and ack_partitions:
            first_ms = min(r["indexed_ms"] for r in roots.values()) - _MARGIN_MS
            wanted = {(root & _U64) % len(ack_partitions) for root in roots}
            for message in _scan(consumer, topics.acks, sorted(wanted), first_ms, timeout=timeout):
                try:
                    batch = codec.decode_ack_batch(message.value())
                except DecodeError:
                    continue
                for kind, root, val in zip(batch.kinds.tolist(), batch.roots.tolist(), batch.vals.tolist()):
                    if root in roots:
                        roots[root]["events"].append(
                            {
                                "kind": EventKind(kind).name if kind in EventKind._value2member_map_ else str(kind),
                                "task_id": batch.sender,
                                "val": val,
                                "at_ms": message.timestamp()[1],
                                "ack_offset": f"{message.partition()}@{message.offset()}",
                            }
                        )
            outcome_partitions = _partitions(consumer, topics.outcomes)
            spouts = {r["spout_task_id"] for r in roots.values()}
            if outcome_partitions:
                outcome_wanted = sorted({(s & _U64) % len(outcome_partitions) for s in spouts})
                for message in _scan(consumer, topics.outcomes, outcome_wanted, first_ms, timeout=timeout):
                    try:
                        outcomes = codec.decode_outcomes(message.value())
                    except DecodeError:
                        continue
                    for root, kind in zip(outcomes.roots.tolist(), outcomes.kinds.tolist()):
                        if root in roots and roots[root]["outcome"] is None and outcomes.spout in spouts:
                            roots[root]["outcome"] = {"kind": OutcomeKind(kind).name, "at_ms": message.timestamp()[1]}
            for message in _scan(
                consumer, topics.failures, _partitions(consumer, topics.failures), first_ms, timeout=timeout
            ):
                failure = decode_failure(message.value())
                if failure is None:
                    continue
                names[failure.task_id] = failure.component
                for root in failure.roots:
                    if root in roots:
                        roots[root]["failures"].append(failure.__dict__)
    finally:
        consumer.close()
    try:
        snapshots = read_snapshots(bootstrap_servers, topology, kafka_config=kafka_config)
    except ReliableKafkaError:
        snapshots = {}
    names.update({s["task_id"]: name for name, s in snapshots.items() if s.get("task_id") is not None})
    if transactional_group is not None:  # derived roots that never had an INIT were never emitted
        roots = {root: r for root, r in roots.items() if r["events"] or r["outcome"]}
    attempts = sorted(roots.values(), key=lambda r: (r.get("derived_attempt", 0), r["indexed_ms"]))
    for number, tried in enumerate(attempts, 1):
        tried["attempt"] = number
        tried["spout"] = names.get(tried["spout_task_id"])
        xor = 0
        for event in tried["events"]:
            event["from"] = names.get(event["task_id"])
            xor ^= event["val"]
        tried["outstanding"] = tried["outcome"] is None and (xor != 0 or not tried["events"])
        decided_ms = tried["outcome"]["at_ms"] if tried["outcome"] else None
        for event in tried["events"]:
            event["after_outcome"] = decided_ms is not None and event["at_ms"] > decided_ms
        tried["last_ack"] = last_ack_before(tried["events"], decided_ms)
    letters = [
        d.as_json()
        for d in dlq_module.read_dead_letters(bootstrap_servers, topology, kafka_config=kafka_config)
        if d.source == (topic, partition, offset)
    ]
    return {
        "record": {"topic": topic, "partition": partition, "offset": offset, "timestamp_ms": record_ms},
        "attempts": attempts,
        "dead_letters": letters,
    }


def last_ack_before(events: list[dict[str, Any]], decided_ms: int | None) -> dict[str, Any] | None:
    """The last ACK of a tree logged at or before its outcome (``decided_ms``; None: no outcome
    yet, the last ACK). An ACK logged after the outcome came too late to count: the hop that
    sent it is not the one where the tree stopped."""
    acks = [e for e in events if e["kind"] == "ACK" and (decided_ms is None or e["at_ms"] <= decided_ms)]
    return acks[-1] if acks else None


def last_acks(
    bootstrap_servers: str,
    topology: str,
    roots: dict[int, int],
    *,
    kafka_config: dict[str, Any] | None = None,
    timeout: float = 60.0,
) -> dict[int, dict[str, Any] | None]:
    """root -> the last ACK entry of its tree logged at or before ``roots[root]`` (ms: when its
    outcome was decided) as {``task_id``, ``from``, ``at_ms``}, or None: where a timed-out tree
    stopped. Reads each root's ack partition from two minutes before."""
    from reliable_kafka.ops.status import read_snapshots

    found: dict[int, dict[str, Any] | None] = {root: None for root in roots}
    if not roots:
        return found
    topics = TopologyTopics(topology)
    consumer = _consumer(bootstrap_servers, topology, kafka_config)
    try:
        partitions = _partitions(consumer, topics.acks)
        if partitions:
            wanted = sorted({(root & _U64) % len(partitions) for root in roots})
            since = min(roots.values()) - 2 * _MARGIN_MS
            for message in _scan(consumer, topics.acks, wanted, since, timeout=timeout):
                try:
                    batch = codec.decode_ack_batch(message.value())
                except DecodeError:
                    continue
                at_ms = message.timestamp()[1]
                for kind, root in zip(batch.kinds.tolist(), batch.roots.tolist()):
                    if kind == EventKind.ACK and root in found and at_ms <= roots[root]:
                        found[root] = {"task_id": batch.sender, "at_ms": at_ms}
    finally:
        consumer.close()
    try:
        names = {
            s["task_id"]: n
            for n, s in read_snapshots(bootstrap_servers, topology, kafka_config=kafka_config).items()
            if s.get("task_id")
        }
    except ReliableKafkaError:
        names = {}
    for entry in found.values():
        if entry is not None:
            entry["from"] = names.get(entry["task_id"])
    return found


def _record_time(consumer: Consumer, topic: str, partition: int, offset: int) -> int | None:
    """The source record's timestamp (None when it is gone or unreadable)."""
    consumer.assign([TopicPartition(topic, partition, offset)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                return message.timestamp()[1] if message.offset() == offset else None
        return None
    finally:
        consumer.unassign()


def _when(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def render(document: dict[str, Any]) -> str:
    r = document["record"]
    lines = [f"record {r['topic']}[{r['partition']}]@{r['offset']} (written {_when(r['timestamp_ms'])} UTC)"]
    if not document["attempts"]:
        lines.append("  no trees found: never emitted by a spout that writes the root index, or before --since")
    for a in document["attempts"]:
        outcome = a["outcome"]
        state = (
            f"{outcome['kind']} at {_when(outcome['at_ms'])}"
            if outcome
            else ("OUTSTANDING (some tuple not acked yet)" if a["outstanding"] else "no outcome seen")
        )
        lines.append(f"  attempt {a['attempt']}: root {a['root']} from {a['spout'] or a['spout_task_id']} -> {state}")
        for e in a["events"]:
            late = "  after the outcome: too late to count" if e.get("after_outcome") else ""
            sender = e["from"] or e["task_id"]
            lines.append(f"    {_when(e['at_ms'])}  {e['kind']:<13} from {sender}  (acks {e['ack_offset']}){late}")
        for f in a["failures"]:
            lines.append(f"    {_when(f['at_ms'])}  failure       by {f['component']}: {f['reason']}")
        if outcome and outcome["kind"] == "TIMED_OUT":
            last = a["last_ack"]
            lines.append(
                f"    last ack before the timeout: {last['from'] or last['task_id']} at {_when(last['at_ms'])}"
                if last
                else "    no ACK at all before the timeout"
            )
    for d in document["dead_letters"]:
        lines.append(f"  dead letter {d['partition']}@{d['offset']}: {d['reason']} (parked {_when(d['parked_at_ms'])})")
    return "\n".join(lines)


# --- recent failures ------------------------------------------------------------------------------


def recent_failures(
    bootstrap_servers: str,
    topology: str,
    *,
    since_ms: int,
    kafka_config: dict[str, Any] | None = None,
    component: str | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """The ``failures`` document: every failure record since ``since_ms`` (``component``: whose
    name contains this), grouped by source record with how each record ended, read back as
    :func:`trace` does: the root index gives each failed root's source record and that record's
    later roots (its redeliveries), the outcomes topic how each attempt ended, the DLQ whether it
    was given up. A record that failed and then completed shows as ``completed after retry``."""
    from reliable_kafka.ops import dlq as dlq_module
    from reliable_kafka.ops.failures import decode_failure

    topics = TopologyTopics(topology)
    consumer = _consumer(bootstrap_servers, topology, kafka_config)
    failures = []
    try:
        for message in _scan(
            consumer, topics.failures, _partitions(consumer, topics.failures), since_ms, timeout=timeout
        ):
            failure = decode_failure(message.value())
            if failure is not None and (component is None or component.lower() in failure.component.lower()):
                failures.append(failure)
        failed_roots = {root for f in failures for root in f.roots}
        # root index: each failed root's source record, and every root that record had from then on
        source_of: dict[int, tuple[str, int, int]] = {}
        attempts: dict[tuple[str, int, int], list[int]] = {}
        if failed_roots:
            index = _scan(
                consumer, topics.roots, _partitions(consumer, topics.roots), since_ms - 2 * _MARGIN_MS, timeout=timeout
            )
            for message in index:
                try:
                    _, pairs = decode_root_index(message.value())
                    # a record without a key: AttributeError, skipped below
                    topic, partition = message.key().decode().rsplit(":", 1)  # type: ignore[union-attr]
                except (DecodeError, AttributeError, ValueError):
                    continue
                for offset, root in pairs:
                    where = (topic, int(partition), offset)
                    if root in failed_roots or where in attempts:
                        source_of[root] = where
                        if root not in attempts.setdefault(where, []):
                            attempts[where].append(root)
        outcomes: dict[int, dict[str, Any]] = {}
        wanted = set(source_of) | failed_roots
        if wanted:
            scan = _scan(
                consumer,
                topics.outcomes,
                _partitions(consumer, topics.outcomes),
                since_ms - _MARGIN_MS,
                timeout=timeout,
            )
            for message in scan:
                try:
                    batch = codec.decode_outcomes(message.value())
                except DecodeError:
                    continue
                for root, kind in zip(batch.roots.tolist(), batch.kinds.tolist()):
                    if root in wanted and root not in outcomes and kind != OutcomeKind.RESET_TIMEOUT:
                        outcomes[root] = {"kind": OutcomeKind(kind).name, "at_ms": message.timestamp()[1]}
    finally:
        consumer.close()
    parked = {
        d.source: d
        for d in dlq_module.read_dead_letters(bootstrap_servers, topology, kafka_config=kafka_config)
        if d.source in attempts
    }
    by_root: dict[int, list[dict[str, Any]]] = {}
    for f in failures:
        for root in f.roots:
            by_root.setdefault(root, []).append(f.__dict__)
    records: list[dict[str, Any]] = []
    for where, roots in attempts.items():
        tried: list[dict[str, Any]] = [
            {"root": root, "outcome": outcomes.get(root), "failures": by_root.get(root, [])} for root in roots
        ]
        failed_at = [f["at_ms"] for root in roots for f in by_root.get(root, [])]
        records.append(
            {
                "source": {"topic": where[0], "partition": where[1], "offset": where[2]},
                "attempts": tried,
                "result": _result(tried, where in parked),
                "dead_letter": None if where not in parked else f"{parked[where].partition}@{parked[where].offset}",
                "last_failure_ms": max(failed_at, default=-1),
            }
        )
    records.sort(key=lambda r: r["last_failure_ms"], reverse=True)
    unplaced = [f.__dict__ for f in failures if not any(root in source_of for root in f.roots)]
    return {"topology": topology, "since_ms": since_ms, "records": records, "unplaced": unplaced}


def _result(tried: list[dict[str, Any]], dead_lettered: bool) -> str:
    """How a source record ended, from its attempts (oldest first)."""
    if dead_lettered:
        return "dead-lettered"
    last = tried[-1]["outcome"]
    if last is None:
        return "in flight"
    if last["kind"] == "COMPLETED":
        return "completed after retry" if len(tried) > 1 else "completed"
    kind: str = last["kind"]  # an OutcomeKind's name
    return kind.lower().replace("_", " ")


def render_failures(document: dict[str, Any], *, limit: int = 50) -> str:
    """``reliable-kafka failures`` as text: one line per source record, newest failure first."""
    records, unplaced = document["records"], document["unplaced"]
    if not records and not unplaced:
        return f"no failures since {_when(document['since_ms'])} UTC"
    lines = [f"{'SOURCE':32} {'TRIES':>5}  {'RESULT':22}  LAST FAILURE"]
    for r in records[:limit]:
        s = r["source"]
        failures = [f for t in r["attempts"] for f in t["failures"]]
        last = max(failures, key=lambda f: f["at_ms"]) if failures else None
        error = f" [{last['error_type']}]" if last and last.get("error_type") else ""
        said = f"{_when(last['at_ms'])} {last['component']}: {last['reason']}{error}" if last else "-"
        result = r["result"] + (f" ({r['dead_letter']})" if r["dead_letter"] else "")
        source = f"{s['topic']}[{s['partition']}]@{s['offset']}"[-32:]
        lines.append(f"{source:32} {len(r['attempts']):>5}  {result:22}  {said}")
    if len(records) > limit:
        lines.append(f"... {len(records) - limit} more (--limit, or --json for all)")
    counts: dict[str, int] = {}
    for r in records:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    lines.append(
        f"{len(records)} source record(s) with failures since {_when(document['since_ms'])} UTC: {summary or 'none'}"
    )
    if unplaced:
        lines.append(
            f"{len(unplaced)} failure record(s) whose source record is not in the root index "
            f"(a transactional or Spark spout's, or older than --since); see --json"
        )
    return "\n".join(lines)
