"""Requests a local Kafka broker served, by type, from the broker's own metrics (a measuring aid).

Counts every client's requests, including clients that report no librdkafka statistics (admin
clients, the bench's writer). ``snapshot PID OUT`` saves the broker JVM's request counts and time
sums (``bench/BrokerRequests.java``, run by ``java``; needs a JDK); ``diff A B`` prints what was
served between two snapshots. As the bench pipeline's burst hook (``RK_BENCH_BROKER_THREADS=1
RK_BENCH_BURST_HOOK=CMD``, called as ``CMD CONFIG PHASE before|after``) a two-line script calls
``snapshot`` and, after, ``diff``. The times are wall clock (queueing included), not CPU.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

JAVA = Path(__file__).with_name("BrokerRequests.java")


def snapshot(pid: str, out: str) -> None:
    text = subprocess.run(
        ["java", "-Djdk.attach.allowAttachSelf=true", str(JAVA), pid], check=True, capture_output=True, text=True
    ).stdout
    Path(out).write_text(text)


def _read(path: str) -> dict[str, float]:
    figures: dict[str, float] = defaultdict(float)
    for line in Path(path).read_text().splitlines():
        key, value = line.split("\t")
        figures[re.sub(r" v\d+$", "", key)] += float(value)  # counts are kept per request version
    return figures


def diff(before: str, after: str) -> str:
    a, b = _read(before), _read(after)
    rows = []
    for key in b:
        if key.endswith(" count") and key != "FetchConsumer count":  # FetchConsumer repeats Fetch
            request = key[: -len(" count")]
            served = b[key] - a.get(key, 0.0)
            if served:
                local = b[f"{request} LocalTimeMsSum"] - a.get(f"{request} LocalTimeMsSum", 0.0)
                rows.append((request, served, local))
    rows.sort(key=lambda row: -row[1])
    return f"{sum(row[1] for row in rows):.0f} requests | " + "  ".join(
        f"{request} {served:.0f} (local {local:.0f} ms)" for request, served, local in rows
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "snapshot":
        snapshot(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        print(diff(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("usage: broker_requests.py snapshot PID OUT | diff BEFORE AFTER")
