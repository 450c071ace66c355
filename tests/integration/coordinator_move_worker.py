"""A spout or a bolt of test_coordinator_move, as its own process (the acker runs as
``reliable-kafka acker``): ``python coordinator_move_worker.py spout|bolt TOPOLOGY BOOTSTRAP``.

The spout forwards ``<T>.source`` to ``<T>.stage``; the bolt writes each tuple, unanchored, to
``<T>.sink`` and acks it. Both stop cleanly on SIGTERM.
"""

from __future__ import annotations

import logging
import sys

from reliable_kafka import Connection, Loop, Tracking
from reliable_kafka.bolt import BasicBolt
from reliable_kafka.spout import Spout

# as the chaos workers: a killed broker's partitions and groups move within seconds
CLIENT_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
MESSAGE_TIMEOUT_MS = 10_000


def main(role: str, topology: str, bootstrap: str) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s {role} %(levelname)s %(message)s")
    common = {"topology": topology, "connection": Connection(bootstrap, consumer_config=dict(CLIENT_CONFIG))}
    if role == "spout":
        component = Spout(
            **common,
            source_topics=f"{topology}.source",
            group_id=f"{topology}.spout",
            emit_to=f"{topology}.stage",
            name="spout-0",
            tracking=Tracking(message_timeout_ms=MESSAGE_TIMEOUT_MS, backstop_grace_ms=MESSAGE_TIMEOUT_MS),
            loop=Loop(commit_interval_ms=250),
        )
    else:

        def sink(tuple_, collector):
            collector.emit(f"{topology}.sink", tuple_.value, key=tuple_.key, anchors=())

        component = BasicBolt(
            **common,
            source_topics=f"{topology}.stage",
            group_id=f"{topology}.bolt",
            handler=sink,
            name="bolt-0",
            loop=Loop(commit_interval_ms=250),
        )
    component.run(handle_signals=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
