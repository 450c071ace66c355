"""The Kafka version choice (RK_KAFKA_VERSION), the per-version broker settings, and telling a
broker's release from its ApiVersions answer (reliable_kafka.broker.compat)."""

from __future__ import annotations

import logging
import socket
import struct
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import jars
from reliable_kafka.broker import compat
from reliable_kafka.broker.node import KraftNode, node_properties
from reliable_kafka.errors import ConfigError, DecodeError


def test_default_version_is_the_newest_tested():
    assert jars.KAFKA_VERSION == jars.TESTED_KAFKA_VERSIONS[-1]
    assert jars.kafka_version({}) == jars.KAFKA_VERSION
    assert jars.kafka_version({"RK_KAFKA_VERSION": " "}) == jars.KAFKA_VERSION


@pytest.mark.parametrize("version", ["3.9.1", "4.1.1", "4.4.0", "4.5.0"])
def test_rk_kafka_version_picks_the_broker(version):
    assert jars.kafka_version({"RK_KAFKA_VERSION": version}) == version
    assert f"org.apache.kafka:kafka_2.13:{version}" in jars.kafka_artifacts(version)


@pytest.mark.parametrize("version", ["3.8.1", "2.8.2", "4", "4.1", "4.1.x", "latest"])
def test_rk_kafka_version_refuses_what_the_embedded_broker_cannot_run(version):
    with pytest.raises(ConfigError, match="RK_KAFKA_VERSION"):
        jars.kafka_version({"RK_KAFKA_VERSION": version})


@pytest.mark.parametrize("version", ["3.8.1", "4.x"])
def test_embedded_broker_refuses_what_it_cannot_run_before_any_jvm(version):
    from reliable_kafka.broker import EmbeddedKafka

    with pytest.raises(ConfigError, match=r"version"):
        EmbeddedKafka(version=version)


def test_share_coordinator_settings_only_from_kafka_4(tmp_path):
    node = KraftNode(0, tmp_path, 9092, 9093)
    old = node_properties(node, "0@127.0.0.1:9093", 1, {}, version="3.9.1")
    new = node_properties(node, "0@127.0.0.1:9093", 1, {}, version="4.4.0")
    assert not any(key.startswith("share.coordinator.") for key in old)
    assert new["share.coordinator.state.topic.replication.factor"] == "1"
    # the rest is common: a static quorum, classic groups
    assert old["controller.quorum.voters"] == new["controller.quorum.voters"] == "0@127.0.0.1:9093"
    assert {k: v for k, v in new.items() if not k.startswith("share.")} == old


@pytest.mark.parametrize(
    ("level", "release"),
    [
        (1, (3, 0)),
        (7, (3, 3)),
        (20, (3, 8)),
        (21, (3, 9)),
        (22, (4, 0)),
        (25, (4, 0)),
        (27, (4, 1)),
        (33, (4, 4)),
        (40, (4, 5)),
    ],
)
def test_metadata_version_levels_name_releases(level, release):
    assert compat.metadata_version_release(level) == release


def test_supported_range_reads_as_releases():
    assert compat.supported_range() == "3.9 to 4.4"


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _features(entries: list[tuple[str, int, int]]) -> bytes:
    out = _uvarint(len(entries) + 1)
    for name, first, second in entries:
        out += _uvarint(len(name) + 1) + name.encode() + struct.pack(">hh", first, second) + b"\x00"
    return out


def api_versions_answer(
    supported: list[tuple[str, int, int]] | None, finalized: list[tuple[str, int, int]] | None, error: int = 0
) -> bytes:
    """An ApiVersions v3 answer as a broker writes it (after the size): header v0, two API keys,
    then the features in tagged fields 0 (supported: min, max) and 2 (finalized: max, min)."""
    body = struct.pack(">ih", 7, error)
    if error:
        return body
    body += _uvarint(3) + struct.pack(">hhh", 0, 0, 11) + b"\x00" + struct.pack(">hhh", 18, 0, 4) + b"\x00"
    body += struct.pack(">i", 0)
    tags = []
    if supported is not None:
        tags.append((0, _features(supported)))
    tags.append((1, struct.pack(">q", 5)))  # the finalized features' epoch, skipped
    if finalized is not None:
        tags.append((2, _features(finalized)))
    body += _uvarint(len(tags))
    for tag, data in tags:
        body += _uvarint(tag) + _uvarint(len(data)) + data
    return body


