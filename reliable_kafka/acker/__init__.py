"""Acker workers: fold ack-topic events per root and publish outcomes (docs/design.md section 4)."""

from reliable_kafka.acker.worker import AckerStats, AckerWorker

__all__ = ["AckerWorker", "AckerStats"]
