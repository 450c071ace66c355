"""What a chaos run found, read from the topics themselves after the faults (see the harness).

- no loss: every source record has all its effects in the sink, or is in the dead-letter topic;
- no early commit: at every sampled commit point, every record below it had all its effects in the
  sink (or its dead letter) with a timestamp before the sample;
- and the duplicates, replays, outcomes and the time to recover after each kind of kill.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from reliable_kafka import codec
from reliable_kafka.chaos.worker import FANOUT, topic_names
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.kafka.clients import coordinates
from reliable_kafka.testing.records import read_topic
from reliable_kafka.topology import TopologyTopics

__all__ = ["ChaosReport", "check", "early_commits"]

Sample = tuple[float, dict[int, int]]
"""When (epoch seconds) and the spouts' committed offsets then, by partition."""
EarlyCommit = tuple[float, int, int]
"""A sample's time, and a partition and committed offset that passed an incomplete record."""


@dataclass
class ChaosReport:
    records: int
    kills: Counter[str]
    lost: int
    early_commits: list[EarlyCommit]
    samples: int
    effects: int
    duplicates: int
    replays: int
    dead_lettered: int
    recovery_s: dict[str, list[float]]
    seconds: float
    caught_up: bool
    exactly_once: bool | None = None
    crashes: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # OutcomeKind name -> trees decided so
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and not self.early_commits
            and self.caught_up
            and self.samples > 0
            and self.exactly_once is not False
        )

    def render(self) -> str:
        kills = ", ".join(f"{kind} {n}" for kind, n in sorted(self.kills.items())) or "none"
        lines = [
            "",
            "chaos summary",
            f"  source records        {self.records}",
            f"  kills                 {sum(self.kills.values())} ({kills})",
            f"  lost                  {self.lost}",
            f"  early commits         {len(self.early_commits)} in {self.samples} sampled commit points",
            f"  effects in sink       {self.effects} ({self.records * FANOUT} distinct expected)",
            f"  duplicates            {self.duplicates}",
            f"  replays (re-emits)    {self.replays}",
            f"  trees failed          {self.outcomes['FAILED']}, timed out {self.outcomes['TIMED_OUT']} "
            f"(outcomes topic; each is replayed)",
            f"  dead-lettered         {self.dead_lettered}",
            f"  crashes (restarted)   {self.crashes}",
        ]
        for kind, times in sorted(self.recovery_s.items()):
            if times:
                times = sorted(times)
                lines.append(
                    f"  recovery after {kind:<6} median {times[len(times) // 2]:.1f} s, max {times[-1]:.1f} s "
                    f"({len(times)} kills)"
                )
        lines.append(f"  time                  {self.seconds:.0f} s")
        checks = [
            ("lost = 0", self.lost == 0),
            ("committed offsets never passed an incomplete record", not self.early_commits and self.samples > 0),
            ("committed offsets reached the end of the source", self.caught_up),
        ]
        if self.exactly_once is not None:
            checks.append(("exactly once: every effect in the sink once", self.exactly_once))
        lines.append("checks")
        lines += [f"  [{'ok' if passed else 'FAILED'}] {name}" for name, passed in checks]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def check(
    bootstrap: str,
    topology: str,
    *,
    records: int,
    transactional: bool,
    samples: list[Sample],
    kills: Counter[str],
    kill_times: list[tuple[str, float]],
    caught_up: bool,
    started: float,
) -> ChaosReport:
    """Read the topology's topics and judge the run (the samples are ``(time, committed offsets)``)."""
    topics = topic_names(topology)
    position = {int(m.value() or b""): coordinates(m)[1:] for m in read_topic(bootstrap, topics["source"])}
    first_seen: dict[bytes, float] = {}
    copies: Counter[bytes] = Counter()
    for message in read_topic(bootstrap, topics["sink"]):
        effect = message.value() or b""
        copies[effect] += 1
        stamp = message.timestamp()[1] / 1000
        first_seen[effect] = min(first_seen.get(effect, stamp), stamp)
    dead = {}
    for message in read_topic(bootstrap, TopologyTopics(topology).dlq):
        dead[int(message.value() or b"")] = message.timestamp()[1] / 1000
    # when each source record's effects were all in the sink (or it was dead-lettered)
    complete_at: dict[int, float] = {}
    lost = 0
    for record in range(records):
        seen = [first_seen.get(f"{record}:{j}".encode()) for j in range(FANOUT)]
        effects_at = [t for t in seen if t is not None]
        # complete when its last effect was written or when it was dead-lettered, whichever came
        # first (a dead-lettered tree's last effects may still be written later, from a backlog)
        done = [dead[record]] if record in dead else []
        if len(effects_at) == FANOUT:
            done.append(max(effects_at))
        if done:
            complete_at[record] = min(done)
        else:
            lost += 1
    early = early_commits(samples, position, complete_at)
    stage1 = sum(1 for _ in read_topic(bootstrap, topics["stage1"]))
    effects = sum(copies.values())
    report = ChaosReport(
        records=records,
        kills=kills,
        lost=lost,
        early_commits=early,
        samples=len(samples),
        effects=effects,
        duplicates=effects - len(copies),
        replays=stage1 - len(position),
        dead_lettered=len(dead),
        recovery_s=_recovery_times(samples, kill_times),
        seconds=time.monotonic() - started,
        caught_up=caught_up,
    )
    for message in read_topic(bootstrap, TopologyTopics(topology).outcomes):
        batch = codec.decode_outcomes(message.value())
        report.outcomes.update(OutcomeKind(kind).name for kind in batch.kinds.tolist())
    if transactional:  # no tree fails or times out on purpose here: nothing may repeat
        report.exactly_once = report.duplicates == 0 and lost == 0
    return report


def early_commits(
    samples: list[Sample], position: dict[int, tuple[int, int]], complete_at: dict[int, float]
) -> list[EarlyCommit]:
    """Samples whose committed offset passed a record that was not complete at the sample's time."""
    by_partition: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for record, (partition, offset) in position.items():
        by_partition[partition].append((offset, complete_at.get(record, float("inf"))))
    prefix_offsets: dict[int, list[int]] = {}
    prefix_latest: dict[int, list[float]] = {}
    for partition, entries in by_partition.items():
        entries.sort()
        prefix_offsets[partition] = [offset for offset, _ in entries]
        latest: list[float] = []
        running = 0.0
        for _, when in entries:
            running = max(running, when)
            latest.append(running)
        prefix_latest[partition] = latest
    early: list[EarlyCommit] = []
    for when, committed in samples:
        for partition, offset in committed.items():
            if offset <= 0 or partition not in prefix_offsets:
                continue
            below = bisect_left(prefix_offsets[partition], offset)  # records at offsets < committed
            if below and prefix_latest[partition][below - 1] > when:
                early.append((when, partition, offset))
    return early


def _recovery_times(samples: list[Sample], kill_times: list[tuple[str, float]]) -> dict[str, list[float]]:
    """Per kind of kill: seconds until the committed total moved again after the kill."""
    totals = [(when, sum(max(0, c) for c in committed.values())) for when, committed in samples]
    times: dict[str, list[float]] = defaultdict(list)
    for kind, killed_at in kill_times:
        before = [total for when, total in totals if when <= killed_at]
        if not before:
            continue
        after = next((when for when, total in totals if when > killed_at and total > before[-1]), None)
        if after is not None:
            times[kind].append(after - killed_at)
    return dict(times)
