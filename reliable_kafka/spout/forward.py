"""The plain spout's path from a consumed batch to its handler: each message in order, or, with the
default handler (``emit_to``), the whole batch forwarded at once, tracked or not."""

from __future__ import annotations

import logging
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message

from reliable_kafka.codec import ANCHORS_HEADER as _ANCHORS
from reliable_kafka.codec import encode_one_anchor
from reliable_kafka.core.ids import new_id
from reliable_kafka.core.kinds import EventKind
from reliable_kafka.errors import AuthorizationError
from reliable_kafka.kafka.authorization import check_consumed
from reliable_kafka.kafka.fatal import raise_if_fatal, static_member
from reliable_kafka.kafka.produce import ProducerUnusable, produce_headers, produce_tuple
from reliable_kafka.spout.overrides import overridden
from reliable_kafka.spout.records import source_record
from reliable_kafka.spout.shell import SpoutShell, TopicPartitionKey

__all__ = ["ForwardingShell"]

log = logging.getLogger("reliable_kafka.spout.spout")  # the spouts' logger, as before the split


class ForwardingShell(SpoutShell):
    """:class:`SpoutShell` with the consumed-batch path of :class:`~reliable_kafka.spout.spout.Spout`."""

    def _process_messages(self, messages: list[Message]) -> None:
        """Each consumed message through the handler, in order.

        The default handler (``emit_to``) takes a batch at a time: :meth:`_forward_tracked` and
        :meth:`_forward_untracked`. A subclass that overrides :meth:`_process` gets it called per record.
        """
        topic = self._forward_topic
        # Speed: the default handler takes a batch at once (./rk bench spout_path: a record at a time is 2.2-2.9x)
        if topic is not None and not overridden(self, SpoutShell, "_process"):
            if self.tracking and self._derive_root is None and self._senders is None:
                self._forward_tracked(messages, topic)
                return
            if not self._tracks_offsets:
                self._forward_untracked(messages, topic)
                return
        for message in messages:
            if message.error() is not None:
                self._consumer_error(message)
                continue
            self.stats.read += 1
            self._process(source_record(message))

    def _consumer_error(self, message: Message) -> None:
        check_consumed(message, self._consumer, component=self.name)  # refused: stop
        raise_if_fatal(message.error(), component=self.name, instance_id=static_member(self._consumer))  # fenced: stop
        if cast(KafkaError, message.error()).code() != KafkaError._PARTITION_EOF:
            log.warning("%s: consumer error: %s", self.name, message.error())

    def _forward_tracked(self, messages: list[Message], topic: str) -> None:
        """:meth:`_process` with the default handler for a batch: each record goes to ``topic`` as
        the one tuple of a new root; the roots are tracked, and their INITs packed, once per batch.

        A record whose produce raises goes through :meth:`_process` (the handler's error path).
        Whatever was produced is tracked even if a later record raises out of the loop: an untracked
        output would let the commit point pass its record.
        """
        producer, stats, tracker = self._producer, self.stats, self.tracker
        assert producer is not None and self._acks is not None  # made by start()
        should_skip = tracker.should_skip
        # per partition: offsets, roots and the messages (kept by the tracker: a SourceRecord is made
        # only if one is asked for, for a redelivery, a dead letter or a completion hook)
        tracked: dict[TopicPartitionKey, tuple[list[int], list[int], list[Message]]] = {}
        unseen: dict[TopicPartitionKey, int] = {}  # per partition: offsets from here on are new, not skipped
        roots: list[int] = []
        edges: list[int] = []
        read = emitted = 0  # added to the stats once, at the end
        try:
            for message in messages:
                if message.error() is not None:
                    self._consumer_error(message)
                    continue
                read += 1
                key = cast(TopicPartitionKey, (message.topic(), message.partition()))  # consumed: never None
                offset = cast(int, message.offset())
                first_unseen = unseen.get(key)
                if first_unseen is None:
                    first_unseen = unseen[key] = tracker.first_unseen(key)
                if offset < first_unseen and should_skip(key, offset):
                    stats.skipped_done += 1
                    continue
                root, edge = new_id(), new_id()
                value, record_key, record_headers = message.value(), message.key(), message.headers()
                try:
                    if record_headers:  # the user's headers, forwarded without any rk-anchors of theirs
                        produce_tuple(
                            producer,
                            topic,
                            value,
                            key=record_key,
                            headers=record_headers,  # type: ignore[arg-type]  # consumed: a list, never a dict
                            partition=None,
                            anchors={root: edge},
                        )
                    else:
                        headers: list[tuple[str, str | bytes | None]] = [(_ANCHORS, encode_one_anchor(root, edge))]
                        try:  # once per record: produce_headers inlined, its queue-full and error paths left to it
                            producer.produce(topic, value, record_key, -1, None, None, 0, headers)
                        except (BufferError, KafkaException):
                            produce_headers(producer, topic, value, record_key, None, headers)
                except (ProducerUnusable, AuthorizationError):
                    raise
                except Exception:  # nothing was produced: the handler's error path decides (logs, fails it)
                    earlier = tracked.pop(key, None)
                    if earlier is not None:  # registered first: the tracker takes a partition's offsets in order
                        self._roots.track_many(key, earlier[0], earlier[1], 1, earlier[2])
                    self._process(source_record(message))
                    continue
                emitted += 1
                batch = tracked.get(key)
                if batch is None:
                    batch = tracked[key] = ([], [], [])
                batch[0].append(offset)
                batch[1].append(root)
                batch[2].append(message)
                roots.append(root)
                edges.append(edge)  # the root's INIT val: the XOR of its one tuple's edge
        finally:
            stats.read += read
            stats.emitted += emitted
            for key, (offsets, key_roots, kept) in tracked.items():
                self._roots.track_many(key, offsets, key_roots, 1, kept)
            self._acks.extend(EventKind.INIT, roots, edges)
            if roots:
                self.output_topics.add(topic)

    def _forward_untracked(self, messages: list[Message], topic: str) -> None:
        """:meth:`_process` with the default handler for a batch, tracking nothing (``guarantee``
        "none" or "at_most_once"): each record to ``topic``, without any rk-anchors it carried."""
        producer, stats = self._producer, self.stats
        assert producer is not None  # made by start()
        emitted = False
        for message in messages:
            if message.error() is not None:
                self._consumer_error(message)
                continue
            stats.read += 1
            headers = message.headers()
            try:
                if headers:
                    produce_tuple(
                        producer,
                        topic,
                        message.value(),
                        key=message.key(),
                        headers=headers,  # type: ignore[arg-type]  # consumed: a list, never a dict
                        partition=None,
                        anchors={},
                    )
                else:
                    try:  # once per record: produce_headers inlined, its queue-full and error paths left to it
                        producer.produce(topic, message.value(), message.key())
                    except (BufferError, KafkaException):
                        produce_headers(producer, topic, message.value(), message.key(), None, None)
            except (ProducerUnusable, AuthorizationError):
                raise
            except Exception:  # the handler's error path decides (logs it)
                self._process(source_record(message))
                continue
            emitted = True
        if emitted:
            self.output_topics.add(topic)
