"""Refused permissions, recognised wherever Kafka reports them, become :class:`AuthorizationError`.

A refusal is not a transient fault: retrying it forever hides it, and treating it as a failed
tuple diverts the stream to the dead-letter topic. So delivery reports, consumer errors and admin
answers are checked here, and a refusal stops the component with the permission, the resource and
the principal named (docs/design.md section 10). Clients made by :mod:`~reliable_kafka.kafka.clients` and
:func:`~reliable_kafka.kafka.admin.admin_client` carry ``principal`` and ``component`` attributes
for these messages; other clients get a generic wording. :func:`apply_acls` grants a role's
permissions (``reliable-kafka acls --apply``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypedDict

from confluent_kafka import KafkaError, KafkaException, Message

from reliable_kafka.errors import AuthorizationError

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from reliable_kafka.acls import Acl

DeliveryCallback = Callable[[KafkaError | None, Message], None]

__all__ = [
    "REFUSED",
    "principal_of",
    "refusal",
    "raise_if_refused",
    "check_delivery",
    "guard_delivery",
    "check_consumed",
    "apply_acls",
]

REFUSED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "TOPIC",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "GROUP",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "CLUSTER",
}
"""Kafka error code -> the kind of resource whose permission was refused."""


def principal_of(kafka_config: dict[str, Any] | None) -> str:
    """The principal a client of ``kafka_config`` authenticates as, as far as the config says."""
    config = kafka_config or {}
    username = config.get("sasl.username")
    if username:
        return f"User:{username}"
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    if protocol in ("SSL", "SASL_SSL") and config.get("ssl.certificate.location"):
        return f"the principal of certificate {config['ssl.certificate.location']}"
    return f"this client's principal (security.protocol={protocol})"


def _error_of(failure: object) -> KafkaError | None:
    if isinstance(failure, KafkaException):
        failure = failure.args[0] if failure.args else None
    return failure if isinstance(failure, KafkaError) else None


def refusal(
    failure: object,
    *,
    component: str,
    principal: str,
    operation: str = "WRITE",
    topic: str | None = None,
    group: str | None = None,
    group_operation: str = "READ",
    transactional_id: str | None = None,
) -> AuthorizationError | None:
    """The :class:`AuthorizationError` that ``failure`` (a KafkaError or KafkaException) is, or None.

    ``operation`` is what was asked of ``topic``; a group refusal names ``group_operation`` on
    ``group``, a cluster refusal IDEMPOTENT_WRITE (the one cluster permission our producers need,
    implied by WRITE on any topic).
    """
    error = _error_of(failure)
    if error is None:
        return None
    resource_type = REFUSED.get(error.code())
    if resource_type is None:
        return None
    resource, asked = {
        "TOPIC": (topic, operation),
        "GROUP": (group, group_operation),
        "TRANSACTIONAL_ID": (transactional_id, "WRITE"),
        "CLUSTER": ("kafka-cluster", "IDEMPOTENT_WRITE"),
    }[resource_type]
    hint = None
    if resource_type == "TOPIC" and asked == "DESCRIBE" and topic:
        from reliable_kafka.acls import needed_on  # acls -> topology -> this module: imported when used

        hint = needed_on(topic, component=component, principal=principal)
    return AuthorizationError(
        component=component,
        principal=principal,
        operation=asked,
        resource_type=resource_type,
        resource=resource or "(not named by Kafka)",
        error=error.name(),
        hint=hint,
    )


def raise_if_refused(failure: object, **what: Any) -> None:
    """Raise :func:`refusal` of ``failure`` when it is one (arguments as :func:`refusal`)."""
    refused = refusal(failure, **what)
    if refused is not None:
        raise refused from (failure if isinstance(failure, BaseException) else None)


class _Who(TypedDict):
    component: str
    principal: str


def _who(client: object) -> _Who:
    return {
        "component": getattr(client, "component", None) or "a Kafka client",
        "principal": getattr(client, "principal", None) or principal_of(None),
    }


def check_delivery(error: KafkaError | None, message: Message, producer: object) -> None:
    """In a delivery report: raise when the write was refused (WRITE on the message's topic).

    Raised from a callback, the error leaves the ``poll``/``flush`` that served it.
    """
    if error is not None and error.code() in REFUSED:
        raise_if_refused(
            error,
            **_who(producer),
            operation="WRITE",
            topic=message.topic(),
            transactional_id=getattr(producer, "transactional_id", None),
        )


def guard_delivery(callback: DeliveryCallback, producer_ref: list[Any]) -> DeliveryCallback:
    """A producer-level ``on_delivery`` that first checks for a refusal (``producer_ref[0]`` is the
    producer, set once it exists), then calls ``callback``."""

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            check_delivery(error, message, producer_ref[0] if producer_ref else None)
        callback(error, message)

    return on_delivery


def check_consumed(message: Message, consumer: object, *, component: str | None = None) -> None:
    """For a consumed error message: raise when it is a refusal (READ on its topic, or on the group it
    subscribed with; DESCRIBE on the group of a consumer that only assigns: it asks for the group's
    coordinator all the same)."""
    who = _who(consumer)
    raise_if_refused(
        message.error(),
        component=component or who["component"],
        principal=who["principal"],
        operation="READ",
        topic=message.topic(),
        group=getattr(consumer, "group_id", None),
        group_operation="READ" if getattr(consumer, "subscribed", True) else "DESCRIBE",
    )


def apply_acls(admin: AdminClient, acls: Iterable[Acl], *, timeout: float = 60.0) -> None:
    """Create ``acls`` (:class:`reliable_kafka.acls.Acl`) through ``admin`` and wait until the
    broker's authorizer reports them all: it applies them from the metadata log a moment after
    ``create_acls`` returns. Raises :class:`AuthorizationError` when ``admin`` may not ALTER the
    cluster (creating ACLs needs it), :class:`~reliable_kafka.errors.DeliveryError` on a timeout."""
    import time

    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from reliable_kafka.errors import DeliveryError

    bindings = [
        AclBinding(
            getattr(ResourceType, acl.resource_type),
            acl.name,
            getattr(ResourcePatternType, acl.pattern_type),
            acl.principal,
            acl.host,
            getattr(AclOperation, acl.operation),
            AclPermissionType.ALLOW,
        )
        for acl in acls
    ]
    if not bindings:
        return
    who = {"component": "reliable-kafka acls", "principal": getattr(admin, "principal", None) or principal_of(None)}
    for future in admin.create_acls(bindings, request_timeout=timeout).values():
        try:
            future.result(timeout)
        except KafkaException as exc:
            raise_if_refused(exc, **who)
            raise
    deadline = time.monotonic() + timeout
    wanted: dict[str, set[str]] = {}
    for binding in bindings:
        wanted.setdefault(binding.principal, set()).add(str(binding))
    for principal, theirs in wanted.items():
        anything: Any = None  # any name or host (AclBindingFilter's docs); its stubs say str
        match = AclBindingFilter(
            ResourceType.ANY,
            anything,
            ResourcePatternType.ANY,
            principal,
            anything,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        while True:
            found = set(map(str, admin.describe_acls(match, request_timeout=timeout).result(timeout)))
            if theirs <= found:
                break
            if time.monotonic() > deadline:
                raise DeliveryError(
                    f"ACLs of {principal} created but not reported by the broker within "
                    f"{timeout:.0f}s; check with kafka-acls.sh --list"
                )
            time.sleep(0.2)
