"""Checks of the public constructors' arguments: each raises :class:`ConfigError` naming the
component, the parameter, the value given and what is allowed, at construction, so that a wrong
type never becomes a late ``TypeError`` inside a running loop (or a C assertion in librdkafka).

Every constructor calls these at the top of its ``__init__``, one line a parameter. ``bool`` is
not an ``int`` here (``True`` is a mistake for a count), and a float is not an int.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from reliable_kafka.errors import ConfigError

__all__ = [
    "require_int",
    "require_number",
    "require_str",
    "require_bool",
    "require_topology",
    "require_choice",
    "require_topics",
    "require_callable",
    "require_mapping",
    "require_having",
    "require_instance",
    "require_output_topic",
    "own_topics",
    "refused_outputs",
]


def _refuse(component: str, name: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{component}: {name} must be {allowed}, got {value!r} ({type(value).__name__})")


def _range(minimum: float | None, maximum: float | None, below: float | None) -> str:
    parts = []
    if minimum is not None:
        parts.append(f">= {minimum}")
    if maximum is not None:
        parts.append(f"<= {maximum}")
    if below is not None:
        parts.append(f"< {below}")
    return " and ".join(parts)


def require_int(
    component: str,
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
) -> None:
    """An ``int`` (not a ``bool``) within ``[minimum, maximum]``; None too when ``optional``."""
    if value is None and optional:
        return
    allowed = "an int" + (f" {_range(minimum, maximum, None)}" if minimum is not None or maximum is not None else "")
    if optional:
        allowed += " or None"
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(component, name, value, allowed)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _refuse(component, name, value, allowed)


def require_number(
    component: str,
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
    above: float | None = None,
    optional: bool = False,
) -> None:
    """An ``int`` or ``float`` (not a ``bool``, not NaN) in range; None too when ``optional``."""
    if value is None and optional:
        return
    bounds = [b for b in (_range(minimum, maximum, below), f"> {above}" if above is not None else "") if b]
    allowed = "a number" + (f" {' and '.join(bounds)}" if bounds else "") + (" or None" if optional else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN != NaN
        raise _refuse(component, name, value, allowed)
    if (
        (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
        or (below is not None and value >= below)
        or (above is not None and value <= above)
    ):
        raise _refuse(component, name, value, allowed)


def require_str(component: str, name: str, value: Any, *, optional: bool = False) -> None:
    """A non-empty ``str``; None too when ``optional``."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        raise _refuse(component, name, value, "a non-empty str" + (" or None" if optional else ""))


_TOPIC_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")
_LONGEST_SUFFIX = len(".dlq-replayed")  # of a topology's own topics (own_topics)


def require_topology(component: str, name: str, value: Any) -> None:
    """A topology name: the prefix of its topics, so Kafka's topic characters (letters, digits,
    ``.``, ``_``, ``-``), short enough for ``<name>.dlq-replayed`` to stay within 249."""
    allowed = f"a topic prefix of letters, digits, '.', '_' and '-', at most {249 - _LONGEST_SUFFIX} long"
    if not isinstance(value, str) or not _TOPIC_CHARACTERS.fullmatch(value) or len(value) > 249 - _LONGEST_SUFFIX:
        raise _refuse(component, name, value, allowed)


def require_bool(component: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise _refuse(component, name, value, "True or False")


def require_choice(component: str, name: str, value: Any, choices: Collection[Any]) -> None:
    if not isinstance(value, (str, int, type(None))) or value not in choices:
        raise _refuse(component, name, value, "one of " + ", ".join(repr(c) for c in choices))


def require_topics(component: str, name: str, value: Any) -> list[str]:
    """A topic name or a non-empty list (tuple, set) of them; returns them as a list."""
    allowed = "a topic name or a non-empty list of topic names"
    if isinstance(value, str):
        topics = [value]
    elif isinstance(value, (list, tuple, set, frozenset)):
        topics = list(value)
    else:
        raise _refuse(component, name, value, allowed)
    if not topics or not all(isinstance(topic, str) and topic for topic in topics):
        raise _refuse(component, name, value, allowed)
    return topics


def require_callable(component: str, name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not callable(value):
        raise _refuse(component, name, value, "callable" + (" or None" if optional else ""))


def require_mapping(component: str, name: str, value: Any, *, optional: bool = True) -> None:
    """A dict of settings (any ``Mapping``); None too when ``optional``."""
    if value is None and optional:
        return
    if not isinstance(value, Mapping):
        raise _refuse(component, name, value, "a dict" + (" or None" if optional else ""))


def require_having(component: str, name: str, value: Any, methods: Iterable[str], *, optional: bool = True) -> None:
    """An object with these callable attributes (a protocol such as ``KafkaClients`` or ``Clock``)."""
    if value is None and optional:
        return
    methods = list(methods)
    if not all(callable(getattr(value, method, None)) for method in methods):
        raise _refuse(component, name, value, "an object with " + ", ".join(f"{m}()" for m in methods))


def require_instance(
    component: str, name: str, value: Any, kind: type | tuple[type, ...], *, optional: bool = True
) -> None:
    """An instance of ``kind`` (a class, or a tuple of them); None too when ``optional``."""
    if value is None and optional:
        return
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        allowed = " or ".join(f"a {k.__name__}" for k in kinds) + (" or None" if optional else "")
        raise _refuse(component, name, value, allowed)


def own_topics(topics: Any) -> frozenset[str]:
    """Every topic a topology owns (a :class:`~reliable_kafka.topology.TopologyTopics`): none of
    them is a place for a user's tuples."""
    return frozenset(
        (
            topics.acks,
            topics.outcomes,
            topics.dlq,
            topics.quarantine,
            topics.failures,
            topics.roots,
            topics.dlq_replayed,
            topics.status,
        )
    )


def require_output_topic(component: str, name: str, topic: Any, refused: Mapping[str, str]) -> None:
    """``topic`` is a non-empty str and not a topic that ``refused`` maps to why it is refused
    (a component's source, a topology's own topic): a tuple sent there is read back as input, or
    as an ack event, a dead letter or a status, and ends in the DLQ or quarantine."""
    require_str(component, name, topic)
    why = refused.get(topic)
    if why is not None:
        raise ConfigError(f"{component}: {name} {topic!r} is {why}; emit to a topic of your own")


def refused_outputs(topics: Any, sources: Iterable[str]) -> dict[str, str]:
    """Topic -> why a component reading ``sources`` in topology ``topics`` may not emit to it."""
    refused = {topic: f"a topic of topology {topics.topology!r}" for topic in own_topics(topics)}
    refused.update({source: "this component's own source (its tuples would be read again)" for source in sources})
    return refused
