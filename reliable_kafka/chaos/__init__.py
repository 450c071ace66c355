"""Fault injection: run a topology as separate processes, kill them at random, check invariants.

``reliable-kafka chaos`` runs :func:`reliable_kafka.chaos.harness.run`; each process is one
``python -m reliable_kafka.chaos.worker --role ...``.
"""