@pytest.mark.parametrize(
    ("software", "cluster", "outside"),
    [
        ((1, 21), (21, 21), None),  # 3.9
        ((7, 33), (33, 33), None),  # 4.4
        ((1, 20), (20, 20), "runs Kafka 3.8, older than 3.9"),
        ((7, 33), (19, 19), "metadata.version is still at 3.7"),
    ],
)
def test_releases_inside_and_outside_the_tested_range(software, cluster, outside):
    answer = api_versions_answer([("metadata.version", *software)], [("metadata.version", cluster[1], cluster[0])])
    release = compat.parse_api_versions_response("b:9092", answer)
    assert release.supported["metadata.version"] == software
    assert release.finalized["metadata.version"] == cluster
    reason = compat.unsupported_reason(release)
    if outside is None:
        assert reason is None
    else:
        assert outside in reason and "b:9092" in reason and "3.9 to 4.4" in reason


def test_a_broker_without_metadata_version_cannot_be_placed():
    release = compat.parse_api_versions_response("zk:9092", api_versions_answer([], None))
    assert "cannot be told" in compat.unsupported_reason(release)


def test_a_broker_refusing_api_versions_v3_is_older_than_2_4():
    release = compat.parse_api_versions_response("old:9092", api_versions_answer(None, None, error=35))
    assert "older than 2.4" in compat.unsupported_reason(release)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz._", min_size=1, max_size=200), st.integers(0, 2**15 - 1))
def test_features_with_long_names_and_any_level_parse(name, level):
    # names past 127 bytes take two-byte lengths; levels are signed 16-bit
    answer = api_versions_answer([(name, 0, level), ("metadata.version", 1, 21)], [(name, level, 0)])
    release = compat.parse_api_versions_response("b:1", answer)
    assert release.supported[name] == (0, level)
    assert release.finalized[name] == (0, level)
    assert release.software == (3, 9)


def test_the_request_is_api_versions_v3_with_a_valid_software_version():
    request = compat.api_versions_request(correlation_id=9)
    size, key, version, correlation = struct.unpack(">ihhi", request[:12])
    assert (size, key, version, correlation) == (len(request) - 4, 18, 3, 9)
    assert b"reliable-kafka" in request and b"+" not in request


class FakeBroker:
    """A listener on 127.0.0.1 that answers every ApiVersions request with ``answer``."""

    def __init__(self, answer: bytes) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, args=(answer,), daemon=True)
        self.thread.start()

    def _serve(self, answer: bytes) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:  # closed
                return
            with connection:
                size = struct.unpack(">i", connection.recv(4))[0]
                self.requests.append(connection.recv(size))
                connection.sendall(struct.pack(">i", len(answer)) + answer)

    def close(self) -> None:
        self.server.close()


def test_components_warn_once_about_a_broker_older_than_tested(caplog):
    broker = FakeBroker(api_versions_answer([("metadata.version", 1, 19)], [("metadata.version", 19, 1)]))
    try:
        with caplog.at_level(logging.WARNING, logger="reliable_kafka.broker.compat"):
            compat.warn_if_unsupported({"bootstrap.servers": broker.address}, background=False)
            compat.warn_if_unsupported({"bootstrap.servers": broker.address}, background=False)  # once only
    finally:
        broker.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"the Kafka broker at {broker.address} runs Kafka 3.7, older than 3.9" in warnings[0]
    assert len(broker.requests) == 1


def test_components_stay_quiet_about_a_tested_broker(caplog):
    broker = FakeBroker(api_versions_answer([("metadata.version", 7, 33)], [("metadata.version", 33, 7)]))
    try:
        with caplog.at_level(logging.WARNING, logger="reliable_kafka.broker.compat"):
            compat.warn_if_unsupported({"bootstrap.servers": broker.address}, background=False)
    finally:
        broker.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_unreachable_broker_is_left_to_the_clients(caplog):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with caplog.at_level(logging.WARNING, logger="reliable_kafka.broker.compat"):
        compat.warn_if_unsupported({"bootstrap.servers": f"127.0.0.1:{port}"}, background=False)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_cut_answer_is_a_decode_error():
    answer = api_versions_answer([("metadata.version", 1, 21)], [("metadata.version", 21, 1)])
    with pytest.raises(DecodeError, match="ApiVersions answer"):
        compat.parse_api_versions_response("b:1", answer[:-3])
