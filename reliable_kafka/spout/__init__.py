"""Spouts: source topics in, tracked tuple trees out (docs/design.md section 5)."""

from reliable_kafka.spout.spout import Guarantee, SourceRecord, Spout, SpoutCollector, SpoutStats, forward_to
from reliable_kafka.spout.transactional import TransactionalSpout

__all__ = ["Spout", "TransactionalSpout", "SpoutCollector", "SourceRecord", "SpoutStats", "Guarantee", "forward_to"]
