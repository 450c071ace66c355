"""Acker recovery from its own log (issue 5, item 1; docs/design.md sections 4 and 8).

An acker worker's table is never saved: the committed offset on each ack partition is the
smallest first offset of a pending root, and whoever owns the partition next (a restart, or
another member after a rebalance) replays from there and rebuilds the same table. Here acker
workers are separate processes (``python -m reliable_kafka acker``) so the SIGKILL is real; the
spout and a "gate" bolt run in threads. The gate holds its tuples (no ack) while the acker dies,
so their trees are pending in the lost table; once the gate opens they must complete through the
rebuilt table, with nothing timing out (the message timeout is long, and replays are counted).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from confluent_kafka import Producer

from reliable_kafka import AckerWorker, Bolt, BoltCollector, LocalCluster, Loop, Spout, Tracking, Tuple, codec
from reliable_kafka.core.ids import partition_for_root
from reliable_kafka.core.kinds import OutcomeKind
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.offsets import committed_offsets, end_offsets
from reliable_kafka.testing.records import produce_values, read_topic
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

# Long, so that a tree completed through the rebuilt table (seconds) cannot be mistaken for one
# that timed out and was replayed (a minute): replays are also counted by the spout.
MESSAGE_TIMEOUT_MS = 60_000
# Acker processes leave the group this long after a SIGKILL (the broker's minimum is 6 s).
FAST_SESSION = ("session.timeout.ms=6000", "heartbeat.interval.ms=1000")
FREE, GATED = b"free", b"gate"


# --- acker worker processes ---------------------------------------------------------------------


class AckerProcess:
    """One ``python -m reliable_kafka acker`` process; its stderr (the log) goes to a file."""

    def __init__(self, *, topology: str, bootstrap: str, name: str, ackers: int, log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        command = [
            sys.executable,
            "-m",
            "reliable_kafka",
            "acker",
            "--topology",
            topology,
            "--bootstrap",
            bootstrap,
            "--ackers",
            str(ackers),
            "--message-timeout-ms",
            str(MESSAGE_TIMEOUT_MS),
            "--name",
            name,
        ]
        for setting in FAST_SESSION:
            command += ["--kafka-config", setting]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def owned(self) -> set[int]:
        """Ack partitions this worker holds, from its assign/revoke/lost log lines in order
        (fails at once if the process has exited)."""
        assert self.alive(), f"{self.name} exited with code {self.process.returncode}"
        owned: set[int] = set()
        lines = re.findall(rf"{re.escape(self.name)}: (assigned|revoked|lost) \[([\d, ]*)\]", self.log())
        for verb, listed in lines:
            partitions = {int(p) for p in listed.split(",") if p.strip()}
            owned = owned | partitions if verb == "assigned" else owned - partitions
        return owned

    def replay_points(self) -> list[dict[int, int]]:
        """The committed offsets each (non-empty) assignment replayed from (``-1001``: none)."""
        assignments = rf"{re.escape(self.name)}: assigned \[[\d, ]*\] \(replaying from \{{([^}}]*)\}}\)"
        points = [
            {int(p): int(o) for p, o in re.findall(r"(\d+): (-?\d+)", listed)}
            for listed in re.findall(assignments, self.log())
        ]
        return [point for point in points if point]

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: no revoke, no last commit."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self, timeout: float = 30.0) -> dict[str, int]:
        """SIGTERM and wait; returns the worker's final counters (its ``stopped; AckerStats(...)`` line)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop within {timeout:.0f}s of SIGTERM") from None
        found = re.search(r"stopped; AckerStats\((.*)\)", self.log())
        assert found, f"{self.name} logged no final stats"
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}


