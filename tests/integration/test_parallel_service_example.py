"""examples/parallel_service.py on a real broker: an async handler calling a fake service."""

from __future__ import annotations

from examples.parallel_service import FakeService, build
from reliable_kafka import LocalCluster
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name

ORDERS = 600
CUSTOMERS = 30


def _send_orders(bootstrap: str, service: FakeService) -> dict[bytes, list[bytes]]:
    topology = unique_name("orders")
    source = f"{topology}-orders"
    create_topics(bootstrap, {source: 4, f"{topology}.orders": 4})
    customers = [b"customer-%d" % (i % CUSTOMERS) for i in range(ORDERS)]
    orders = [b"order-%d" % i for i in range(ORDERS)]
    produce_values(bootstrap, source, orders, keys=customers)
    _, components = build(bootstrap, topology=topology, source=source, service=service)
    with LocalCluster(*components) as cluster:
        cluster.wait_until(
            lambda: committed_offsets(bootstrap, f"{topology}-spout", source) == end_offsets(bootstrap, source),
            timeout=120,
            what="every order sent",
        )
    sent: dict[bytes, list[bytes]] = {}
    for customer, order in zip(customers, orders):
        sent.setdefault(customer, []).append(order)
    return sent


def test_every_order_reaches_the_service_despite_refused_calls(kafka_bootstrap):
    service = FakeService(failure_rate=0.05)
    sent = _send_orders(kafka_bootstrap, service)
    # a refused order is replayed (later than its customer's next orders): each arrives, maybe twice
    assert {customer: set(orders) for customer, orders in service.stored.items()} == {
        customer: set(orders) for customer, orders in sent.items()
    }


def test_without_failures_each_customer_gets_its_orders_in_order(kafka_bootstrap):
    service = FakeService(failure_rate=0.0)
    sent = _send_orders(kafka_bootstrap, service)
    assert service.stored == sent
