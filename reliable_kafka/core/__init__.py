"""The pure protocol core: ids, anchors, the acker table, the in-flight tracker.

Nothing in this package imports a Kafka client or Spark; tests drive it with plain data and an
injected clock.
"""
