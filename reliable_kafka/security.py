"""One security configuration for every Kafka client, Spark's included (docs/design.md section 10).

Python clients take librdkafka's settings (``security.protocol``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password``, ``ssl.*``) in ``kafka_config``. Spark's Kafka source runs the
Java client, which names some settings differently and takes SASL credentials as a JAAS line:
:func:`spark_kafka_options` translates the first into the second (``kafka.``-prefixed reader
options), so a job given ``kafka_config`` needs no second copy of its credentials.
:func:`read_command_config` goes the other way for the CLI's ``--command-config FILE``: a Kafka
tools' properties file (Java names) becomes a librdkafka ``kafka_config``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from reliable_kafka.errors import ConfigError

__all__ = ["spark_kafka_options", "SECURITY_KEYS", "read_command_config", "command_config_to_librdkafka"]

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# librdkafka settings whose Java name and meaning are the same.
_SAME_NAME = (
    "ssl.key.password",
    "ssl.cipher.suites",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "sasl.kerberos.service.name",
)

SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.endpoint.identification.algorithm",
        *_SAME_NAME,
    }
)
"""The librdkafka settings :func:`spark_kafka_options` translates; others are not Spark's concern."""


def _jaas_quote(value: str) -> str:
    # Kafka parses sasl.jaas.config with java.io.StreamTokenizer: backslash escapes inside quotes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(kafka_config: dict[str, Any] | None) -> dict[str, str]:
    """Spark Kafka reader options (``kafka.``-prefixed) for the security settings in a librdkafka
    ``kafka_config``; ``{}`` when it has none. Raises :class:`ConfigError` for a combination the
    Java client cannot be given (e.g. a SASL mechanism without a username)."""
    config = {key: str(value) for key, value in (kafka_config or {}).items() if key in SECURITY_KEYS}
    options: dict[str, str] = {}
    protocol = config.get("security.protocol")
    if protocol:
        options["security.protocol"] = protocol.upper()
    mechanism = (config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "").upper()
    if mechanism:
        if " " in mechanism.strip() or "," in mechanism:
            raise ConfigError(f"security: sasl.mechanisms {mechanism!r}: give exactly one mechanism")
        options["sasl.mechanism"] = mechanism
    username, password = config.get("sasl.username"), config.get("sasl.password")
    if username is not None or password is not None:
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise ConfigError(
                f"security: sasl.username/sasl.password need sasl.mechanism PLAIN, SCRAM-SHA-256 or "
                f"SCRAM-SHA-512 (got {mechanism or 'none'}); for other mechanisms pass "
                f"kafka.sasl.jaas.config in spark_kafka_options yourself"
            )
        if username is None or password is None:
            raise ConfigError("security: sasl.username and sasl.password go together; one is missing")
        options["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(username)} password={_jaas_quote(password)};"
        )
    if "ssl.ca.location" in config:
        # Java reads a PEM CA file as a truststore of type PEM (Kafka 2.7+).
        options["ssl.truststore.type"] = "PEM"
        options["ssl.truststore.location"] = config["ssl.ca.location"]
    if "ssl.certificate.location" in config or "ssl.key.location" in config:
        if not ("ssl.certificate.location" in config and "ssl.key.location" in config):
            raise ConfigError("security: ssl.certificate.location and ssl.key.location go together")
        # Java's PEM keystore takes the certificate chain and key as content, not as paths.
        options["ssl.keystore.type"] = "PEM"
        options["ssl.keystore.certificate.chain"] = _read(config["ssl.certificate.location"])
        options["ssl.keystore.key"] = _read(config["ssl.key.location"])
    if "ssl.endpoint.identification.algorithm" in config:
        algorithm = config["ssl.endpoint.identification.algorithm"].lower()
        options["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    if "ssl.keystore.location" in config:
        options["ssl.keystore.type"] = "PKCS12"  # librdkafka's keystore is PKCS#12; Java defaults to JKS
    for key in _SAME_NAME:
        if key in config:
            options[key] = config[key]
    return {f"kafka.{key}": value for key, value in options.items()}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"security: cannot read {path}: {error}") from None


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


def _jaas_credentials(jaas: str) -> tuple[str, str]:
    module = next((m for m in set(_LOGIN_MODULES.values()) if m in jaas), None)
    if module is None:
        raise ConfigError(
            f"security: sasl.jaas.config {jaas.split()[0] if jaas.split() else ''!r}: only "
            f"PlainLoginModule and ScramLoginModule translate to librdkafka"
        )
    values = {}
    for key, raw in _JAAS_OPTION.findall(jaas.split(module, 1)[1]):
        values[key] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
    if "username" not in values or "password" not in values:
        raise ConfigError('security: sasl.jaas.config needs username="..." and password="..."')
    return values["username"], values["password"]


def command_config_to_librdkafka(properties: dict[str, str]) -> dict[str, str]:
    """Kafka Java client properties (as Kafka's tools take them) as librdkafka settings.

    Security settings are translated (JAAS PLAIN/SCRAM to ``sasl.username``/``sasl.password``, a
    PEM truststore to ``ssl.ca.location``, a PKCS12 keystore as is); other keys pass unchanged
    (librdkafka rejects the ones it does not know, by name). JKS stores, which librdkafka cannot
    read, are a :class:`ConfigError`.
    """
    config = dict(properties)
    out: dict[str, str] = {}
    jaas = config.pop("sasl.jaas.config", None)
    if jaas is not None:
        out["sasl.username"], out["sasl.password"] = _jaas_credentials(jaas)
    truststore_type = config.pop("ssl.truststore.type", "JKS").upper()
    if "ssl.truststore.location" in config:
        if truststore_type != "PEM":
            raise ConfigError(
                f"security: ssl.truststore.type {truststore_type} cannot be read by librdkafka; "
                f"use a PEM file (ssl.truststore.type=PEM)"
            )
        out["ssl.ca.location"] = config.pop("ssl.truststore.location")
    config.pop("ssl.truststore.password", None)  # a PEM truststore has none
    keystore_type = config.pop("ssl.keystore.type", "JKS").upper()
    if "ssl.keystore.location" in config and keystore_type != "PKCS12":
        raise ConfigError(
            f"security: ssl.keystore.type {keystore_type} cannot be read by librdkafka; "
            f"use PKCS12 (ssl.keystore.type=PKCS12)"
        )
    algorithm = config.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm or "none"
    out.update(config)
    return out


def read_command_config(path: str | Path) -> dict[str, str]:
    """``--command-config FILE``: a Java properties file, as librdkafka settings."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"--command-config: cannot read {path}: {error}") from None
    properties: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"--command-config {path}:{number}: expected key=value, got {line!r}")
        properties[key.strip()] = value.strip()
    return command_config_to_librdkafka(properties)
