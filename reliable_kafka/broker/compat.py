"""Which Kafka release a broker runs, told from its ApiVersions answer, and the warning for brokers
outside the tested range.

confluent-kafka exposes no broker version: ``describe_cluster`` gives ids, hosts and the controller,
and librdkafka keeps the ApiVersions answer to itself. So this module asks once more, on its own
connection: an ApiVersions request (version 3, KIP-511), whose answer carries the broker's features
(KIP-584). ``metadata.version`` names a release: its highest supported level is the broker
software's (level 21 is 3.9-IV0, 25 is 4.0-IV3, 33 is 4.4-IV2), the finalized level the cluster's.
ApiVersions is answered before authentication, so PLAINTEXT and SASL_PLAINTEXT listeners need no
credentials; SSL and SASL_SSL listeners get a TLS connection made from the client's ``ssl.*``
settings.

A broker with no ``metadata.version`` (a ZooKeeper-mode cluster, or older than 3.3) cannot be
placed: the warning says so rather than guessing.

:func:`warn_if_unsupported` is what components call (through their client factory): once per
bootstrap list per process, in a daemon thread, never failing and never delaying the caller.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import ssl
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reliable_kafka.errors import DecodeError
from reliable_kafka.jars import OLDEST_SUPPORTED_KAFKA, TESTED_KAFKA_VERSIONS, parse_kafka_version

__all__ = [
    "BrokerRelease",
    "UNSUPPORTED_VERSION",
    "broker_release",
    "metadata_version_release",
    "supported_range",
    "unsupported_reason",
    "warn_if_unsupported",
]

log = logging.getLogger(__name__)

_API_VERSIONS = 18
_REQUEST_VERSION = 3  # the first with features in its answer's tagged fields
UNSUPPORTED_VERSION = 35  # the error code of a broker too old for ApiVersions v3 (before 2.4)
_SUPPORTED_FEATURES_TAG = 0
_FINALIZED_FEATURES_TAG = 2

# metadata.version feature levels by the release that introduced them (Kafka's MetadataVersion
# enum: 1 is 3.0-IV1 ... 21 is 3.9-IV0, 22-25 are 4.0, 33 is 4.4-IV2). A release's levels are
# those from its first entry up to the next release's.
_FIRST_LEVEL_OF_RELEASE = (
    (1, (3, 0)),
    (2, (3, 1)),
    (3, (3, 2)),
    (4, (3, 3)),
    (8, (3, 4)),
    (9, (3, 5)),
    (12, (3, 6)),
    (15, (3, 7)),
    (20, (3, 8)),
    (21, (3, 9)),
    (22, (4, 0)),
    (26, (4, 1)),
    (28, (4, 2)),
    (30, (4, 3)),
    (31, (4, 4)),
    (34, (4, 5)),
)


def metadata_version_release(level: int) -> tuple[int, int] | None:
    """The (major, minor) release a ``metadata.version`` feature level belongs to (None below 1).

    Levels above the last one known here map to the last release known (4.5): newer, in any case.
    """
    found = None
    for first, release in _FIRST_LEVEL_OF_RELEASE:
        if level >= first:
            found = release
    return found


def supported_range() -> str:
    """The tested range as users read it: "3.9 to 4.4"."""
    oldest = ".".join(map(str, OLDEST_SUPPORTED_KAFKA))
    return f"{oldest} to {_dotted(_newest_tested())}"


@dataclass(frozen=True)
class BrokerRelease:
    """What one broker's ApiVersions answer tells about its release."""

    address: str
    error_code: int = 0
    supported: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Feature name -> (min, max) levels the broker software supports."""
    finalized: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Feature name -> (min, max) levels finalized for the cluster."""

    @property
    def software(self) -> tuple[int, int] | None:
        """The broker software's (major, minor), from its highest ``metadata.version`` level."""
        levels = self.supported.get("metadata.version")
        return metadata_version_release(levels[1]) if levels else None

    @property
    def cluster(self) -> tuple[int, int] | None:
        """The release the cluster's finalized ``metadata.version`` belongs to."""
        levels = self.finalized.get("metadata.version")
        return metadata_version_release(levels[1]) if levels else None


def unsupported_reason(release: BrokerRelease) -> str | None:
    """Why ``release`` is outside the tested range (a sentence), or None when it is inside."""
    oldest = ".".join(map(str, OLDEST_SUPPORTED_KAFKA))
    where = f"the Kafka broker at {release.address}"
    tested = f"reliable-kafka is tested with Kafka {supported_range()}"
    if release.error_code == UNSUPPORTED_VERSION:
        return f"{where} is older than 2.4 (it refuses ApiVersions v3); {tested}"
    if release.software is None:
        return (
            f"{where} reports no metadata.version, so its release cannot be told (a ZooKeeper-mode "
            f"cluster, or older than 3.3); {tested}, in KRaft mode"
        )
    if release.software < OLDEST_SUPPORTED_KAFKA:
        return f"{where} runs Kafka {_dotted(release.software)}, older than {oldest}; {tested}"
    if release.cluster is not None and release.cluster < OLDEST_SUPPORTED_KAFKA:
        return (
            f"{where} runs Kafka {_dotted(release.software)} but the cluster's metadata.version is "
            f"still at {_dotted(release.cluster)} (finish the upgrade: kafka-features.sh upgrade "
            f"--release-version); {tested}"
        )
    return None


def _newest_tested() -> tuple[int, int]:
    major, minor, _ = parse_kafka_version(TESTED_KAFKA_VERSIONS[-1])
    return major, minor


def _dotted(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}"


