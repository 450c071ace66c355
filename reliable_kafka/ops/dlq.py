"""The dead-letter topic for operators: list, show and replay ``<topology>.dlq``.

Reading is plain: the whole DLQ (read_committed) decoded into :class:`DeadLetter` values. Replay
sends a dead letter's original key, value and headers back to its source topic and partition (or
to another topic) with the lineage header ``rk-replayed-from: <dlq>[p]@o``, and records each
replayed DLQ offset in the compacted ``<topology>.dlq-replayed`` topic *in the same Kafka
transaction* as the replayed record, so a replay is idempotent: an offset recorded there is never
sent again, and a replay that dies mid-way leaves neither the copy nor the mark. Replays of one
topology share one transactional id: a second replay running at once fences the first.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from reliable_kafka import codec
from reliable_kafka.codec import ATTEMPTS_HEADER, REASON_HEADER
from reliable_kafka.errors import DecodeError, ReliableKafkaError, TopologyError
from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.ops.failures import Attempt, decode_attempts
from reliable_kafka.topology import TopologyTopics

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message
    from confluent_kafka.admin import AdminClient

__all__ = [
    "LINEAGE_HEADER",
    "DeadLetter",
    "ReplayReport",
    "read_dead_letters",
    "select",
    "replayed",
    "replay",
    "check_target",
    "replay_mark_text",
    "parse_time",
    "render_list",
    "render_one",
]

LINEAGE_HEADER = "rk-replayed-from"

ReplayMark = dict[str, Any]
"""What a replay recorded for a dead letter in ``<topology>.dlq-replayed``: ``to``, ``at_ms``,
``reason`` and ``by`` (JSON, as written; older marks may lack some)."""
_OURS = {codec.PARKED_HEADER, ATTEMPTS_HEADER, REASON_HEADER, LINEAGE_HEADER, codec.ANCHORS_HEADER}


@dataclass
class DeadLetter:
    """One record of the dead-letter topic, with why and from where it was parked."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    parked: codec.ParkedRecord | None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def reason(self) -> str:
        for name, value in self.headers:
            if name == REASON_HEADER and value is not None:
                return value.decode(errors="replace")
        return self.parked.reason if self.parked else "unknown (no rk-parked header)"

    def reasons(self) -> list[str]:
        found = [r for a in self.attempts for r in a.reasons()] or [a.outcome for a in self.attempts]
        return found + ([self.parked.reason] if self.parked else [])

    def components(self) -> set[str]:
        found = {f["component"] for a in self.attempts for f in a.failures}
        if self.parked and self.parked.component:
            found.add(self.parked.component)
        return found

    @property
    def reference(self) -> str | None:
        """Why this dead letter holds no copy of the record (None: it does): a reference parks only
        the ``rk-parked`` header, with the record's coordinates."""
        parked = self.parked
        if parked is None or not parked.value_omitted:
            return None
        where = f"{parked.source_topic}[{parked.source_partition}]@{parked.source_offset}"
        if parked.original_bytes < 0:  # kafka.parking.park_reference: the record was gone
            return f"a reference without the record: Kafka deleted {where} before it could be parked"
        return f"a reference without the record: {where} ({parked.original_bytes} bytes) was too large to copy"

    @property
    def source(self) -> tuple[str, int, int] | None:
        if self.parked is None:
            return None
        return self.parked.source_topic, self.parked.source_partition, self.parked.source_offset

    def original_headers(self) -> list[tuple[str, bytes]]:
        """The headers the source record had (the layer's own are dropped)."""
        return [(k, v) for k, v in self.headers if k not in _OURS]

    @property
    def replayed_from(self) -> list[str]:
        """The dead letters this record was replayed from, oldest first (empty: never replayed)."""
        return [_text(v) or "" for k, v in self.headers if k == LINEAGE_HEADER and v is not None]

    def as_json(self) -> dict[str, Any]:
        parked = self.parked
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "reason": self.reason,
            "source": None
            if parked is None
            else {
                "topic": parked.source_topic,
                "partition": parked.source_partition,
                "offset": parked.source_offset,
                "timestamp_ms": parked.source_timestamp_ms,
            },
            "parked_by": parked.component if parked else None,
            "parked_reason": parked.reason if parked else None,
            "parked_at_ms": parked.parked_at_ms if parked else None,
            "reference": self.reference,
            "replayed_from": self.replayed_from,
            "attempt_count": parked.attempts if parked else None,
            "attempts": [a.__dict__ for a in self.attempts],
            "components": sorted(self.components()),
            "key": _text(self.key),
            "value": _text(self.value),
            "headers": [[k, _text(v)] for k, v in self.original_headers()],
        }


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "0x" + raw.hex()


