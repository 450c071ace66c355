"""Ask a component's HTTP endpoints (``/metrics``, ``/healthz``, ``/readyz``) as a probe would."""

from __future__ import annotations

import urllib.error
import urllib.request

__all__ = ["http_get"]


def http_get(port: int, path: str, *, host: str = "127.0.0.1", timeout: float = 10.0) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET http://host:port/path``; an error status is returned, not raised."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
