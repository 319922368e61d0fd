"""SslConfig: the TLS settings of one listener, and the listener-prefixed keys they come from.

As Kafka's `ChannelBuilders.channelBuilderConfigs` (`AbstractConfig.valuesWithPrefixOverride`
with `ListenerName.configPrefix`), a key `listener.name.<listener name, lower case>.ssl.X`
overrides `ssl.X` for that listener only. The store checks are Kafka's
`DefaultSslEngineFactory.createKeystore` / `createTruststore`, with its messages, made at
startup from the values alone; reading the files is `ssl_factory`'s work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.config.config_def import ConfigError
from tiercel.config.config_values import parse_value
from tiercel.config.sasl_config import LISTENER_SASL_KEYS
from tiercel.config.ssl_configs import SSL_CONFIGS

__all__ = ["LISTENER_PREFIX", "SslConfig", "split_listener_props", "ssl_config"]

LISTENER_PREFIX: Final = "listener.name."
_LISTENER_KEYS: Final = {**{d.name: d for d in SSL_CONFIGS}, **LISTENER_SASL_KEYS}


@dataclass(frozen=True, slots=True)
class SslConfig:
    """The resolved ssl.* values of one listener (None: unset). Invariant: the store
    settings passed `check_stores`. Immutable; any thread."""

    listener_name: str
    protocol: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    keystore_type: str
    keystore_location: str | None
    keystore_password: str | None
    key_password: str | None
    keystore_key: str | None
    keystore_certificate_chain: str | None
    truststore_type: str
    truststore_location: str | None
    truststore_password: str | None
    truststore_certificates: str | None
    client_auth: str
    endpoint_identification_algorithm: str
    principal_mapping_rules: str

    def __repr__(self) -> str:
        # Never print the passwords and inline keys (Kafka's Password.toString: [hidden]).
        return f"SslConfig(listener={self.listener_name}, keystore={self.keystore_location})"

    @property
    def has_keystore(self) -> bool:
        return self.keystore_location is not None or self.keystore_key is not None

    @property
    def has_truststore(self) -> bool:
        return self.truststore_location is not None or self.truststore_certificates is not None


def split_listener_props(
    raw: Mapping[str, object],
) -> tuple[dict[str, object], dict[str, dict[str, object]]]:
    """(the keys without the listener prefix, {LISTENER NAME: {key: typed value}}).

    A prefixed key must name an ssl.* key, sasl.enabled.mechanisms or a mechanism's
    `<mechanism>.sasl.jaas.config`; any other is refused rather than ignored. The listener
    part must be lower case, as Kafka looks the keys up only in lower case (an upper-case
    one would be ignored there)."""
    plain: dict[str, object] = {}
    by_listener: dict[str, dict[str, object]] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key.startswith(LISTENER_PREFIX):
            plain[key] = value
            continue
        listener, _, name = key[len(LISTENER_PREFIX) :].partition(".")
        if listener != listener.lower() or not listener:
            raise ConfigError(
                f"Configuration {key}: the listener name after {LISTENER_PREFIX} must be "
                f"lower case, as Kafka reads it ({LISTENER_PREFIX}{listener.lower()}.{name})",
                key,
            )
        defn = _LISTENER_KEYS.get(name)
        if defn is None:
            raise ConfigError(
                f"Configuration {key}: unknown key; Tiercel takes only ssl.* keys, "
                "sasl.enabled.mechanisms and <mechanism>.sasl.jaas.config per listener",
                key,
            )
        if value is not None:
            by_listener.setdefault(listener.upper(), {})[name] = parse_value(defn, value, key)
    return plain, by_listener


def ssl_config(
    listener_name: str, values: Mapping[str, object], overrides: Mapping[str, object]
) -> SslConfig:
    """The listener's SslConfig: its prefixed keys over the broker-wide ones."""

    def get(name: str) -> object:
        return overrides.get(name, values[name])

    def text(name: str) -> str | None:
        value = get(name)
        assert value is None or isinstance(value, str), (name, value)
        return value

    def words(name: str) -> tuple[str, ...]:
        value = get(name)
        assert isinstance(value, tuple), (name, value)
        return value

    def required(name: str) -> str:
        value = text(name)
        assert value is not None, name
        return value

    config = SslConfig(
        listener_name=listener_name,
        protocol=required("ssl.protocol"),
        enabled_protocols=words("ssl.enabled.protocols"),
        cipher_suites=words("ssl.cipher.suites"),
        keystore_type=required("ssl.keystore.type"),
        keystore_location=text("ssl.keystore.location"),
        keystore_password=text("ssl.keystore.password"),
        key_password=text("ssl.key.password"),
        keystore_key=text("ssl.keystore.key"),
        keystore_certificate_chain=text("ssl.keystore.certificate.chain"),
        truststore_type=required("ssl.truststore.type"),
        truststore_location=text("ssl.truststore.location"),
        truststore_password=text("ssl.truststore.password"),
        truststore_certificates=text("ssl.truststore.certificates"),
        client_auth=required("ssl.client.auth"),
        endpoint_identification_algorithm=required("ssl.endpoint.identification.algorithm"),
        principal_mapping_rules=required("ssl.principal.mapping.rules"),
    )
    _check_keystore(config)
    _check_truststore(config)
    return config