@contextmanager
def acker_processes(
    bootstrap: str, topology: str, *, ackers: int, log_dir: Path
) -> Iterator[Callable[[str], AckerProcess]]:
    """A factory ``start(name)`` of acker processes; all are killed on exit, logs printed on failure."""
    started: list[AckerProcess] = []

    def start(name: str) -> AckerProcess:
        process = AckerProcess(topology=topology, bootstrap=bootstrap, name=name, ackers=ackers, log_dir=log_dir)
        started.append(process)
        return process

    try:
        yield start
    except BaseException:
        for process in started:
            print(f"----- log of acker process {process.name} (exit code {process.process.poll()}) -----")
            print(process.log()[-20_000:])
        raise
    finally:
        for process in started:
            process.kill()


# --- the topology under test -------------------------------------------------------------------


class Gate:
    """A rich bolt's handler: acks free tuples at once and holds gated ones until released.

    Gated values are ``gate-<wave>-<i>``; ``release(wave)`` lets go of every wave up to ``wave``
    (``open()`` of all). The bolt acks held tuples on its next call (it must run in the bolt's
    thread), so the test nudges it with an untracked record. ``released_at`` keeps, per root, the
    monotonic time just before its ack was handed to the collector.
    """

    def __init__(self) -> None:
        self.release_through = 0  # waves <= this are released; read by the bolt thread
        self.reset_wave: int | None = None  # RESET_TIMEOUT the held tuples of this wave, once
        self.held: dict[int, list[Tuple]] = {}
        self.held_roots: dict[int, set[int]] = {}  # wave -> roots of its tuples
        self.released_at: dict[int, float] = {}
        self.gated_seen = 0
        self.reset_roots = 0

    def open(self) -> None:
        self.release_through = 1 << 30

    def release(self, wave: int) -> None:
        self.release_through = wave

    def __call__(self, tuple_: Tuple, collector: BoltCollector) -> None:
        if tuple_.value.startswith(GATED):
            wave = int(tuple_.value.split(b"-")[1])
            self.gated_seen += 1
            self.held_roots.setdefault(wave, set()).update(tuple_.roots)
            self.held.setdefault(wave, []).append(tuple_)
        else:
            collector.ack(tuple_)
        if self.reset_wave is not None and self.reset_wave in self.held:
            for held in self.held[self.reset_wave]:
                collector.reset_timeout(held)
                self.reset_roots += 1
            self.reset_wave = None
        for wave in [w for w in self.held if w <= self.release_through]:
            now = time.monotonic()
            for held in self.held.pop(wave):
                for root in held.roots:
                    self.released_at[root] = now
                collector.ack(held)

    def gated_roots(self) -> set[int]:
        return set().union(*self.held_roots.values()) if self.held_roots else set()


