"""The one error hierarchy of reliable-kafka.

Every error the library raises derives from :class:`ReliableKafkaError`. Subclasses carry the data
needed to act on them (coordinates, raw bytes, whether a retry can help), and some also derive from
a built-in kind (``ValueError``) so that callers can catch them either way.
"""

from __future__ import annotations

__all__ = [
    "ReliableKafkaError",
    "ConfigError",
    "DecodeError",
    "BrokerStartError",
    "JarResolutionError",
    "TopologyError",
    "DeliveryError",
    "MissingExtraError",
    "DeadLetterGuardTripped",
    "AuthorizationError",
    "OutputRefused",
    "ArgumentError",
    "StateError",
    "WaitTimeoutError",
    "ComponentDiedError",
]


class ReliableKafkaError(Exception):
    """Base of every error raised by reliable-kafka.

    ``retriable`` says whether trying the same operation again can succeed.
    """

    retriable: bool = False


class ConfigError(ReliableKafkaError, ValueError):
    """A configuration value or key is wrong; the message names it and what is accepted."""


class DecodeError(ReliableKafkaError, ValueError):
    """Bytes that do not decode as the expected reliable-kafka record.

    Never fatal for a worker: the worker counts it, logs it with its coordinates, copies the raw
    bytes to a quarantine topic and goes on. ``raw`` keeps the bytes so nothing is lost.
    """

    def __init__(
        self,
        what: str,
        reason: str,
        raw: bytes | None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.what = what
        self.reason = reason
        self.raw = raw
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(self._message())

    def _message(self) -> str:
        where = ""
        if self.topic is not None:
            where = f" at {self.topic}[{self.partition}]@{self.offset}"
        size = "no bytes" if self.raw is None else f"{len(self.raw)} bytes"
        return f"cannot decode {self.what}{where} ({size}): {self.reason}"

    def at(self, topic: str, partition: int, offset: int) -> DecodeError:
        """The same error, placed at a record's coordinates."""
        return DecodeError(self.what, self.reason, self.raw, topic=topic, partition=partition, offset=offset)


class BrokerStartError(ReliableKafkaError):
    """The embedded Kafka broker did not start; ``hint`` says what to do about it."""

    def __init__(self, message: str, *, hint: str, log_tail: str = "") -> None:
        self.hint = hint
        self.log_tail = log_tail
        text = f"{message}\n  what to do: {hint}"
        if log_tail:
            text += f"\n  broker log (last lines):\n{log_tail}"
        super().__init__(text)


class JarResolutionError(ReliableKafkaError):
    """Maven could not resolve the jars for Kafka or Spark's Kafka connector."""

    retriable = True


class TopologyError(ReliableKafkaError):
    """The topology's topics are missing or have the wrong shape (e.g. partition count)."""


class DeliveryError(ReliableKafkaError):
    """Kafka did not confirm a write; ``topic``/``partition`` say where it was going."""

    retriable = True

    def __init__(self, message: str, *, topic: str | None = None, partition: int | None = None):
        self.topic = topic
        self.partition = partition
        super().__init__(message)


class MissingExtraError(ReliableKafkaError, ImportError):
    """An optional part was used without its extra installed; the message names the extra."""


class DeadLetterGuardTripped(ReliableKafkaError):
    """A spout stopped because too large a share of its recent records went to the dead-letter topic.

    A bad deploy (a bolt that fails everything) must not divert a whole stream to the DLQ silently.
    Nothing is lost: records not yet dead-lettered stay uncommitted and are read again on restart.
    """

    def __init__(self, message: str, *, component: str, dead_letters: int, window: int):
        self.component = component
        self.dead_letters = dead_letters
        self.window = window
        super().__init__(message)


class AuthorizationError(ReliableKafkaError):
    """The broker refused a permission: ``principal`` may not ``operation`` on ``resource_type``
    ``resource`` (e.g. WRITE on TOPIC wc.acks). Components stop on it: retrying cannot help, and
    diverting records to the dead-letter topic would lose nothing but hide the cause.
    ``component`` names who was refused; ``error`` is Kafka's error name."""

    def __init__(
        self,
        *,
        component: str,
        principal: str,
        operation: str,
        resource_type: str,
        resource: str,
        error: str,
        hint: str | None = None,
    ) -> None:
        self.component = component
        self.principal = principal
        self.operation = operation
        self.resource_type = resource_type
        self.resource = resource
        self.error = error
        option = {
            "TOPIC": "--topic",
            "GROUP": "--group",
            "TRANSACTIONAL_ID": "--transactional-id",
            "CLUSTER": "--cluster",
        }.get(resource_type, "--topic")
        target = option if resource_type == "CLUSTER" else f"{option} {resource}"
        # hint: what the component's role needs there, when it is more than what was refused
        # (DESCRIBE refused on a topic the role writes: WRITE grants both)
        remedy = hint or (
            f"Grant it, e.g. `kafka-acls.sh --bootstrap-server ... --add "
            f"--allow-principal {principal} --operation {operation.title().replace('_', '')} {target}`, "
            f"or apply the role's ACLs with `reliable-kafka acls --apply` (docs/security.md)"
        )
        super().__init__(
            f"{component}: {principal} is not allowed {operation} on {resource_type.lower().replace('_', ' ')} "
            f"{resource} (Kafka: {error}); stopped. {remedy}"
        )


class OutputRefused(AuthorizationError):
    """reliable-kafka itself refused a write: a component emitted to its own source or to one of
    its topology's topics (``<T>.acks``, ``<T>.dlq``...), where the tuple would be read back as input
    or as an ack event, a dead letter or a status, and end in the DLQ or quarantine. Raised at the
    emit (the record is not sent), and an :class:`AuthorizationError` so that components stop on it
    as on a broker's refusal: retrying cannot help."""

    def __init__(self, *, component: str, topic: str, why: str) -> None:
        ReliableKafkaError.__init__(
            self, f"{component}: may not emit to {topic!r}, {why}; stopped. Emit to a topic of your own"
        )
        self.component, self.principal, self.operation = component, "", "WRITE"
        self.resource_type, self.resource, self.error = "TOPIC", topic, "OUTPUT_REFUSED"


class ArgumentError(ReliableKafkaError, ValueError):
    """A call's argument is outside what the function accepts (a negative offset, a zero root id).

    Configuration given to a constructor raises :class:`ConfigError` instead.
    """


class StateError(ReliableKafkaError, RuntimeError):
    """A method was called in a state that does not allow it: before ``start()``, or while stopping."""


class WaitTimeoutError(ReliableKafkaError, TimeoutError):
    """A bounded wait ran out; the message says what was awaited and the last state seen."""

    retriable = True


class ComponentDiedError(ReliableKafkaError, RuntimeError):
    """A component run by :class:`~reliable_kafka.LocalCluster` died; ``__cause__`` is its error."""

    def __init__(self, message: str, *, component: str) -> None:
        self.component = component
        super().__init__(message)