def _consumer(bootstrap_servers: str, topology: str, kafka_config: dict[str, Any] | None) -> Consumer:
    from reliable_kafka.kafka.clients import new_consumer

    overrides: dict[str, Any] = {"isolation.level": "read_committed"}  # not a Python name: passed as a dict
    return new_consumer(bootstrap_servers, f"{topology}.dlq-reader", kafka_config, **overrides)


def _read_all(consumer: Consumer, topic: str, timeout: float) -> list[Message]:
    """Every committed record of ``topic``, from the beginning to its end offsets of now."""
    metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        return []
    ends = {}
    for p in metadata.partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
        if high > low:
            ends[p] = high
    if not ends:
        return []
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    positions = {p: -1 for p in ends}
    messages = []
    deadline = time.monotonic() + timeout
    while any(positions[p] + 1 < ends[p] for p in ends):
        if time.monotonic() > deadline:
            raise ReliableKafkaError(
                f"reading {topic} did not reach its end offsets {ends} within {timeout:.0f}s "
                f"(read up to {positions}); is the broker up? try again with a longer --timeout"
            )
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            if message.error() is not None:
                continue
            _, partition, offset = coordinates(message)
            positions[partition] = offset
            messages.append(message)
        # transaction markers hold the last offsets: the position tells when the end is passed
        for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
            if tp.offset >= ends[tp.partition]:
                positions[tp.partition] = ends[tp.partition] - 1
    return messages


def read_dead_letters(
    bootstrap_servers: str, topology: str, *, kafka_config: dict[str, Any] | None = None, timeout: float = 60.0
) -> list[DeadLetter]:
    """Every dead letter of ``topology``, in partition and offset order."""
    topics = TopologyTopics(topology)
    consumer = _consumer(bootstrap_servers, topology, kafka_config)
    try:
        messages = _read_all(consumer, topics.dlq, timeout)
    finally:
        consumer.close()
    letters = []
    for message in messages:
        # a consumed record's headers are (name, value) pairs (the stubs also allow a dict)
        headers = cast("list[tuple[str, bytes]]", list(message.headers() or []))
        parked = None
        raw = [v for k, v in headers if k == codec.PARKED_HEADER]
        if raw:
            try:
                parked = codec.decode_parked(raw[-1])
            except DecodeError:
                parked = None
        attempts = decode_attempts(next((v for k, v in headers if k == ATTEMPTS_HEADER), None))
        timestamp = message.timestamp()
        _, partition, offset = coordinates(message)
        letters.append(
            DeadLetter(
                partition,
                offset,
                timestamp[1] if timestamp else -1,
                message.key(),
                message.value(),
                headers,
                parked,
                attempts,
            )
        )
    letters.sort(key=lambda d: (d.partition, d.offset))
    return letters