# -- the ApiVersions exchange -----------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def api_versions_request(correlation_id: int, client_id: str = "reliable-kafka") -> bytes:
    """An ApiVersions v3 request, size-prefixed (request header v2, then the body)."""
    from reliable_kafka.version import __version__

    client = client_id.encode()
    header = struct.pack(">hhih", _API_VERSIONS, _REQUEST_VERSION, correlation_id, len(client)) + client + b"\x00"
    # KIP-511: the broker refuses a software version outside [a-zA-Z0-9.-] (a "+local" suffix)
    software_version = re.sub(r"[^a-zA-Z0-9.-]", "-", __version__).strip(".-") or "0"
    body = _compact_string("reliable-kafka") + _compact_string(software_version) + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._stream = io.BytesIO(data)

    def take(self, size: int) -> bytes:
        data = self._stream.read(size)
        if len(data) != size:
            raise DecodeError("ApiVersions answer", "it ends early", None)
        return data

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str:
        return self.take(self.uvarint() - 1).decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def parse_api_versions_response(address: str, data: bytes) -> BrokerRelease:
    """Read an ApiVersions answer (after its size prefix; the header is v0: the correlation id)."""
    reader = _Reader(data)
    reader.int32()  # correlation id
    error_code = reader.int16()
    if error_code != 0:
        return BrokerRelease(address, error_code=error_code)
    for _ in range(reader.uvarint() - 1):  # the API keys: key, min, max, tagged fields
        reader.take(6)
        reader.skip_tags()
    reader.int32()  # throttle time
    supported: dict[str, tuple[int, int]] = {}
    finalized: dict[str, tuple[int, int]] = {}
    for _ in range(reader.uvarint()):
        tag, size = reader.uvarint(), reader.uvarint()
        value = _Reader(reader.take(size))
        if tag in (_SUPPORTED_FEATURES_TAG, _FINALIZED_FEATURES_TAG):
            for _ in range(value.uvarint() - 1):
                name = value.compact_string()
                first, second = value.int16(), value.int16()
                value.skip_tags()
                if tag == _SUPPORTED_FEATURES_TAG:
                    supported[name] = (first, second)  # min_version, max_version
                else:
                    finalized[name] = (second, first)  # max_version_level comes first
    return BrokerRelease(address, supported=supported, finalized=finalized)


def _tls_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    certificate = config.get("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(
            certificate, config.get("ssl.key.location") or None, config.get("ssl.key.password") or None
        )
    return context


def broker_release(bootstrap: str, config: Mapping[str, Any] | None = None, *, timeout: float = 10.0) -> BrokerRelease:
    """Ask the first reachable broker of ``bootstrap`` ("host:port,...") for its ApiVersions.

    ``config``: the client's librdkafka settings; only ``security.protocol`` and the ``ssl.*``
    file settings are read. Raises ``OSError`` (or :class:`DecodeError` for an answer that does not
    parse) when no broker answers.
    """
    config = config or {}
    protocol = str(config.get("security.protocol", "plaintext")).lower()
    failure: Exception | None = None
    for address in (part.strip() for part in bootstrap.split(",") if part.strip()):
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "localhost"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as raw:
                raw.settimeout(timeout)
                if protocol in ("ssl", "sasl_ssl"):
                    with _tls_context(config).wrap_socket(raw, server_hostname=host) as tls:
                        return _exchange(address, tls)
                return _exchange(address, raw)
        except (OSError, ValueError) as exc:
            failure = exc
    raise failure or OSError(f"no broker address in {bootstrap!r}")


def _exchange(address: str, sock: socket.socket) -> BrokerRelease:
    sock.sendall(api_versions_request(correlation_id=1))
    size = struct.unpack(">i", _receive(sock, 4))[0]
    return parse_api_versions_response(address, _receive(sock, size))


def _receive(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 65536))
        if not chunk:
            raise DecodeError("ApiVersions answer", "the broker closed the connection before it ended", None)
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


# -- the warning at component start ---------------------------------------------------------

_checked: set[str] = set()
_checked_lock = threading.Lock()


def warn_if_unsupported(config: Mapping[str, Any], *, background: bool = True) -> None:
    """Log a warning (``reliable_kafka.broker.compat``) when the brokers of ``config``'s
    ``bootstrap.servers`` run a release outside the tested range.

    Once per bootstrap list per process; in a daemon thread unless ``background=False``. A broker
    that does not answer is left to the client itself to report (logged here at DEBUG only).
    """
    bootstrap = str(config.get("bootstrap.servers") or "").strip()
    if not bootstrap:
        return
    with _checked_lock:
        if bootstrap in _checked:
            return
        _checked.add(bootstrap)
    settings = {key: value for key, value in config.items() if key == "security.protocol" or key.startswith("ssl.")}
    if background:
        threading.Thread(target=_check, args=(bootstrap, settings), name="rk-broker-version", daemon=True).start()
    else:
        _check(bootstrap, settings)


def _check(bootstrap: str, settings: Mapping[str, Any]) -> None:
    try:
        release = broker_release(bootstrap, settings)
    except Exception as exc:  # noqa: BLE001 - a check only: the clients report an unreachable broker
        log.debug("could not ask %s for its Kafka release: %s", bootstrap, exc)
        return
    reason = unsupported_reason(release)
    if reason is not None:
        log.warning("%s. Components may fail in ways not tested (docs/testing.md: Kafka versions).", reason)
    elif release.software is not None and release.software > _newest_tested():
        log.info(
            "the Kafka broker at %s runs Kafka %s, newer than the newest tested (%s)",
            release.address,
            _dotted(release.software),
            _dotted(_newest_tested()),
        )
    else:
        log.debug("the Kafka broker at %s runs Kafka %s", release.address, release.software)
