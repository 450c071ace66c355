"""Telling a real broker's release (reliable_kafka.broker.compat), on whichever Kafka version the
session runs (RK_KAFKA_VERSION; .ci/kafka-versions.sh runs this on every tested release)."""

from __future__ import annotations

import logging
import os

from reliable_kafka.broker.compat import broker_release, unsupported_reason, warn_if_unsupported
from reliable_kafka.jars import kafka_version, parse_kafka_version
from reliable_kafka.testing.session import choose_kafka_source, docker_available


def test_the_session_broker_is_told_inside_the_tested_range(kafka_bootstrap, caplog):
    release = broker_release(kafka_bootstrap)
    assert release.error_code == 0
    assert release.software is not None and release.cluster is not None, release
    source = choose_kafka_source(os.environ, docker_available)
    if source == "external":
        return  # RK_BOOTSTRAP: a broker of the user's, whatever it runs
    if source == "embedded":
        # the embedded broker runs the release asked for, and a fresh cluster finalizes its newest level
        assert release.software == parse_kafka_version(kafka_version())[:2], release
        assert release.cluster == release.software, release
    assert unsupported_reason(release) is None
    with caplog.at_level(logging.WARNING, logger="reliable_kafka.broker.compat"):
        warn_if_unsupported({"bootstrap.servers": kafka_bootstrap}, background=False)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_sasl_listener_answers_before_authentication(secure_kafka):
    # ApiVersions comes before the SASL handshake: no credentials are sent, none are needed
    release = broker_release(secure_kafka.bootstrap, {"security.protocol": "SASL_PLAINTEXT"})
    assert release.software == parse_kafka_version(kafka_version())[:2], release
