"""Test helpers shipped with the package.

For users' unit tests, no broker needed: :class:`MemoryKafka` (an in-memory Kafka that spouts,
bolts and acker workers take as ``clients=``), :class:`ManualClock`, :class:`ListSource`,
:class:`TopicSink` and :func:`step_until` (docs/testing.md). The pytest fixtures that start a real
broker live in :mod:`reliable_kafka.testing.fixtures`.
"""

from reliable_kafka.testing.memory_broker import FAULTS, ManualClock, MemoryKafka
from reliable_kafka.testing.memory_io import ListSource, NotReached, TopicSink, step_until

__all__ = ["MemoryKafka", "ManualClock", "FAULTS", "ListSource", "TopicSink", "step_until", "NotReached"]
