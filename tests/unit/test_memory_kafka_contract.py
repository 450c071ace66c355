"""The in-memory Kafka passes the checks of what the library relies on from Kafka.

tests/integration/test_kafka_contract.py runs the very same check bodies against the real broker.
"""

from __future__ import annotations

import pytest

from reliable_kafka.testing import MemoryKafka
from reliable_kafka.testing.contract import CHECKS


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_memory_kafka_behaves_as_kafka(name):
    CHECKS[name](MemoryKafka(), "memory", f"contract-{name.replace('_', '-')}")