def _problem(config: SslConfig, message: str) -> ConfigError:
    return ConfigError(f"Invalid SSL configuration of listener {config.listener_name}: {message}")


def _refuse_jks(config: SslConfig, key: str, value: str) -> None:
    if value == "JKS":
        raise _problem(
            config,
            f"{key} is JKS, which Python cannot read; convert the store to PKCS12 "
            "(keytool -importkeystore -deststoretype PKCS12) or PEM and set "
            f"{key} to PKCS12 or PEM",
        )


def _check_keystore(config: SslConfig) -> None:
    """DefaultSslEngineFactory.createKeystore's checks, and a server's need for a key."""
    kind, path, password = config.keystore_type, config.keystore_location, config.keystore_password
    if config.keystore_key is not None:
        if kind != "PEM":
            raise _problem(
                config,
                f"SSL private key can be specified only for PEM, but key store type is {kind}.",
            )
        if config.keystore_certificate_chain is None:
            raise _problem(
                config, "SSL private key is specified, but certificate chain is not specified."
            )
        if path is not None:
            raise _problem(
                config, "Both SSL key store location and separate private key are specified."
            )
        if password is not None:
            raise _problem(
                config,
                "SSL key store password cannot be specified with PEM format, only key "
                "password may be specified.",
            )
    elif config.keystore_certificate_chain is not None:
        raise _problem(
            config, "SSL certificate chain is specified, but private key is not specified"
        )
    elif path is None:
        if password is not None:
            raise _problem(
                config, "SSL key store is not specified, but key store password is specified."
            )
    else:
        _refuse_jks(config, "ssl.keystore.type", kind)
        if kind == "PEM" and password is not None:
            raise _problem(
                config,
                "SSL key store password cannot be specified with PEM format, only key "
                "password may be specified",
            )
        if kind != "PEM" and password is None:
            raise _problem(
                config, "SSL key store is specified, but key store password is not specified."
            )


def _check_truststore(config: SslConfig) -> None:
    """DefaultSslEngineFactory.createTruststore's checks."""
    kind, path, password = (
        config.truststore_type,
        config.truststore_location,
        config.truststore_password,
    )
    if config.truststore_certificates is not None:
        if kind != "PEM":
            raise _problem(
                config,
                "SSL trust store certs can be specified only for PEM, but trust store type "
                f"is {kind}.",
            )
        if path is not None:
            raise _problem(
                config,
                "Both SSL trust store location and separate trust certificates are specified.",
            )
        if password is not None:
            raise _problem(config, "SSL trust store password cannot be specified for PEM format.")
    elif path is None:
        if password is not None:
            raise _problem(
                config, "SSL trust store is not specified, but trust store password is specified."
            )
    else:
        _refuse_jks(config, "ssl.truststore.type", kind)
        if kind == "PEM" and password is not None:
            raise _problem(config, "SSL trust store password cannot be specified for PEM format.")
