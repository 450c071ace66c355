"""Short runs of the fault-injection harness (the full run: `./rk chaos`, see README)."""

import pytest

from reliable_kafka.chaos.harness import ChaosConfig, run

pytestmark = pytest.mark.slow


def test_at_least_once_survives_process_kills_and_a_broker_restart():
    report = run(
        ChaosConfig(
            records=3000,
            produce_seconds=20,
            kill_interval=(1.0, 2.0),
            broker_restarts=1,
            message_timeout_ms=5000,
            settle_timeout=180,
            seed=3,
        )
    )
    assert sum(report.kills.values()) >= 8 and report.kills["broker"] == 1
    assert report.lost == 0
    assert report.samples > 10 and not report.early_commits
    assert report.caught_up, report.render()


@pytest.mark.cluster
def test_at_least_once_survives_killing_one_broker_of_three():
    report = run(
        ChaosConfig(
            records=2000,
            produce_seconds=20,
            kill_interval=(1.5, 3.0),
            broker_restarts=1,
            brokers=3,
            message_timeout_ms=5000,
            settle_timeout=180,
            seed=4,
        )
    )
    assert report.kills["broker"] == 1
    assert report.lost == 0 and not report.early_commits and report.caught_up, report.render()


def test_transactional_mode_gives_every_effect_exactly_once_through_process_kills():
    report = run(
        ChaosConfig(
            records=3000,
            produce_seconds=20,
            kill_interval=(1.0, 2.0),
            broker_restarts=0,
            message_timeout_ms=120_000,
            settle_timeout=180,
            transactional=True,
            seed=5,
        )
    )
    assert sum(report.kills.values()) >= 8 and report.kills["spout"] >= 1
    assert report.exactly_once, report.render()
    assert report.duplicates == 0 and report.lost == 0 and not report.early_commits


@pytest.mark.spark
def test_a_pyspark_stage_survives_driver_kills_with_the_rest():
    # a Spark stage on a shared 2-core machine is slow: a 30 s timeout keeps replays from piling up
    report = run(
        ChaosConfig(
            records=1000,
            produce_seconds=30,
            kill_interval=(2.0, 4.0),
            broker_restarts=0,
            message_timeout_ms=30_000,
            settle_timeout=420,
            spark=True,
            seed=7,
        )
    )
    assert report.kills["spark"] >= 1
    assert report.lost == 0 and not report.early_commits and report.caught_up, report.render()
