"""Run a topology's components in threads of one process, as Storm's LocalCluster does.

For tests, examples and the demo. In production each component is its own process (the CLI's
``acker`` command, or the user's script calling ``run(handle_signals=True)``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from reliable_kafka.errors import ComponentDiedError, WaitTimeoutError
from reliable_kafka.validation import require_having, require_str

__all__ = ["LocalCluster", "Component"]

log = logging.getLogger(__name__)


class Component(Protocol):
    name: str
    ready: threading.Event

    def run(self, stop: threading.Event | None = None) -> object: ...


class LocalCluster:
    """Starts each component's ``run`` in a thread; ``stop()`` (or leaving the ``with``) stops all.

    A component that dies with an exception is reported by :meth:`check` (and on stop), so a test
    fails with the component's error instead of waiting for a timeout.
    """

    def __init__(self, *components: Component) -> None:
        for i, component in enumerate(components):  # each one's run() is called in its own thread
            require_having("LocalCluster", f"components[{i}]", component, ("run",), optional=False)
            require_str("LocalCluster", f"components[{i}].name", getattr(component, "name", None))
            require_having(
                "LocalCluster", f"components[{i}].ready", getattr(component, "ready", None), ("wait",), optional=False
            )
        self.components = list(components)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: dict[str, BaseException] = {}

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, *, ready_timeout: float = 60.0) -> LocalCluster:
        for component in self.components:
            thread = threading.Thread(target=self._run, args=(component,), name=component.name, daemon=True)
            thread.start()
            self._threads.append(thread)
        deadline = time.monotonic() + ready_timeout
        for component in self.components:
            while not component.ready.wait(0.2):
                self.check()
                if time.monotonic() > deadline:
                    raise WaitTimeoutError(
                        f"LocalCluster: {component.name} got no partitions within "
                        f"{ready_timeout:.0f}s; is the broker up and are its topics created?"
                    )
        return self

    def _run(self, component: Component) -> None:
        try:
            component.run(self._stop)
        except BaseException as exc:  # reported by check(); the other components go on
            log.exception("%s died", component.name)
            self.errors[component.name] = exc

    def check(self) -> None:
        """Raise the first error of a component that died."""
        if self.errors:
            name, error = next(iter(self.errors.items()))
            raise ComponentDiedError(f"component {name} died: {error!r}", component=name) from error

    def wait_until(
        self,
        condition: Callable[[], bool],
        *,
        timeout: float,
        what: str,
        progress: Callable[[], str] | None = None,
        interval: float = 0.2,
    ) -> None:
        """Poll ``condition`` until true; raise with ``what`` and the last progress line on timeout."""
        deadline = time.monotonic() + timeout
        while not condition():
            self.check()
            if time.monotonic() > deadline:
                detail = f" (last state: {progress()})" if progress else ""
                raise WaitTimeoutError(f"not reached within {timeout:.0f}s: {what}{detail}")
            time.sleep(interval)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            log.error("components did not stop within %.0fs: %s", timeout, stuck)
