"""Kafka client errors that leave the client unusable, and what a component does about them.

librdkafka raises a *fatal* error when a client can never work again: a static group member
(``group.instance.id``, KIP-345) fenced by a member with the same instance id, or an idempotent or
transactional producer that lost its guarantees or was fenced. A fenced consumer stops consuming,
hands out one error event (``_FATAL``) and fails every later commit, subscribe or assign; nothing
else happens. A lone static member gets fenced this way when its group coordinator moves: its
session times out while the coordinator is away, and its own rejoin fences it (seen with librdkafka
2.x on a three-broker cluster after SIGKILL of the coordinator). A component that only logged the
error would idle for good, and an idle acker turns every tree into a timeout (docs/design.md section 7.5).

The policy, one place for every component:

- :func:`raise_if_fatal` turns such an error into :class:`ClientFailed`, wherever it shows up (a
  consumed error event, a commit result, a raised ``KafkaException``).
- An acker worker and an outcome reader then make a new client (the acker replays its ack
  partitions from their committed offsets, which event sourcing makes safe); spouts and bolts stop,
  so that their process exits non-zero and its supervisor starts it again.
- :class:`Rebuilds` bounds the rebuilding: a client fenced again and again within minutes is not a
  coordinator move but two processes with one name fencing each other; the component then stops
  with :class:`ClientFailed` naming the instance id.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from confluent_kafka import KafkaError, KafkaException

from reliable_kafka.core.clock import Clock
from reliable_kafka.errors import ReliableKafkaError

__all__ = [
    "ClientFailed",
    "FATAL_CODES",
    "client_failed",
    "Rebuilds",
    "fatal_error",
    "is_fatal",
    "raise_if_fatal",
    "static_member",
]

log = logging.getLogger(__name__)

# Errors after which a client never works again: librdkafka's fatal error event, a fenced
# transactional producer, a fenced static consumer (KIP-345), and a producer fenced by epoch.
FATAL_CODES = frozenset(
    {
        KafkaError._FATAL,
        KafkaError._FENCED,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


class ClientFailed(ReliableKafkaError):
    """A Kafka client of ``component`` hit a fatal error: it will never consume or produce again.

    ``client`` is ``"consumer"`` or ``"producer"``; ``error`` the KafkaError; ``instance_id`` the
    consumer's ``group.instance.id`` when it is a static member. A component that cannot make a new
    client raises it out of its loop, so its process exits non-zero.
    """

    def __init__(
        self, message: str, *, component: str, client: str, error: KafkaError | None, instance_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.component = component
        self.client = client
        self.error = error
        self.instance_id = instance_id


def static_member(consumer: object) -> str | None:
    """``consumer``'s ``group.instance.id``, if it is a static member (as :func:`new_consumer` noted it)."""
    return getattr(consumer, "instance_id", None)


def is_fatal(error: KafkaError | None, *, instance_id: str | None = None) -> bool:
    """True when ``error`` leaves its client unusable.

    ``UNKNOWN_MEMBER_ID`` counts only for a static member (``instance_id``) and only as a consumed
    error event: librdkafka rejoins by itself after it in a dynamic group, and a commit refused
    with it during a rebalance is routine (the next owner replays).
    """
    if error is None:
        return False
    if error.fatal() or error.code() in FATAL_CODES:
        return True
    return instance_id is not None and error.code() == KafkaError.UNKNOWN_MEMBER_ID


def fatal_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError of a raised ``KafkaException`` when it is fatal (:func:`is_fatal`), else None."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error = exc.args[0]
        if error.fatal() or error.code() in FATAL_CODES:
            return error
    return None


def raise_if_fatal(
    error: KafkaError | None,
    *,
    component: str,
    client: str = "consumer",
    instance_id: str | None = None,
    unknown_member_counts: bool = True,
) -> None:
    """Raise :class:`ClientFailed` when ``error`` is fatal (:func:`is_fatal`); otherwise return.

    ``unknown_member_counts``: False for commit results, where UNKNOWN_MEMBER_ID is routine.
    """
    counted = instance_id if unknown_member_counts else None
    if is_fatal(error, instance_id=counted):
        raise client_failed(error, component=component, client=client, instance_id=instance_id)


def client_failed(
    error: KafkaError | None, *, component: str, client: str = "consumer", instance_id: str | None = None
) -> ClientFailed:
    """The :class:`ClientFailed` that says ``component``'s ``client`` failed with ``error``."""
    what = "an unknown error" if error is None else error.str()
    return ClientFailed(
        f"{component}: its Kafka {client} hit a fatal error and will never work again: {what}"
        + (f" (static member {instance_id})" if instance_id else ""),
        component=component,
        client=client,
        error=error,
        instance_id=instance_id,
    )


class Rebuilds:
    """How often a component may make a new client: at most ``limit`` times within ``window_s``.

    A coordinator move fences a static member once; two processes started with the same name fence
    each other at every rejoin. Past the limit, :meth:`allow` raises :class:`ClientFailed` saying so,
    and the component stops (its process exits non-zero) instead of taking the partitions back and
    forth. Before each rebuild it waits ``backoff_s`` times the rebuilds in the window (a broker
    that is still electing a coordinator gets a moment).
    """

    def __init__(self, *, limit: int = 3, window_s: float = 600.0, backoff_s: float = 1.0, clock: Clock = time) -> None:
        self.limit = limit
        self.window_s = window_s
        self.backoff_s = backoff_s
        self._clock = clock
        self._times: deque[float] = deque()
        self.count = 0  # every rebuild so far (a counter in the component's stats)

    def allow(self, failed: ClientFailed) -> None:
        """Count one rebuild after ``failed``, wait its backoff; raise ``failed``, explained, past the limit."""
        now = self._clock.monotonic()
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if len(self._times) >= self.limit:
            who = f" with group.instance.id {failed.instance_id}" if failed.instance_id else ""
            raise ClientFailed(
                f"{failed} -- its {failed.client} was rebuilt {len(self._times)} times in the last "
                f"{self.window_s:.0f} s and failed again: probably another process runs{who} (the same "
                f"name); give each process its own name. Stopping (exit non-zero) instead of taking the "
                f"partitions back and forth",
                component=failed.component,
                client=failed.client,
                error=failed.error,
                instance_id=failed.instance_id,
            ) from failed
        self._times.append(now)
        self.count += 1
        wait = self.backoff_s * len(self._times)
        log.warning("%s; making a new %s in %.0f s (rebuild %d)", failed, failed.client, wait, self.count)
        if wait > 0:
            self._clock.sleep(wait)
