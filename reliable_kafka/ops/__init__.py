"""Operators' tools (docs/design.md section 9): status snapshots, verdicts, Prometheus metrics, a live page.

- :mod:`.snapshot`: a read-only view of a running component's counters;
- :mod:`.reporter`: publishes snapshots to ``<topology>.status`` and serves ``/metrics``;
- :mod:`.verdict`: OK / WARN / STALL / DOWN over a window (pure);
- :mod:`.status`: reads the status topic and the offsets into one report (``reliable-kafka status``);
- :mod:`.metrics`: the Prometheus collector; :mod:`.ui`: the page (``reliable-kafka ui``);
- :mod:`.failures`: why tuples failed (``<topology>.failures``) and the dead letters' attempt headers;
- :mod:`.dlq`: list, show and replay the dead-letter topic (``reliable-kafka dlq``);
- :mod:`.trace`: the spout's root index and a record's trees (``reliable-kafka trace``).
"""

__all__: list[str] = []
