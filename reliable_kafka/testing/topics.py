"""Unique topic names and topic creation for tests (every test uses its own topics)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from reliable_kafka.client_log import with_log
from reliable_kafka.errors import WaitTimeoutError

__all__ = ["unique_name", "create_topics"]


def unique_name(prefix: str) -> str:
    """``prefix`` plus a short random suffix: topic and group names no other test shares."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topics(
    bootstrap_servers: str,
    partitions: dict[str, int],
    *,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create topics (name -> partition count) and wait until every partition has a leader."""
    admin = AdminClient(with_log({"bootstrap.servers": bootstrap_servers}))
    futures = admin.create_topics(
        [
            NewTopic(name, num_partitions=count, replication_factor=replication_factor, config=config or {})
            for name, count in partitions.items()
        ],
        operation_timeout=timeout,
    )
    for future in futures.values():
        future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=timeout).topics
        if all(
            name in topics
            and len(topics[name].partitions) == count
            and all(p.leader >= 0 for p in topics[name].partitions.values())
            for name, count in partitions.items()
        ):
            return
        if time.monotonic() > deadline:
            raise WaitTimeoutError(
                f"topics {list(partitions)} have no leaders after {timeout:.0f}s; is the broker healthy?"
            )
        time.sleep(0.1)
