"""The live page's dead-letter panel: the newest letters of ``<topology>.dlq`` and their reasons.

Reads only the tail of each DLQ partition (the last ``limit`` offsets), never the whole topic, so
the page stays cheap however many letters the topic holds. Each letter is summarised by its
``rk-reason`` header (older letters: the ``rk-parked`` reason), its source coordinates, the
component that parked it and when; the reasons are counted among the letters read, under the
words of :mod:`.reasons`. ``reliable-kafka dlq`` is the tool for the whole topic.
"""

from __future__ import annotations

import re
import time
from typing import Any, cast

from confluent_kafka import TopicPartition

from reliable_kafka import codec
from reliable_kafka.codec import REASON_HEADER
from reliable_kafka.errors import DecodeError
from reliable_kafka.ops.reasons import reason_word
from reliable_kafka.topology import TopologyTopics

__all__ = ["recent_dead_letters", "summarise", "reason_group"]

SHOWN = 20  # letters listed on the page, newest first
_ERROR_TYPE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Timeout|Failure|Warning))\b")


def reason_group(reason: str) -> str:
    """What letters are counted under: the vocabulary's word for an outcome (``timed_out``), the
    error type of a handler's exception (``ValueError``, whatever its message), else the reason."""
    word = reason_word(reason)
    if word != "other":
        return word
    found = _ERROR_TYPE.match(reason)
    return found.group(1) if found else reason[:80]


def summarise(partition: int, offset: int, timestamp_ms: int, headers: list[tuple[str, Any]]) -> dict[str, Any]:
    """One letter for the panel, from its coordinates and headers."""
    parked = None
    reason = None
    for name, value in headers:
        if name == REASON_HEADER and value is not None:
            reason = value.decode(errors="replace")
        elif name == codec.PARKED_HEADER and value is not None:
            try:
                parked = codec.decode_parked(value)
            except DecodeError:
                parked = None
    if reason is None:
        reason = parked.reason if parked is not None else "unknown (no rk-parked header)"
    kind = reason_word(parked.reason.split(" after ")[0]) if parked is not None else "other"
    return {
        "partition": partition,
        "offset": offset,
        "at_ms": parked.parked_at_ms if parked is not None and parked.parked_at_ms > 0 else timestamp_ms,
        "reason": reason,
        "group": reason_group(reason),
        "kind": kind,  # the vocabulary's word for how the last attempt ended
        "source": None
        if parked is None
        else f"{parked.source_topic}[{parked.source_partition}]@{parked.source_offset}",
        "component": parked.component if parked is not None else None,
        "attempts": parked.attempts if parked is not None else None,
    }


def recent_dead_letters(
    bootstrap_servers: str,
    topology: str,
    *,
    kafka_config: dict[str, Any] | None = None,
    limit: int = 200,
    timeout: float = 10,
) -> dict[str, Any]:
    """``{"topic", "records", "read", "by_reason", "by_kind", "letters"}``: ``records`` held by the
    topic, ``read`` letters read from its tail (up to ``limit`` a partition), counts among them per
    reason (:func:`reason_group`) and per kind (how the last attempt ended), and the newest
    :data:`SHOWN` of them."""
    from reliable_kafka.kafka.clients import new_consumer

    topic = TopologyTopics(topology).dlq
    overrides: dict[str, Any] = {"isolation.level": "read_committed"}  # not a Python name: passed as a dict
    consumer = new_consumer(bootstrap_servers, f"{topology}.dlq-panel", kafka_config, **overrides)
    letters: list[dict[str, Any]] = []
    records = 0
    try:
        described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if described is None or described.error is not None:
            return {"topic": topic, "records": None, "read": 0, "by_reason": {}, "by_kind": {}, "letters": []}
        ends: dict[int, int] = {}
        starts: list[TopicPartition] = []
        for p in sorted(described.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
            records += max(0, high - low)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, max(low, high - limit)))
        if starts:
            consumer.assign(starts)
            done: set[int] = set()
            deadline = time.monotonic() + timeout
            while len(done) < len(ends) and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=500, timeout=0.5):
                    partition, offset = message.partition(), message.offset()
                    if message.error() is not None or partition is None or offset is None:
                        continue
                    if offset >= ends[partition]:  # written since the ends were read: the next refresh's
                        done.add(partition)
                        continue
                    timestamp = message.timestamp()
                    letters.append(
                        summarise(
                            partition,
                            offset,
                            timestamp[1] if timestamp else -1,
                            cast("list[tuple[str, Any]]", message.headers() or []),
                        )
                    )
                    if offset + 1 >= ends[partition]:
                        done.add(partition)
                # transaction markers can hold the last offsets: the position says when the end is passed
                for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                    if tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
    finally:
        consumer.close()
    by_reason: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for letter in letters:
        by_reason[letter["group"]] = by_reason.get(letter["group"], 0) + 1
        by_kind[letter["kind"]] = by_kind.get(letter["kind"], 0) + 1
    letters.sort(key=lambda letter: letter["at_ms"], reverse=True)
    return {
        "topic": topic,
        "records": records,
        "read": len(letters),
        "by_reason": dict(sorted(by_reason.items(), key=lambda item: -item[1])),
        "by_kind": by_kind,
        "letters": letters[:SHOWN],
    }
