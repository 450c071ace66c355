"""Consuming a batch without waiting for it to fill.

confluent-kafka's ``consume(n, timeout)`` returns only when ``n`` messages arrived or ``timeout``
passed: at a moderate rate every hop of a pipeline then waits out the whole timeout (the issue 11
profile: about 100 ms per hop with ``consume(500, 0.1)``). :func:`consume_batch` takes what is
already fetched at once, and waits only while nothing is there, returning with the first message
and, for at most :data:`SIBLING_WAIT_S` per partition, its assigned partitions' records sent with it.

Why the sibling wait: librdkafka sends one partition per produce request, and the broker answers a
waiting fetch as soon as one partition has data. A stage that sends a round's records to 2
partitions thus woke the next stage twice, which then ran 2 rounds and sent 2 rounds of outputs
and acks: requests multiplied hop by hop (about 4 per sentence at 1,000 sentences/s, the broker at
half a core; docs/performance.md). The second partition's records come well under a millisecond
after the first; taken in the same round, they no longer wait behind the first round's send.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message

__all__ = ["consume_batch", "SIBLING_WAIT_S", "SKIP_AFTER_MISS", "SIBLING_WAIT_BELOW"]

SIBLING_WAIT_S = 0.001  # per assigned partition with nothing in hand yet (librdkafka counts whole ms)
SKIP_AFTER_MISS = 8  # batches taken without a sibling wait after one that brought nothing
SIBLING_WAIT_BELOW = 100  # records in hand: a larger first arrival is worth its requests already (a busy stage)


def consume_batch(consumer: Consumer, max_records: int, timeout: float) -> list[Message]:
    """Up to ``max_records`` messages: what is queued now, else the first to arrive within ``timeout``
    with what arrives on the consumer's other assigned partitions within :data:`SIBLING_WAIT_S`.

    Under load this is one call returning a full batch (same cost as ``consume(n, timeout)``);
    when idle it blocks like it; in between it returns as soon as there is work from every
    assigned partition that has some, waiting at most a millisecond for each that has none.
    """
    messages = consumer.consume(max_records, 0)
    if messages or timeout <= 0:
        return messages
    messages = consumer.consume(1, timeout)
    if messages and max_records > 1:
        messages.extend(consumer.consume(max_records - 1, 0))  # what arrived with the first one
        _take_siblings(consumer, messages, max_records)
    return messages


def _take_siblings(consumer: Consumer, messages: list[Message], max_records: int) -> None:
    """Wait up to :data:`SIBLING_WAIT_S` per assigned partition missing from ``messages`` for its
    records; stop at the first wait that brings nothing, and then skip the wait for the next
    :data:`SKIP_AFTER_MISS` batches (their partitions do not come together: e.g. a producer's
    sticky partitioner sends a while to one, or a paused partition)."""
    if len(messages) >= min(max_records, SIBLING_WAIT_BELOW):
        return
    skip = getattr(consumer, _SKIP, 0)
    if skip:
        _set_skip(consumer, skip - 1)
        return
    assigned = _assigned(consumer)
    if assigned < 2:
        return
    present = {(m.topic(), m.partition()) for m in messages}
    for _ in range(assigned - len(present)):  # each wait must bring a partition, or it ends
        more = consumer.consume(1, SIBLING_WAIT_S)
        if not more:
            _set_skip(consumer, SKIP_AFTER_MISS)
            return
        more.extend(consumer.consume(max_records - len(messages) - 1, 0))
        messages.extend(more)
        if len(messages) >= max_records:
            return
        present.update((m.topic(), m.partition()) for m in more)
        if len(present) >= assigned:
            return


_SKIP = "_rk_sibling_skip"  # kept on the consumer: batches left without a sibling wait


def _set_skip(consumer: Consumer, batches: int) -> None:
    try:
        setattr(consumer, _SKIP, batches)
    except AttributeError:  # confluent-kafka's own class keeps no attributes: it waits every time
        pass


def _assigned(consumer: Consumer) -> int:
    """How many partitions ``consumer`` is assigned (the library's consumers keep it cached)."""
    count = getattr(consumer, "assigned_count", None)
    return count() if count is not None else len(consumer.assignment())
