"""How the broker tail's connections are secured: Kafka's client properties
``security.protocol``, ``ssl.*``, ``sasl.mechanism`` and ``sasl.jaas.config``, as Spark's
Kafka source hands them (with the ``kafka.`` prefix taken off) to its consumers.

The meanings are those of Kafka's clients (CommonClientConfigs, SslConfigs,
SaslConfigs): ``security.protocol`` PLAINTEXT (the default), SSL, SASL_PLAINTEXT or
SASL_SSL; the ``ssl.*`` keys of a broker's listener, read by the same code
(`config.ssl_config`, `config.ssl_factory`), with the host name checked unless
``ssl.endpoint.identification.algorithm`` is empty; ``sasl.mechanism`` PLAIN,
SCRAM-SHA-256 or SCRAM-SHA-512 with the ``username`` and ``password`` of the one login
module of ``sasl.jaas.config`` (Kafka's SaslClientCallbackHandler takes them from
whatever module logged in: PlainLoginModule, ScramLoginModule). GSSAPI and OAUTHBEARER
are refused by name, with what the broker tail speaks.

A value: picklable, so that Spark ships it to executors inside the read's slices; the
SSLContext is built where the connections are made, once per process.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.config.config_def import ConfigError
from tiercel.config.config_values import parse_value
from tiercel.config.jaas_config import JaasConfigError, parse_single_login_module
from tiercel.config.ssl_config import SslConfig, ssl_config
from tiercel.config.ssl_configs import SSL_CONFIGS
from tiercel.config.ssl_factory import client_context

__all__ = [
    "CLIENT_SECURITY_KEYS",
    "PLAINTEXT",
    "ClientSecurity",
    "ClientSecurityError",
    "client_security",
]

_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SSL_DEFS: Final = {d.name: d for d in SSL_CONFIGS}
# Server-side keys: a client has no use for them, so a client property setting one is
# a mistake worth naming rather than a setting to ignore.
_SERVER_ONLY: Final = frozenset({"ssl.client.auth", "ssl.principal.mapping.rules"})
_SASL_KEYS: Final = frozenset({"sasl.mechanism", "sasl.jaas.config"})
# Every key `client_security` reads.
CLIENT_SECURITY_KEYS: Final = frozenset(
    {"security.protocol", *_SASL_KEYS, *(_SSL_DEFS.keys() - _SERVER_ONLY)}
)
_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ClientSecurityError(ValueError):
    """The security properties are inconsistent or name what the broker tail lacks."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """``protocol`` with its TLS settings (SSL, SASL_SSL) and SASL login (SASL_*).
    Invariant: ``tls`` is set exactly for SSL and SASL_SSL, ``sasl_login`` exactly for
    SASL_PLAINTEXT and SASL_SSL. Immutable; any thread."""

    protocol: str
    tls: SslConfig | None = None
    sasl_mechanism: str | None = None
    sasl_login: tuple[str, str] | None = None

    def __repr__(self) -> str:
        # Never the password (Kafka's Password.toString: [hidden]).
        user = None if self.sasl_login is None else self.sasl_login[0]
        return f"ClientSecurity({self.protocol}, mechanism={self.sasl_mechanism}, user={user})"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to wrap connections in (None: plain TCP); built once per
        process and SslConfig."""
        return None if self.tls is None else client_context(self.tls)


PLAINTEXT: Final = ClientSecurity("PLAINTEXT")


def client_security(properties: Mapping[str, str]) -> ClientSecurity:
    """The ClientSecurity of Kafka client ``properties`` (lower-case keys, without a
    ``kafka.`` prefix); keys that are not security settings are not looked at."""
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise ClientSecurityError(
            f"security.protocol {protocol!r}: expected one of {', '.join(_PROTOCOLS)}"
        )
    ssl_keys = {k: v for k, v in properties.items() if k.startswith("ssl.")}
    sasl_keys = {k: v for k, v in properties.items() if k in _SASL_KEYS}
    tls = protocol in ("SSL", "SASL_SSL")
    sasl = protocol.startswith("SASL_")
    if ssl_keys and not tls:
        raise ClientSecurityError(
            f"{sorted(ssl_keys)[0]} is set but security.protocol is {protocol}: set "
            "security.protocol to SSL or SASL_SSL, or leave out the ssl.* settings"
        )
    if sasl_keys and not sasl:
        raise ClientSecurityError(
            f"{sorted(sasl_keys)[0]} is set but security.protocol is {protocol}: set "
            "security.protocol to SASL_PLAINTEXT or SASL_SSL"
        )
    return ClientSecurity(
        protocol,
        _ssl(ssl_keys) if tls else None,
        *(_sasl(sasl_keys) if sasl else (None, None)),
    )


def _ssl(given: Mapping[str, str]) -> SslConfig:
    overrides: dict[str, object] = {}
    for key, value in given.items():
        defn = _SSL_DEFS.get(key)
        if defn is None or key in _SERVER_ONLY:
            raise ClientSecurityError(f"{key}: not an ssl setting of a Kafka client")
        try:
            overrides[key] = parse_value(defn, value, key)
        except ConfigError as e:
            raise ClientSecurityError(str(e)) from None
    defaults = {name: defn.default for name, defn in _SSL_DEFS.items()}
    try:
        return ssl_config("client", defaults, overrides)
    except ConfigError as e:
        raise ClientSecurityError(str(e)) from None


def _sasl(given: Mapping[str, str]) -> tuple[str, tuple[str, str]]:
    # Kafka's client default is GSSAPI (SaslConfigs.DEFAULT_SASL_MECHANISM).
    mechanism = given.get("sasl.mechanism", "GSSAPI").strip()
    if mechanism not in _MECHANISMS:
        raise ClientSecurityError(
            f"sasl.mechanism {mechanism}: the broker tail logs in with "
            f"{', '.join(_MECHANISMS)} only"
        )
    jaas = given.get("sasl.jaas.config")
    if jaas is None:
        # Kafka would look for a KafkaClient entry in a JAAS file; there is none here.
        raise ClientSecurityError(
            "sasl.jaas.config is required with SASL: <login module> required "
            'username="..." password="..."; (PlainLoginModule for PLAIN, ScramLoginModule '
            "for SCRAM, in org.apache.kafka.common.security)"
        )
    try:
        options = parse_single_login_module(jaas).options
    except JaasConfigError as e:
        raise ClientSecurityError(f"sasl.jaas.config: {e}") from None
    username, password = options.get("username"), options.get("password")
    if username is None or password is None:
        raise ClientSecurityError("sasl.jaas.config: the login module needs username and password")
    return mechanism, (username, password)