class Load:
    """Free records produced in the background at about ``rate`` a second until stopped."""

    def __init__(self, bootstrap: str, topic: str, *, rate: float = 50.0) -> None:
        self.topic = topic
        self.rate = rate
        self.produced = 0
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(1 / self.rate):
            self._producer.produce(self.topic, FREE + b"-load-%d" % self.produced)
            self.produced += 1
            self._producer.poll(0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        remaining = self._producer.flush(30)
        assert remaining == 0, f"background load: {remaining} records to {self.topic} not delivered"


def setup_topology(bootstrap: str, prefix: str, *, ackers: int) -> tuple[TopologyTopics, str, str]:
    """Topics of a test topology: its own (acks with ``ackers`` partitions), a source, the tuples."""
    topics = TopologyTopics(unique_name(prefix), ackers=ackers)
    source, tuples = f"{topics.topology}-source", f"{topics.topology}-tuples"
    create_topics(bootstrap, {source: 2, tuples: 2})
    ensure_topics(admin_client(bootstrap), topics)
    return topics, source, tuples


def spout_and_gate(bootstrap: str, topics: TopologyTopics, source: str, tuples: str) -> tuple[Spout, Bolt, Gate]:
    gate = Gate()
    on = {"topology": topics.topology, "connection": bootstrap}
    spout = Spout(
        **on,
        source_topics=source,
        group_id=f"{topics.topology}-spout",
        emit_to=tuples,
        tracking=Tracking(message_timeout_ms=MESSAGE_TIMEOUT_MS),
    )
    bolt = Bolt(**on, source_topics=tuples, group_id=f"{topics.topology}-gate", handler=gate)
    return spout, bolt, gate


def produce_gated(bootstrap: str, source: str, count: int, *, wave: int = 1) -> None:
    produce_values(bootstrap, source, [GATED + b"-%d-%d" % (wave, i) for i in range(count)])


def produce_free(bootstrap: str, source: str, count: int, tag: bytes) -> None:
    produce_values(bootstrap, source, [FREE + b"-" + tag + b"-%d" % i for i in range(count)])


def first_event_offsets(bootstrap: str, acks_topic: str, roots: set[int]) -> dict[int, int]:
    """root -> offset of the first ack record (in its partition) that holds an entry for it."""
    wanted = np.fromiter(roots, dtype=np.int64, count=len(roots))
    first: dict[int, int] = {}
    for message in sorted(read_topic(bootstrap, acks_topic), key=lambda m: (m.partition(), m.offset())):
        batch = codec.decode_ack_batch(message.value())
        for root in batch.roots[np.isin(batch.roots, wanted)].tolist():
            first.setdefault(root, message.offset())
    missing = roots - first.keys()
    assert not missing, f"{len(missing)} gated roots have no entry on {acks_topic}, e.g. {sorted(missing)[:3]}"
    return first


def lowest_by_partition(first: dict[int, int], ack_partitions: int) -> dict[int, int]:
    """Per ack partition: the smallest first-event offset of the given roots."""
    lowest: dict[int, int] = {}
    for root, offset in first.items():
        p = partition_for_root(root, ack_partitions)
        lowest[p] = min(lowest.get(p, offset), offset)
    return lowest


def caught_up(bootstrap: str, group: str, topic: str) -> bool:
    """Whether ``group`` committed the end of every partition (an empty one needs no commit)."""
    committed = committed_offsets(bootstrap, group, topic)
    return all(committed.get(p, -1) == end or end == 0 for p, end in end_offsets(bootstrap, topic).items())


def progress(bootstrap: str, topics: TopologyTopics, source: str, spout: Spout, gate: Gate) -> Callable[[], str]:
    """The state a failed wait reports: both groups' commits, the gate, the spout's counters."""

    def state() -> str:
        spout_commits = committed_offsets(bootstrap, f"{topics.topology}-spout", source)
        acker_commits = committed_offsets(bootstrap, f"{topics.topology}.ackers", topics.acks)
        return (
            f"spout committed {spout_commits} of {end_offsets(bootstrap, source)}; acker committed "
            f"{acker_commits} of {end_offsets(bootstrap, topics.acks)}; gate saw {gate.gated_seen} gated, "
            f"holds {sum(map(len, gate.held.values()))}; spout {spout.stats}"
        )

    return state


def hold_gated_trees(
    cluster: LocalCluster,
    bootstrap: str,
    topics: TopologyTopics,
    source: str,
    spout: Spout,
    gate: Gate,
    *,
    free: int,
    gated: int,
    sentinels: int,
) -> dict[int, int]:
    """Complete ``free`` trees, then leave ``gated`` trees pending in the acker's table.

    Returns root -> first ack-topic offset of every gated root. Sentinel trees, started after
    the gate holds every gated tuple, complete only once the acker folded the records before
    theirs on each partition: so the gated INITs are in the table when this returns.
    """
    show = progress(bootstrap, topics, source, spout, gate)
    produce_free(bootstrap, source, free, b"early")
    cluster.wait_until(
        lambda: caught_up(bootstrap, f"{topics.topology}-spout", source),
        timeout=120,
        what=f"the first {free} free trees completed",
        progress=show,
    )
    produce_gated(bootstrap, source, gated)
    cluster.wait_until(
        lambda: gate.gated_seen == gated,
        timeout=120,
        what=f"the gate bolt holds all {gated} gated tuples",
        progress=show,
    )
    produce_free(bootstrap, source, sentinels, b"sentinel")
    cluster.wait_until(
        lambda: spout.stats.completed == free + sentinels,
        timeout=120,
        what="the sentinel trees completed behind the gated INITs",
        progress=show,
    )
    assert spout.stats.completed == free + sentinels  # no gated tree completed early
    first = first_event_offsets(bootstrap, topics.acks, gate.gated_roots())
    assert len(first) == gated
    return first


def wait_for_low_points(
    cluster: LocalCluster, bootstrap: str, topics: TopologyTopics, lowest: dict[int, int]
) -> dict[int, int]:
    """Wait until the acker group committed on every ack partition; each commit must be at or
    below the first event of the partition's pending (gated) roots. Returns the commits."""
    group = f"{topics.topology}.ackers"
    cluster.wait_until(
        lambda: all(o >= 0 for o in committed_offsets(bootstrap, group, topics.acks).values()),
        timeout=60,
        what="the acker committed a low point on every ack partition",
        progress=lambda: f"committed {committed_offsets(bootstrap, group, topics.acks)}",
    )
    committed = committed_offsets(bootstrap, group, topics.acks)
    for p, offset in committed.items():
        assert offset <= lowest[p], (
            f"ack partition {p}: committed {offset} passed the first event ({lowest[p]}) of a pending root"
        )
    return committed


def open_gate_and_finish(
    cluster: LocalCluster, bootstrap: str, topics: TopologyTopics, source: str, tuples: str, spout: Spout, gate: Gate
) -> tuple[float, int]:
    """Open the gate and wait (bounded well below the message timeout) until the spout committed
    the whole source topic; returns the seconds it took and the wall-clock ms of the opening."""
    opened, opened_ms = time.monotonic(), int(time.time() * 1000)
    gate.open()
    produce_values(bootstrap, tuples, [b"nudge"])  # untracked: wakes the gate bolt
    cluster.wait_until(
        lambda: caught_up(bootstrap, f"{topics.topology}-spout", source),
        timeout=MESSAGE_TIMEOUT_MS / 2000,
        what="every held tree completed through the rebuilt table before any timeout",
        progress=progress(bootstrap, topics, source, spout, gate),
    )
    return time.monotonic() - opened, opened_ms


def check_held_outcomes(bootstrap: str, topics: TopologyTopics, held: set[int], opened_ms: int) -> None:
    """Every held root got COMPLETED, and only after the gate opened (the outcome records'
    timestamps, same host clock): no premature completion, no FAILED or TIMED_OUT, from either
    the table that died or the one rebuilt from the log."""
    completed: set[int] = set()
    for message in read_topic(bootstrap, topics.outcomes):
        batch = codec.decode_outcomes(message.value())
        mine = np.isin(batch.roots, np.fromiter(held, dtype=np.int64, count=len(held)))
        if not mine.any():
            continue
        kinds = {OutcomeKind(k).name for k in batch.kinds[mine].tolist()}
        where = f"{topics.outcomes}[{message.partition()}]@{message.offset()}"
        assert kinds == {"COMPLETED"}, f"held roots decided {kinds} at {where}"
        assert message.timestamp()[1] >= opened_ms, (
            f"held roots completed {opened_ms - message.timestamp()[1]} ms before the gate opened ({where})"
        )
        completed.update(batch.roots[mine].tolist())
    assert completed == held, f"{len(held - completed)} held roots got no COMPLETED outcome"


# --- tests -------------------------------------------------------------------------------------


def test_restarted_acker_rebuilds_its_table_and_held_trees_complete_without_timeouts(kafka_bootstrap, tmp_path):
    bootstrap = kafka_bootstrap
    topics, source, tuples = setup_topology(bootstrap, "ack-restart", ackers=1)
    spout, bolt, gate = spout_and_gate(bootstrap, topics, source, tuples)
    free, gated, sentinels = 200, 3000, 20
    with acker_processes(bootstrap, topics.topology, ackers=1, log_dir=tmp_path) as start_acker:
        first_acker = start_acker("acker-first")
        with LocalCluster(spout, bolt) as cluster:
            cluster.wait_until(
                lambda: first_acker.owned() == {0}, timeout=60, what="acker-first owns the ack partition"
            )
            first = hold_gated_trees(
                cluster, bootstrap, topics, source, spout, gate, free=free, gated=gated, sentinels=sentinels
            )
            lowest = lowest_by_partition(first, 1)
            wait_for_low_points(cluster, bootstrap, topics, lowest)

            with Load(bootstrap, source) as load:
                time.sleep(1.0)
                first_acker.kill()
                killed = time.monotonic()
                killed_at = committed_offsets(bootstrap, f"{topics.topology}.ackers", topics.acks)
                assert 0 <= killed_at[0] <= lowest[0]
                time.sleep(1.0)  # load arrives with no acker at all
                second_acker = start_acker("acker-second")
                cluster.wait_until(
                    lambda: second_acker.owned() == {0}, timeout=60, what="the restarted acker owns the ack partition"
                )
                unowned_s = time.monotonic() - killed
                time.sleep(1.0)
            assert load.produced > 0

            assert second_acker.replay_points() == [killed_at], "the restart must replay from the committed low point"
            assert spout.stats.completed <= free + sentinels + load.produced  # held trees still pending
            seconds, opened_ms = open_gate_and_finish(cluster, bootstrap, topics, source, tuples, spout, gate)
        final = second_acker.stop()

    print(
        f"acker killed with its low point at {killed_at} (first held root's event at {lowest}); "
        f"partition without owner for {unowned_s:.1f}s; "
        f"gate open -> all {gated} held trees completed and committed: {seconds:.1f}s "
        f"(message timeout {MESSAGE_TIMEOUT_MS / 1000:.0f}s); restarted acker {final}"
    )
    check_held_outcomes(bootstrap, topics, gate.gated_roots(), opened_ms)
    total = free + gated + sentinels + load.produced
    assert spout.stats.completed == total  # replayed outcomes of finished trees were ignored
    assert spout.stats.replayed == 0 and spout.stats.dead_lettered == 0
    assert final["timed_out"] == 0 and final["expired_ownerless"] == 0
    assert final["completed"] >= gated + load.produced


def test_killed_acker_partition_fails_over_to_the_survivor_which_completes_held_trees(kafka_bootstrap, tmp_path):
    bootstrap = kafka_bootstrap
    topics, source, tuples = setup_topology(bootstrap, "ack-failover", ackers=2)
    spout, bolt, gate = spout_and_gate(bootstrap, topics, source, tuples)
    free, gated, sentinels = 200, 2000, 40
    with acker_processes(bootstrap, topics.topology, ackers=2, log_dir=tmp_path) as start_acker:
        doomed = start_acker("acker-doomed")
        with LocalCluster(spout, bolt) as cluster:
            cluster.wait_until(
                lambda: doomed.owned() == {0, 1}, timeout=60, what="acker-doomed owns both ack partitions"
            )
            survivor = start_acker("acker-survivor")
            cluster.wait_until(
                lambda: len(doomed.owned()) == 1 and len(survivor.owned()) == 1 and doomed.owned() != survivor.owned(),
                timeout=90,
                what="the two ackers hold one ack partition each",
                progress=lambda: f"doomed {doomed.owned()}, survivor {survivor.owned()}",
            )
            (moving,) = doomed.owned()
            first = hold_gated_trees(
                cluster, bootstrap, topics, source, spout, gate, free=free, gated=gated, sentinels=sentinels
            )
            lowest = lowest_by_partition(first, 2)
            assert set(lowest) == {0, 1}, "gated roots should fall on both ack partitions"
            wait_for_low_points(cluster, bootstrap, topics, lowest)
            replays_before = len(survivor.replay_points())

            with Load(bootstrap, source) as load:
                time.sleep(1.0)
                doomed.kill()
                killed = time.monotonic()
                killed_at = committed_offsets(bootstrap, f"{topics.topology}.ackers", topics.acks)
                assert 0 <= killed_at[moving] <= lowest[moving]
                cluster.wait_until(
                    lambda: survivor.owned() == {0, 1},
                    timeout=90,
                    what=f"ack partition {moving} moved to the survivor",
                    progress=lambda: f"survivor owns {survivor.owned()}",
                )
                unowned_s = time.monotonic() - killed
                time.sleep(1.0)
            assert load.produced > 0

            taken_over = survivor.replay_points()[replays_before:]
            assert taken_over == [{moving: killed_at[moving]}], (
                f"the survivor must replay partition {moving} from its committed low point {killed_at[moving]}"
            )
            seconds, opened_ms = open_gate_and_finish(cluster, bootstrap, topics, source, tuples, spout, gate)
        final = survivor.stop()

    print(
        f"failover of partition {moving} (low point {killed_at[moving]}, first held root's event at "
        f"{lowest[moving]}, without owner for {unowned_s:.1f}s): gate open -> all {gated} held trees "
        f"completed: {seconds:.1f}s; survivor {final}"
    )
    check_held_outcomes(bootstrap, topics, gate.gated_roots(), opened_ms)
    assert spout.stats.completed == free + gated + sentinels + load.produced
    assert spout.stats.replayed == 0 and spout.stats.dead_lettered == 0
    assert final["timed_out"] == 0 and final["expired_ownerless"] == 0


def test_committed_low_point_never_passes_the_first_event_of_a_pending_root(kafka_bootstrap):
    """Three waves of held trees, a steady stream of trees that complete at once, and waves
    released oldest first; the last wave also gets RESET_TIMEOUT (its roots change timeout bucket).
    The acker's committed offsets, sampled all along, must stay at or below the first ack record
    of every root still pending when the sample was read, and must move as waves are released.
    """
    bootstrap = kafka_bootstrap
    topics, source, tuples = setup_topology(bootstrap, "ack-lowpoint", ackers=2)
    spout, bolt, gate = spout_and_gate(bootstrap, topics, source, tuples)
    # In-process (no kill here): 30 buckets of 2 s make the low point move within the test.
    acker = AckerWorker(
        topology=topics.topology,
        connection=bootstrap,
        tracking=Tracking(ackers=2, message_timeout_ms=MESSAGE_TIMEOUT_MS),
        loop=Loop(commit_interval_ms=200),
        timeout_buckets=30,
    )
    group = f"{topics.topology}.ackers"
    per_wave, waves = 300, 3
    samples: list[tuple[float, dict[int, int]]] = []
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(0.1):
            committed = committed_offsets(bootstrap, group, topics.acks)
            samples.append((time.monotonic(), committed))  # stamped after the read: the commit came before

    sampler = threading.Thread(target=sample, name="sampler", daemon=True)
    show = progress(bootstrap, topics, source, spout, gate)
    with LocalCluster(acker, spout, bolt) as cluster, Load(bootstrap, source, rate=100) as load:
        sampler.start()
        try:
            for wave in range(1, waves + 1):
                produce_gated(bootstrap, source, per_wave, wave=wave)
                cluster.wait_until(
                    lambda wave=wave: gate.gated_seen == wave * per_wave,
                    timeout=60,
                    what=f"the gate holds wave {wave}",
                    progress=show,
                )
                time.sleep(3.0)  # the next wave starts in a later timeout bucket
            gate.reset_wave = waves
            cluster.wait_until(lambda: gate.reset_roots == per_wave, timeout=30, what="the last wave was reset")
            for wave in range(1, waves):
                time.sleep(1.0)
                gate.release(wave)
                cluster.wait_until(lambda wave=wave: wave not in gate.held, timeout=30, what=f"wave {wave} released")
            time.sleep(4.0)  # the low point moves up to the last wave while it is held
            load.stop()
            gate.open()
            produce_values(bootstrap, tuples, [b"nudge"])
            cluster.wait_until(
                lambda: caught_up(bootstrap, f"{topics.topology}-spout", source),
                timeout=90,
                what="every tree completed",
                progress=show,
            )
        finally:
            stop_sampling.set()
            sampler.join(10)

    assert spout.stats.completed == waves * per_wave + load.produced
    assert spout.stats.replayed == 0
    roots = {wave: sorted(gate.held_roots[wave]) for wave in range(1, waves + 1)}
    first = first_event_offsets(bootstrap, topics.acks, gate.gated_roots())
    all_roots = np.array([r for wave in roots.values() for r in wave], dtype=np.int64)
    released = np.array([gate.released_at[r] for r in all_roots.tolist()])
    first_offset = np.array([first[r] for r in all_roots.tolist()])
    partition = np.array([partition_for_root(r, 2) for r in all_roots.tolist()])
    violations = []
    for when, committed in samples:
        pending = released > when
        for p in (0, 1):
            mine = pending & (partition == p)
            if mine.any() and committed.get(p, -1) > first_offset[mine].min():
                violations.append((when, p, committed[p], int(first_offset[mine].min())))
    assert not violations, f"commit passed the first event of a pending root: {violations[:3]}"

    # Not vacuous: while the last wave was held, the commit moved past the first wave's records.
    last_held_until = min(gate.released_at[r] for r in roots[waves])
    first_wave_low = lowest_by_partition({r: first[r] for r in roots[1]}, 2)
    moved = [
        p
        for when, committed in samples
        if when < last_held_until
        for p in (0, 1)
        if committed.get(p, -1) > first_wave_low[p]
    ]
    print(
        f"{len(samples)} samples of the acker's commits; moved past wave 1 while wave {waves} was held "
        f"on partitions {sorted(set(moved))}"
    )
    assert len(samples) > 50
    assert moved, "the committed low point never moved while trees were held: the check proves nothing"


def _ack_record(sender: int, kind: int, root: int, val: int) -> bytes:
    return codec.encode_ack_batch(
        sender, np.array([kind], np.int8), np.array([root], np.int64), np.array([val], np.int64)
    )


def test_an_open_transaction_on_the_ack_topic_does_not_time_trees_out(kafka_bootstrap):
    """read_committed stops at an open transaction; the acks behind it are late, not lost. The
    acker's clock must not run on wall time meanwhile (it did: every tree timed out)."""
    topology = unique_name("acker-lso")
    topics = TopologyTopics(topology, ackers=1)
    ensure_topics(admin_client(kafka_bootstrap), topics)
    sender, root, edge = 4242, 777_000_111, 0x5EED
    plain = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    zombie = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topology}.zombie"})
    zombie.init_transactions(30)
    acker = AckerWorker(
        topology=topology,
        connection=kafka_bootstrap,
        tracking=Tracking(message_timeout_ms=3000),
        loop=Loop(commit_interval_ms=200),
        timeout_buckets=2,
    )
    with LocalCluster(acker) as cluster:
        plain.produce(topics.acks, _ack_record(sender, 0, root, edge), partition=0)  # INIT
        plain.flush(30)
        cluster.wait_until(lambda: acker.stats.pending == 1, timeout=30, what="the INIT folded")
        zombie.begin_transaction()
        zombie.produce(topics.acks, _ack_record(sender + 1, 3, 1, 0), partition=0)  # holds the LSO
        zombie.flush(30)
        plain.produce(topics.acks, _ack_record(sender, 1, root, edge), partition=0)  # completes the tree
        plain.flush(30)
        time.sleep(9)  # three message timeouts while the ACK waits behind the open transaction
        assert acker.stats.timed_out == 0 and acker.stats.pending == 1
        zombie.abort_transaction(30)
        cluster.wait_until(
            lambda: acker.stats.completed == 1, timeout=30, what="the tree completed", progress=lambda: str(acker.stats)
        )
    assert acker.stats.timed_out == 0
    outcomes = [codec.decode_outcomes(m.value()) for m in read_topic(kafka_bootstrap, topics.outcomes)]
    assert [(b.spout, b.roots.tolist(), b.kinds.tolist()) for b in outcomes] == [
        (sender, [root], [int(OutcomeKind.COMPLETED)])
    ]
