"""Shared test setup: the Kafka fixtures live in the package (reliable_kafka.testing).

Hypothesis runs without its per-example deadline and its "too slow" health check: both are
timings, and no test here may fail because the machine is busy.
"""

from hypothesis import HealthCheck, settings

pytest_plugins = ["reliable_kafka.testing.fixtures"]

settings.register_profile("reliable-kafka", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("reliable-kafka")
