"""A bolt whose handler calls a remote service: 64 calls in flight, one at a time per key.

The spout reads `orders` (keyed by customer) and forwards each order; the bolt's `async def`
handler sends it to a service that answers in a few milliseconds and refuses about 1 call in 100.
A refused call raises: only that order's tree fails, and the spout replays it (after the default
retries it would go to the dead-letter topic). The bolt keeps up to 64 calls in flight, never two of
one customer at once, and calls each customer's orders in their offset order.
Run:  .venv/bin/python examples/parallel_service.py   (an embedded broker, 2,000 orders)
"""

import asyncio
import random

from reliable_kafka import AckerWorker, BasicBolt, Parallel, Spout, Tracking


class FakeService:
    """Stands in for an HTTP API: answers after a few ms, refuses ``failure_rate`` of the calls."""

    def __init__(self, *, failure_rate=0.01, latency_s=(0.002, 0.010)):
        self.failure_rate = failure_rate
        self.latency_s = latency_s
        self.stored = {}  # customer -> the orders it received, in the order it received them

    async def put(self, customer, order):
        await asyncio.sleep(random.uniform(*self.latency_s))
        if random.random() < self.failure_rate:
            raise ConnectionError("503 Service Unavailable")
        self.stored.setdefault(customer, []).append(order)


def build(bootstrap, *, topology="orders", source="orders", service=None, parallelism=64, timeout_ms=30_000):
    service = service or FakeService()

    async def send(order, collector):
        await service.put(order.key, order.value)  # returns: acked; raises: failed, replayed

    on = {"topology": topology, "connection": bootstrap}
    return service, [
        AckerWorker(**on, tracking=Tracking(ackers=1, message_timeout_ms=timeout_ms)),
        Spout(
            **on,
            source_topics=source,
            group_id=f"{topology}-spout",
            emit_to=f"{topology}.orders",
            tracking=Tracking(message_timeout_ms=timeout_ms),
        ),
        BasicBolt(
            **on,
            source_topics=f"{topology}.orders",
            group_id=f"{topology}-service",
            handler=send,
            parallel=Parallel(parallelism, ordering="key"),
        ),
    ]


if __name__ == "__main__":
    from reliable_kafka import LocalCluster
    from reliable_kafka.broker import EmbeddedKafka
    from reliable_kafka.offsets import committed_offsets, end_offsets
    from reliable_kafka.testing.records import produce_values
    from reliable_kafka.testing.topics import create_topics

    with EmbeddedKafka() as kafka:
        bootstrap = kafka.bootstrap_servers
        create_topics(bootstrap, {"orders": 4, "orders.orders": 4})
        customers = [f"customer-{i % 50}".encode() for i in range(2000)]
        produce_values(bootstrap, "orders", [f"order-{i}".encode() for i in range(2000)], keys=customers)
        service, components = build(bootstrap)
        with LocalCluster(*components) as cluster:
            cluster.wait_until(
                lambda: committed_offsets(bootstrap, "orders-spout", "orders") == end_offsets(bootstrap, "orders"),
                timeout=120,
                what="every order sent",
            )
        stored = sum(len(orders) for orders in service.stored.values())
        print(f"{stored} orders stored for {len(service.stored)} customers")
