"""Shared test setup: the Kafka fixtures live in the package (reliable_kafka.testing)."""

pytest_plugins = ["reliable_kafka.testing.fixtures"]
