"""The checks of what the library relies on from Kafka, against the real broker.

tests/unit/test_memory_kafka_contract.py runs the same check bodies against the in-memory Kafka.
"""

from __future__ import annotations

import pytest

from reliable_kafka.kafka.factory import CONFLUENT
from reliable_kafka.testing.contract import CHECKS
from reliable_kafka.testing.topics import unique_name


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_real_kafka_behaves_as_the_checks_say(kafka_bootstrap, name):
    CHECKS[name](CONFLUENT, kafka_bootstrap, unique_name(f"contract-{name.replace('_', '-')}"))
