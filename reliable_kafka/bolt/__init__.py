"""Bolts and the collector API for plain Python consumers (docs/design.md section 6)."""

from reliable_kafka.bolt.options import Parallel
from reliable_kafka.bolt.runner import BasicBolt, Bolt, BoltCollector, BoltStats, Tuple, TupleBatch

__all__ = ["Bolt", "BasicBolt", "BoltCollector", "BoltStats", "Parallel", "Tuple", "TupleBatch"]
