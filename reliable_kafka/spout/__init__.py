"""Spouts: source topics in, tracked tuple trees out (DESIGN section 5)."""

from reliable_kafka.spout.spout import Guarantee, SourceRecord, Spout, SpoutCollector, SpoutStats, forward_to

__all__ = ["Spout", "SpoutCollector", "SourceRecord", "SpoutStats", "Guarantee", "forward_to"]
