"""Whether a spout's class replaces some of its base's methods: where it does not, the spout skips
work those methods would need (the default handler's batch path, a completion hook per outcome batch)."""

from __future__ import annotations

__all__ = ["overridden"]


def overridden(obj: object, base: type, *names: str) -> bool:
    """True when ``type(obj)`` has its own version of any of ``base``'s methods ``names``."""
    cls = type(obj)
    return any(getattr(cls, name) is not getattr(base, name) for name in names)
