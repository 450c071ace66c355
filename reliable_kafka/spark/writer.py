"""The executor side: writing a batch's outputs with their anchors, and the child-edge acks.

``OutputWriter`` runs in Spark tasks (``foreachPartition``). For every output row and every
(root, input edge) pair in its ``anchors`` it draws a fresh child edge ``c``: the output's
``rk-anchors`` header gets ``root -> XOR of its c``, and the task owes the acker the same XOR per
root. After the partition's outputs it sends those ACK entries (packed per ack partition) and
flushes; any delivery failure raises, so Spark retries the task. The task therefore reports
success only when every child it created is both written and added to its tree (DESIGN 7.1, step
2). A task that dies midway leaves children that were never added: their trees cannot complete
and time out (at-least-once), never complete early. A retried task draws new edges.

Producers are cached per Python worker process (Spark reuses workers), never shared across a fork.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reliable_kafka import codec
from reliable_kafka.core.anchors import anchor_to_pairs
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import ConfigError, DeliveryError
from reliable_kafka.kafka.ack_sender import AckSender
from reliable_kafka.kafka.clients import new_producer
from reliable_kafka.kafka.produce import flush_or_raise
from reliable_kafka.ops.failures import FailureLog, FailureRecord
from reliable_kafka.spark.anchors import ANCHORS_COLUMN, FAIL_COLUMN, FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN

__all__ = ["OutputWriter", "to_bytes"]

_producers: dict[tuple, Any] = {}


def _producer(bootstrap_servers: str, kafka_config: dict):
    key = (os.getpid(), bootstrap_servers, tuple(sorted((k, repr(v)) for k, v in kafka_config.items())))
    producer = _producers.get(key)
    if producer is None:
        producer = _producers[key] = new_producer(bootstrap_servers, kafka_config, ack_sender="spark writer task")
    return producer


def to_bytes(value, what: str) -> bytes | None:
    """A key or value as bytes: bytes/bytearray as they are, str as UTF-8, numbers as text."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (int, float)):
        return str(value).encode("ascii")
    raise ConfigError(f"spark output: {what} of type {type(value).__name__} cannot be written; "
                      f"cast the column to string or binary")


@dataclass(frozen=True)
class OutputWriter:
    """Callable for ``DataFrame.foreachPartition`` over rows with value, anchors and optionally
    key, headers (``array<struct<key,value>>``), ``rk_fail`` (see :data:`FAIL_COLUMN`), ``rk_fail_reason``
    and ``rk_fail_retry``.

    ``outputs``/``failed_rows`` are optional Spark accumulators counting written and failed rows.
    """

    bootstrap_servers: str
    output_topic: str
    acks_topic: str
    ack_partitions: int
    sender: int
    kafka_config: dict = field(default_factory=dict)
    outputs: Any = None
    failed_rows: Any = None
    flush_timeout_s: float = 60.0
    component: str = ""  # names the job in failure records
    failures_topic: str | None = None  # rows with rk_fail write a failure record here (None: none)

    def __call__(self, rows: Iterable) -> None:
        producer = _producer(self.bootstrap_servers, self.kafka_config)
        errors: list = []

        def delivered(error, message) -> None:
            if error is not None:
                errors.append(error)

        acks = AckSender(producer, acks_topic=self.acks_topic, ack_partitions=self.ack_partitions,
                         sender=self.sender)
        child_edges: dict[int, int] = {}  # root -> XOR of the child edges this task created
        failed_roots: set[int] = set()
        written = failed = 0
        fields: set[str] | None = None
        for row in rows:
            if fields is None:
                fields = set(row.__fields__)
                if "value" not in fields or ANCHORS_COLUMN not in fields:
                    raise ConfigError(f"spark output rows need 'value' and '{ANCHORS_COLUMN}' columns, "
                                      f"got {sorted(fields)}")
            pairs = row[ANCHORS_COLUMN] or ()
            if FAIL_COLUMN in fields and row[FAIL_COLUMN]:
                roots = [pair[0] for pair in pairs if pair is not None and pair[0]]
                failed_roots.update(roots)
                failed += 1
                if self.failures_topic is not None and roots:  # written before the FAIL entries
                    FailureLog(producer, topic=self.failures_topic, component=self.component,
                               task_id=self.sender).write(FailureRecord.of(
                                   roots=roots, component=self.component, task_id=self.sender,
                                   reason=row[FAIL_REASON_COLUMN] if FAIL_REASON_COLUMN in fields else None,
                                   retry=not (FAIL_RETRY_COLUMN in fields and row[FAIL_RETRY_COLUMN] is False)))
                continue
            anchors = anchor_to_pairs(pairs, child_edges)  # the XOR edge rule (core.anchors)
            headers = []
            if "headers" in fields and row["headers"]:
                headers = [(h[0], to_bytes(h[1], "header value")) for h in row["headers"]
                           if h[0] != codec.ANCHORS_HEADER]
            if anchors:
                headers.append((codec.ANCHORS_HEADER, codec.encode_anchors(anchors)))
            key = to_bytes(row["key"], "key") if "key" in fields else None
            self._produce(producer, to_bytes(row["value"], "value"), key, headers, delivered)
            written += 1
        for root, val in child_edges.items():
            acks.add(EventKind.ACK, root, val)
        for root in failed_roots:
            acks.add(EventKind.FAIL, root)
        acks.send()
        flush_or_raise(producer, timeout=self.flush_timeout_s, what="spark outputs and acks")
        if errors or acks.delivery_errors:
            first = (errors or acks.delivery_errors)[0]
            raise DeliveryError(
                f"spark writer: {len(errors)} outputs to {self.output_topic} and "
                f"{len(acks.delivery_errors)} ack records not delivered (first: {first}); the task "
                f"fails so that Spark retries it", topic=self.output_topic)
        if self.outputs is not None:
            self.outputs.add(written)
        if self.failed_rows is not None:
            self.failed_rows.add(failed)

    def _produce(self, producer, value, key, headers, delivered) -> None:
        while True:
            try:
                producer.produce(self.output_topic, value, key=key, headers=headers, on_delivery=delivered)
                return
            except BufferError:
                producer.poll(0.05)
