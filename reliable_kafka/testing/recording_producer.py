"""A producer that only records what it is asked to produce, for unit tests of one component's emits.

It takes confluent-kafka's ``produce`` arguments in their positional order, as the hot paths call
it (``produce_headers``, the bolt's inlined emit), or by keyword. It sends nothing and serves no
delivery reports: a test that needs deliveries, transactions or faults of a broker uses
:class:`~reliable_kafka.testing.MemoryKafka`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, NamedTuple

from reliable_kafka.errors import ArgumentError

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message

    DeliveryCallback = Callable[[KafkaError | None, Message], None]

__all__ = ["Produced", "RecordingProducer"]


class Produced(NamedTuple):
    """One ``produce`` call as the producer received it."""

    topic: str
    value: bytes | None
    key: bytes | None
    partition: int  # -1: the configured partitioner picks one
    headers: list[tuple[str, bytes]] | None


class RecordingProducer:
    """Appends each ``produce`` call to :attr:`sent`; raises ``fail_with`` for a value in ``fail_on``.

    ``len()`` is the number of records produced since the last ``flush`` (librdkafka's queue length),
    so code that flushes only when something is queued can be observed.
    """

    def __init__(self, *, fail_on: Collection[bytes] = (), fail_with: BaseException | None = None) -> None:
        if fail_on and fail_with is None:
            raise ArgumentError("RecordingProducer: fail_on needs fail_with, the exception to raise for those values")
        self.sent: list[Produced] = []
        self.queued = 0
        self.fail_on, self.fail_with = set(fail_on), fail_with

    def __len__(self) -> int:
        return self.queued

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,  # confluent-kafka's positional order (on_delivery is its alias)
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        if value in self.fail_on:
            assert self.fail_with is not None  # checked in __init__
            raise self.fail_with
        self.sent.append(Produced(topic, value, key, partition, headers))
        self.queued += 1

    def poll(self, timeout: float | None = None) -> int:
        return 0  # no delivery reports to serve

    def flush(self, timeout: float | None = None) -> int:
        self.queued = 0
        return 0
