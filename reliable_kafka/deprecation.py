"""Old keyword names that still work, with a warning, after a rename (one name per concept)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from reliable_kafka.errors import ConfigError

__all__ = ["renamed_keywords"]

P = ParamSpec("P")
R = TypeVar("R")


def renamed_keywords(**renamed: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Accept each old keyword (the argument's name) for the new one (its value).

    The old name gives a :class:`DeprecationWarning` that names the new one; both at once is a
    :class:`ConfigError`. Type checkers see only the new names, so they steer code to them.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        owner = function.__qualname__.removesuffix(".__init__")

        @functools.wraps(function)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            for old, new in renamed.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ConfigError(f"{owner}: give {new} only ({old} is its old, deprecated name)")
                    warnings.warn(
                        f"{owner}: {old}= is deprecated; use {new}= (the same setting)",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return call

    return decorate
