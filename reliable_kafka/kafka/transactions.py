"""One Kafka transaction at a time: begin, commit under a deadline, abort, and a new producer when
the old one is fenced or stuck. The transactional spout and transactional bolts share it."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaException, Producer, TopicPartition

from reliable_kafka.kafka.authorization import raise_if_refused
from reliable_kafka.kafka.deadline import StuckCall, with_deadline

__all__ = ["Transactions", "TXN_DEADLINE_S", "StuckCall"]

log = logging.getLogger(__name__)

TXN_DEADLINE_S = 45.0  # a transactional call past its own 30 s timeout is stuck (see with_deadline)
TXN_TIMEOUT_S = 30  # what each transactional call is given by librdkafka


class Transactions:
    """The transactions of one ``transactional.id``.

    ``new_producer()`` makes a producer with that id (the component's one place that makes
    producers); its ``init_transactions`` fences any earlier producer of the id and aborts what that
    one left open, so a new producer is the remedy for every producer that cannot go on.
    ``on_new_producer(producer)`` lets the component hand the new producer to whatever sends with it.
    """

    def __init__(
        self,
        new_producer: Callable[[], Producer],
        *,
        component: str,
        on_new_producer: Callable[[Producer], None] | None = None,
        deadline_s: float = TXN_DEADLINE_S,
    ) -> None:
        self._new_producer = new_producer
        self.deadline_s = deadline_s
        self.component = component
        self.on_new_producer = on_new_producer
        self.producer: Producer | None = None
        self.committed = 0
        self.aborted = 0
        self.producers_replaced = 0
        self._failed_in_a_row = 0

    def start(self) -> Producer:
        return self._replace()

    def _replace(self) -> Producer:
        producer = self._new_producer()
        try:
            producer.init_transactions(TXN_TIMEOUT_S)  # fences a previous incarnation and aborts its open transaction
        except KafkaException as exc:  # a refused transactional id stops the component, naming the ACL
            raise_if_refused(
                exc,
                component=self.component,
                principal=getattr(producer, "principal", None),
                transactional_id=getattr(producer, "transactional_id", None),
            )
            raise
        if self.producer is not None:
            self.producers_replaced += 1
        self.producer = producer
        if self.on_new_producer is not None:
            self.on_new_producer(producer)
        return producer

    def begin(self) -> None:
        """Begin a transaction; a producer that went fatal since the last one (e.g. fenced while
        idle) is replaced first: nothing of the new transaction was sent, so nothing is redone."""
        assert self.producer is not None, "Transactions.start() makes the producer"
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            if not (exc.args and exc.args[0].fatal()):
                raise
            log.warning("%s: producer unusable before a transaction (%s); replacing it", self.component, exc.args[0])
            self._replace().begin_transaction()

    def commit(self, offsets: list[TopicPartition], group_metadata: object) -> None:
        """Add ``offsets`` (consumer group ``group_metadata``) and commit, each call under a hard
        deadline: raises :class:`KafkaException` or :class:`StuckCall`; then call :meth:`abort`."""
        assert self.producer is not None
        with_deadline(
            self.producer.send_offsets_to_transaction, offsets, group_metadata, TXN_TIMEOUT_S, seconds=self.deadline_s
        )
        with_deadline(self.producer.commit_transaction, TXN_TIMEOUT_S, seconds=self.deadline_s)
        self.committed += 1
        self._failed_in_a_row = 0

    def abort(self, exc: BaseException) -> bool:
        """Abort after ``exc``; True when the producer was replaced (the caller redoes the work from
        its last committed state either way).

        A stuck call, a fatal error (fenced: the coordinator timed the transaction out while the
        broker was away) or a second failure in a row (e.g. the coordinator keeps answering
        CONCURRENT_TRANSACTIONS) gets a new producer; otherwise the transaction is aborted, and a
        producer fenced while aborting is replaced too.
        """
        self.aborted += 1
        self._failed_in_a_row += 1
        error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if isinstance(exc, StuckCall) or (error is not None and error.fatal()) or self._failed_in_a_row >= 2:
            self._replace()
            return True
        assert self.producer is not None
        try:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
        except KafkaException as again:
            if again.args[0].fatal():
                self._replace()
                return True
            if not again.args[0].retriable():
                raise
        return False
