"""A secured embedded broker: SASL/SCRAM-SHA-256 for clients, the StandardAuthorizer (docs/design.md section 10).

Clients connect over SASL_PLAINTEXT (loopback only) with SCRAM-SHA-256 users created when the
storage is formatted (``StorageTool format --add-scram``); the controller listener uses SASL/PLAIN
with the admin's credentials (SCRAM credentials live in the metadata log, which a controller
cannot read before it runs). ``admin`` is the only super user; no ACL means no access.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from reliable_kafka.errors import ConfigError

__all__ = ["BrokerSecurity", "ADMIN", "MECHANISM", "SECURE_ROLES"]

ADMIN = "admin"
SECURE_ROLES = ("spout", "bolt", "acker", "spark", "outsider")
"""Users of ``kafka up --secure`` and the ``secure_kafka`` test fixture besides ``admin``."""
MECHANISM = "SCRAM-SHA-256"
_CLIENT_LISTENER = "SASL_PLAINTEXT"


def _jaas(module: str, user: str, password: str, extra: str = "") -> str:
    return f'org.apache.kafka.common.security.{module} required username="{user}" password="{password}"{extra};'


@dataclass(frozen=True)
class BrokerSecurity:
    """SCRAM users of a secured embedded broker: ``users`` maps name to password.

    :meth:`generate` makes random passwords for the given names (plus ``admin``).
    :meth:`client_config` gives a user's librdkafka settings (``kafka_config``).
    """

    users: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if ADMIN not in self.users:
            raise ConfigError(f"BrokerSecurity: users must include {ADMIN!r} (the super user)")
        for name, password in self.users.items():
            # Names and passwords go into JAAS lines and StorageTool's [name=..,password=..].
            if not name or not password or any(c in name + password for c in '"\\,=[] '):
                raise ConfigError(
                    f"BrokerSecurity: user {name!r}: names and passwords must be non-empty and "
                    f"free of quotes, backslashes, commas, '=', brackets and spaces"
                )

    @classmethod
    def generate(cls, names: Iterable[str] = ()) -> BrokerSecurity:
        return cls(users={name: secrets.token_hex(12) for name in (ADMIN, *names)})

    def client_config(self, user: str) -> dict[str, str]:
        if user not in self.users:
            raise ConfigError(f"BrokerSecurity: no user {user!r}; known: {sorted(self.users)}")
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.users[user],
        }

    def client_properties(self, user: str) -> str:
        """A Java client properties file for ``user`` (Kafka's tools, ``--command-config``)."""
        config = self.client_config(user)
        return (
            f"security.protocol={config['security.protocol']}\n"
            f"sasl.mechanism={MECHANISM}\n"
            f"sasl.jaas.config={_jaas('scram.ScramLoginModule', user, config['sasl.password'])}\n"
        )

    def broker_properties(self, *, port: int, controller_port: int, host: str) -> dict[str, str]:
        password = self.users[ADMIN]
        return {
            "listeners": f"{_CLIENT_LISTENER}://{host}:{port},CONTROLLER://{host}:{controller_port}",
            "advertised.listeners": f"{_CLIENT_LISTENER}://{host}:{port}",
            "inter.broker.listener.name": _CLIENT_LISTENER,
            "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,{_CLIENT_LISTENER}:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                "plain.PlainLoginModule", ADMIN, password, f' user_{ADMIN}="{password}"'
            ),
            f"listener.name.{_CLIENT_LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": _jaas(
                "scram.ScramLoginModule", ADMIN, password
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_arguments(self) -> list[str]:
        """``StorageTool format`` arguments that create the SCRAM users."""
        args: list[str] = []
        for name, password in sorted(self.users.items()):
            args += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        return args
