"""The seeded simulation of the shipped Spout, BasicBolt and AckerWorker, and that it finds bugs."""

from __future__ import annotations

import pytest

from reliable_kafka.core.tracker import InFlightTracker
from reliable_kafka.spout.spout import SpoutCollector
from reliable_kafka.testing.shipped_simulation import SimConfig, SimulationFailed, simulate


@pytest.mark.parametrize("seed", range(8))
def test_invariants_hold_under_faults_crashes_and_rebalances(seed):
    result = simulate(SimConfig(seed=seed))
    assert result.completed + result.dead_lettered >= 24  # every record settled (some possibly twice)
    assert result.crashes > 0 and result.faults > 0  # the run was not a quiet one


@pytest.mark.parametrize("seed", range(4))
def test_invariants_hold_for_the_transactional_spout_and_bolts(seed):
    result = simulate(SimConfig(seed=seed, transactional=True))
    assert result.completed + result.dead_lettered >= 24 and result.crashes > 0


def test_a_longer_run_with_more_records_and_processes():
    result = simulate(SimConfig(seed=1234, records=80, spouts=3, bolts=3, acker_workers=2, ack_partitions=3,
                                steps=1200, bolt_failure=0.3, max_retries=1))
    assert result.dead_lettered > 0 and result.crashes > 0


def test_a_seed_replays_exactly():
    first, second = simulate(SimConfig(seed=7)), simulate(SimConfig(seed=7))
    assert first.trace == second.trace and first == second  # every record of every topic too (log_digest)
    assert simulate(SimConfig(seed=8)).log_digest != first.log_digest


def test_the_command_runs_a_range_of_seeds(capsys):
    from reliable_kafka.testing.shipped_simulation import main

    assert main(["--seeds", "20:23", "--steps", "100"]) == 0
    assert "3 of 3 seeds passed" in capsys.readouterr().out


def _first_failure(seeds) -> SimulationFailed:
    for seed in seeds:
        try:
            simulate(SimConfig(seed=seed))
        except SimulationFailed as failure:
            return failure
    pytest.fail(f"the simulation missed the injected bug in seeds {seeds}")


def test_it_finds_a_commit_point_one_past_a_pending_offset(monkeypatch):
    shipped = InFlightTracker.commit_points
    monkeypatch.setattr(InFlightTracker, "commit_points",
                        lambda self: {tp: point + 1 for tp, point in shipped(self).items()})
    assert _first_failure(range(5)).invariant == "no loss"


def test_it_finds_an_init_that_leaves_out_the_tuples_edge(monkeypatch):
    def emit_without_edge(self, topic, value, *, key=None, headers=None, partition=None):
        # the bug: the tuple is anchored, but its edge is not XORed into the root's INIT value, so
        # the INIT alone brings the root's value to zero
        self._spout._produce_output(topic, value, key, headers, partition, {self._root: 12345})

    monkeypatch.setattr(SpoutCollector, "emit", emit_without_edge)
    assert _first_failure(range(5)).invariant == "no premature completion"


def test_a_quiet_run_completes_every_record_on_its_first_attempt():
    result = simulate(SimConfig(seed=3, faults=False, bolt_failure=0.0))
    assert (result.completed, result.dead_lettered, result.crashes) == (24, 0, 0)


def test_a_quiet_run_shows_an_ack_counted_twice(monkeypatch):
    from reliable_kafka.bolt.runner import BoltCollector

    shipped = BoltCollector.ack

    def ack_twice(self, tuple_):  # the bug: the second ACK cancels the first (XOR)
        shipped(self, tuple_)
        shipped(self, tuple_)

    monkeypatch.setattr(BoltCollector, "ack", ack_twice)
    result = simulate(SimConfig(seed=3, faults=False, bolt_failure=0.0))
    assert result.completed == 0 and result.dead_lettered == 24  # every tree timed out, every retry too
