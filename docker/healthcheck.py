"""The acker image's HEALTHCHECK: asks the component's own HTTP endpoint (docs/operations.md).

    rk-healthcheck [PATH]     PATH: /healthz (the default: liveness) or /readyz (readiness)

The port is the one the container's command gave (``--metrics-port N`` of PID 1, the entry point),
or ``$RK_HEALTH_PORT``. A container started without an endpoint has nothing to ask: it passes,
and says so. Exit 0: healthy; 1: not (what the endpoint answered is printed, so that
``docker inspect`` shows why).
"""

import os
import sys
import urllib.error
import urllib.request


def port_of_command(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--metrics-port" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--metrics-port="):
            return arg.split("=", 1)[1]
    return None


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "/healthz"
    port = os.environ.get("RK_HEALTH_PORT")
    if not port:
        try:
            with open("/proc/1/cmdline", "rb") as f:
                port = port_of_command([a.decode() for a in f.read().split(b"\0") if a])
        except OSError:
            port = None
    if not port or port == "0":
        print("no --metrics-port (or RK_HEALTH_PORT): no endpoint to ask")
        return 0
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            print(response.read().decode(errors="replace"))
            return 0
    except urllib.error.HTTPError as exc:
        print(f"{url}: {exc.code} {exc.read().decode(errors='replace')}")
    except OSError as exc:
        print(f"{url}: {exc}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