def select(
    letters: list[DeadLetter],
    *,
    reason: str | None = None,
    source_topic: str | None = None,
    source_partition: int | None = None,
    component: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    offsets: list[tuple[int, int]] | None = None,
) -> list[DeadLetter]:
    """The dead letters matching every given filter (``reason`` and ``component``: substrings,
    any case; times: when parked; ``offsets``: DLQ (partition, offset) pairs)."""
    wanted = set(offsets) if offsets else None
    out = []
    for letter in letters:
        source = letter.source
        parked_at = letter.parked.parked_at_ms if letter.parked else letter.timestamp_ms
        if wanted is not None and (letter.partition, letter.offset) not in wanted:
            continue
        if reason and not any(reason.lower() in r.lower() for r in [letter.reason, *letter.reasons()]):
            continue
        if component and not any(component.lower() in c.lower() for c in letter.components()):
            continue
        if source_topic is not None and (source is None or source[0] != source_topic):
            continue
        if source_partition is not None and (source is None or source[1] != source_partition):
            continue
        if since_ms is not None and parked_at < since_ms:
            continue
        if until_ms is not None and parked_at > until_ms:
            continue
        out.append(letter)
    return out


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_time(text: str, *, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from ``1700000000000`` (ms), ISO 8601 (UTC unless it says
    otherwise) or a time ago: ``90s``, ``15m``, ``2h``, ``1d``."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    if text.isdigit():
        return int(text)
    match = _RELATIVE.match(text)
    if match:
        unit = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[match.group(2)]
        return now_ms - int(float(match.group(1)) * unit)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ReliableKafkaError(
            f"cannot read time {text!r}: give ms since the epoch, ISO 8601 (2026-11-23T18:00) or an age "
            f"such as 15m, 2h, 1d"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def replayed(
    bootstrap_servers: str, topology: str, *, kafka_config: dict[str, Any] | None = None, timeout: float = 60.0
) -> dict[tuple[int, int], ReplayMark]:
    """DLQ (partition, offset) -> what its replay recorded, from ``<topology>.dlq-replayed``."""
    topics = TopologyTopics(topology)
    consumer = _consumer(bootstrap_servers, topology, kafka_config)
    try:
        messages = _read_all(consumer, topics.dlq_replayed, timeout)
    finally:
        consumer.close()
    marks: dict[tuple[int, int], ReplayMark] = {}
    for message in messages:
        try:
            # a record without a key or value: AttributeError or TypeError, skipped below
            partition, offset = (int(x) for x in message.key().decode().split(":"))  # type: ignore[union-attr]
            marks[(partition, offset)] = json.loads(message.value())  # type: ignore[arg-type]
        except (AttributeError, ValueError, TypeError):
            continue  # not ours: ignored
    return marks


def check_target(bootstrap_servers: str, to: str, *, kafka_config: dict[str, Any] | None = None) -> None:
    """Raise at once when topic ``to`` does not exist: a replay to it would send nothing."""
    from reliable_kafka.kafka.admin import admin_client

    if to not in admin_client(bootstrap_servers, kafka_config).list_topics(timeout=30).topics:
        raise ReliableKafkaError(
            f"dlq replay: topic {to!r} does not exist; create it first or leave out --to to send each "
            f"record back to its source topic"
        )


def replay_mark_text(mark: ReplayMark) -> str:
    """A replay mark as a person reads it: where, when (UTC) and by whom."""
    by = f" by {mark['by']}" if mark.get("by") else ""
    return f"replayed to {mark.get('to')} at {_when(mark.get('at_ms'))} UTC{by}"


def _replayer() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        user = "?"
    return f"{user}@{socket.gethostname()}"


@dataclass
class ReplayReport:
    sent: list[dict[str, Any]] = field(default_factory=list)  # {dlq, to, partition}
    skipped: list[dict[str, str]] = field(default_factory=list)  # {dlq, why}
    references: int = 0  # of the skipped: references without the record, nothing to replay
    dry_run: bool = False


def _ensure_replayed_topic(admin: AdminClient, topics: TopologyTopics) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    if topics.dlq_replayed in admin.list_topics(timeout=30).topics:
        return
    new = NewTopic(topics.dlq_replayed, num_partitions=1, replication_factor=1, config={"cleanup.policy": "compact"})
    for topic, future in admin.create_topics([new], operation_timeout=30).items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise TopologyError(f"cannot create {topic}: {exc}") from exc


def replay(
    bootstrap_servers: str,
    topology: str,
    letters: list[DeadLetter],
    *,
    to: str | None = None,
    rate: float = 100.0,
    dry_run: bool = False,
    kafka_config: dict[str, Any] | None = None,
    batch: int = 100,
    force: bool = False,
) -> ReplayReport:
    """Send ``letters`` back to their source topic and partition (or to topic ``to``), at most
    ``rate`` records a second, each once ever (see the module doc); ``force`` sends letters
    replayed before once more, on purpose; ``dry_run`` sends nothing."""
    from reliable_kafka.kafka.admin import admin_client
    from reliable_kafka.kafka.clients import new_producer

    if rate <= 0:
        raise ReliableKafkaError(f"dlq replay: --rate must be > 0, got {rate}")
    topics = TopologyTopics(topology)
    report = ReplayReport(dry_run=dry_run)
    done = replayed(bootstrap_servers, topology, kafka_config=kafka_config)
    admin = admin_client(bootstrap_servers, kafka_config)
    existing = admin.list_topics(timeout=30).topics
    if to is not None and to not in existing:
        check_target(bootstrap_servers, to, kafka_config=kafka_config)  # raises
    todo = []
    for letter in letters:
        where = f"{topics.dlq}[{letter.partition}]@{letter.offset}"
        if (letter.partition, letter.offset) in done and not force:
            mark = done[(letter.partition, letter.offset)]
            report.skipped.append({"dlq": where, "why": f"already {replay_mark_text(mark)} (--force sends it again)"})
            continue
        if letter.reference is not None and letter.parked is not None:  # sending it would make an empty record
            report.references += 1
            what = "nothing to replay" if letter.parked.original_bytes < 0 else "replay it from its source yourself"
            report.skipped.append({"dlq": where, "why": f"{letter.reference}; {what}"})
            continue
        if to is None and letter.source is None:
            report.skipped.append({"dlq": where, "why": "no rk-parked header: source unknown; give --to"})
            continue
        source = letter.source
        target = to or (source[0] if source else "")
        if target not in existing:
            report.skipped.append({"dlq": where, "why": f"topic {target} does not exist"})
            continue
        partition = None
        if to is None and source is not None and source[1] in existing[target].partitions:
            partition = source[1]  # back where it came from: its key's order is kept
        todo.append((letter, where, target, partition))
    if dry_run or not todo:
        report.sent = [{"dlq": w, "to": t, "partition": p} for _, w, t, p in todo]
        return report
    _ensure_replayed_topic(admin, topics)
    overrides: dict[str, Any] = {"transactional.id": f"{topology}.dlq-replay"}
    producer = new_producer(bootstrap_servers, kafka_config, **overrides)
    producer.init_transactions(30)  # fences another replay of this topology still running
    by = _replayer()
    started = time.monotonic()
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        producer.begin_transaction()
        for letter, where, target, partition in chunk:
            kwargs: dict[str, Any] = {
                "key": letter.key,
                # the lineage so far (a letter replayed before and parked again), then this hop
                "headers": letter.original_headers()
                + [(LINEAGE_HEADER, hop.encode()) for hop in letter.replayed_from]
                + [(LINEAGE_HEADER, where.encode())],
            }
            if partition is not None:
                kwargs["partition"] = partition
            producer.produce(target, letter.value, **kwargs)
            mark = {"to": target, "at_ms": int(time.time() * 1000), "reason": letter.reason, "by": by}
            producer.produce(
                topics.dlq_replayed, json.dumps(mark).encode(), key=f"{letter.partition}:{letter.offset}".encode()
            )
            report.sent.append({"dlq": where, "to": target, "partition": partition})
        producer.commit_transaction(60)
        # rate limit: the next chunk waits until the records so far fit in rate/second
        wait = len(report.sent) / rate - (time.monotonic() - started)
        if wait > 0 and start + batch < len(todo):
            time.sleep(wait)
    return report


def _when(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def render_list(letters: list[DeadLetter]) -> str:
    if not letters:
        return "no dead letters match"
    lines = [f"{'DLQ':>10}  {'PARKED (UTC)':19}  {'SOURCE':28}  {'TRIES':>5}  {'COMPONENTS':20}  REASON"]
    for d in letters:
        source = f"{d.source[0]}[{d.source[1]}]@{d.source[2]}" if d.source else "?"
        parked_at = d.parked.parked_at_ms if d.parked else d.timestamp_ms
        lines.append(
            f"{d.partition:>3}@{d.offset:<6}  {_when(parked_at):19}  "
            f"{source:28}  {d.parked.attempts if d.parked else '?':>5}  "
            f"{','.join(sorted(d.components()))[:20]:20}  {'[reference, no value] ' if d.reference else ''}"
            f"{'[replayed from ' + d.replayed_from[-1] + '] ' if d.replayed_from else ''}{d.reason}"
        )
    lines.append(f"{len(letters)} dead letter(s)")
    return "\n".join(lines)


def render_one(
    letter: DeadLetter,
    marks: dict[tuple[int, int], ReplayMark] | None = None,
    last_acks: dict[int, dict[str, Any] | None] | None = None,
) -> str:
    """``dlq show``; ``last_acks``: root -> the last ACK of a timed-out attempt's tree (or None)."""
    d = letter.as_json()
    lines = [f"dead letter {d['partition']}@{d['offset']}  reason: {d['reason']}"]
    if d["source"]:
        s = d["source"]
        lines.append(f"  source    {s['topic']}[{s['partition']}]@{s['offset']} (written {_when(s['timestamp_ms'])})")
    lines.append(f"  parked    by {d['parked_by']} at {_when(d['parked_at_ms'])} UTC: {d['parked_reason']}")
    for hop in d["replayed_from"]:
        lines.append(f"  lineage   replayed from {hop}")
    if d["reference"]:
        lines.append(f"  value     none: {d['reference']}")
    else:
        lines.append(f"  key       {d['key']!r}")
        lines.append(f"  value     {(d['value'] or '')[:200]!r}")
    for name, value in d["headers"]:
        lines.append(f"  header    {name}={value!r}")
    for a in letter.attempts:
        lines.append(f"  attempt {a.attempt}: {a.outcome} at {_when(a.at_ms)} (root {a.root})")
        if last_acks is not None and a.root in last_acks:
            last = last_acks[a.root]
            lines.append(
                f"    last ACK before the timeout: {last['from'] or last['task_id']} at {_when(last['at_ms'])}"
                if last
                else "    no ACK at all before the timeout: the first hop never acked"
            )
        for f in a.failures:
            on = f.get("tuple")
            where = f" on {on['topic']}[{on['partition']}]@{on['offset']}" if on else ""
            error = f" [{f['error_type']}]" if f.get("error_type") else ""
            lines.append(
                f"    failed by {f['component']}{where} at {_when(f['at_ms'])}: {f['reason']}{error}"
                f"{'' if f.get('retry', True) else ' (retry=False)'}"
            )
    if marks and (letter.partition, letter.offset) in marks:
        lines.append(f"  replay    {replay_mark_text(marks[(letter.partition, letter.offset)])}")
    return "\n".join(lines)
