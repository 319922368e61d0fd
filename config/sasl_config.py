"""SaslConfig: the SASL settings of one SASL_PLAINTEXT or SASL_SSL listener.

As Kafka's `SaslChannelBuilder` and `JaasContext.loadServerContext`, a listener's
mechanisms are `listener.name.<l>.sasl.enabled.mechanisms` over `sasl.enabled.mechanisms`,
and each mechanism's login module comes from
`listener.name.<l>.<mechanism, lower case>.sasl.jaas.config` (Kafka's
`ListenerName.saslMechanismConfigPrefix`). Tiercel has no static JAAS file, so that key is
required. PLAIN's users are the login module's `user_<name>="<password>"` options, as
Kafka's `PlainServerCallbackHandler` reads them; its `username` and `password` options
are what this broker logs in with when it connects to that listener of another broker
(Kafka's PlainLoginModule on the inter-broker listener).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigError, ConfigType
from tiercel.config.jaas_config import JaasConfigError, parse_jaas_config
from tiercel.config.sasl_configs import SASL_CONFIGS

__all__ = ["LISTENER_SASL_KEYS", "PLAIN", "SaslConfig", "sasl_config"]

PLAIN: Final = "PLAIN"
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
_JAAS_USER_PREFIX: Final = "user_"
# Kafka's SaslConfigs / ScramMechanism / OAuthBearerLoginModule mechanism names.
_NOT_YET: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_MECHANISMS: Final = ("GSSAPI", PLAIN, *_NOT_YET)
_JAAS_CONFIG: Final = ConfigDef(
    "sasl.jaas.config",
    ConfigType.PASSWORD,
    None,
    None,
    "The login module of one mechanism on one listener, in JAAS syntax.",
)

# The keys a listener may set under listener.name.<l>. besides the ssl.* ones.
LISTENER_SASL_KEYS: Final[Mapping[str, ConfigDef]] = {
    "sasl.enabled.mechanisms": next(d for d in SASL_CONFIGS if d.name == "sasl.enabled.mechanisms"),
    **{f"{m.lower()}.sasl.jaas.config": _JAAS_CONFIG for m in _MECHANISMS},
}


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """The mechanisms a SASL listener accepts and, for PLAIN, its users' passwords and
    the broker's own login (None when the JAAS config names no username or password).
    Invariant: every mechanism is one Tiercel serves. Immutable; any thread."""

    listener_name: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    plain_login: tuple[str, str] | None

    def __repr__(self) -> str:
        # Never print the passwords (Kafka's Password.toString: [hidden]).
        return (
            f"SaslConfig(listener={self.listener_name}, "
            f"mechanisms={','.join(self.enabled_mechanisms)}, users={len(self.plain_users)})"
        )


def sasl_config(
    listener_name: str, values: Mapping[str, object], overrides: Mapping[str, object]
) -> SaslConfig:
    """The listener's SaslConfig; ConfigError says what to set."""
    prefix = f"listener.name.{listener_name.lower()}."
    mechanisms = overrides.get("sasl.enabled.mechanisms", values["sasl.enabled.mechanisms"])
    assert isinstance(mechanisms, tuple)
    if not mechanisms:
        # SaslServerAuthenticator's constructor.
        raise ConfigError(
            f"SASL listener {listener_name}: No SASL mechanisms are enabled",
            "sasl.enabled.mechanisms",
        )
    for mechanism in mechanisms:
        _check_mechanism(listener_name, prefix, str(mechanism))
    jaas_key = f"{PLAIN.lower()}.sasl.jaas.config"
    jaas = overrides.get(jaas_key)
    if jaas is None:
        # JaasContext.defaultContext's message, then what to set instead of a JAAS file.
        raise ConfigError(
            f"Could not find a '{listener_name.lower()}.KafkaServer' or 'KafkaServer' entry in "
            "the JAAS configuration. System property 'java.security.auth.login.config' is "
            f"not set; Tiercel reads PLAIN's users from {prefix}{jaas_key}",
            f"{prefix}{jaas_key}",
        )
    assert isinstance(jaas, str)
    options = _plain_options(jaas, prefix + jaas_key)
    username, password = options.get("username"), options.get("password")
    return SaslConfig(
        listener_name,
        tuple(str(m) for m in mechanisms),
        MappingProxyType(
            {
                name[len(_JAAS_USER_PREFIX) :]: secret
                for name, secret in options.items()
                if name.startswith(_JAAS_USER_PREFIX)
            }
        ),
        None if username is None or password is None else (username, password),
    )


def _check_mechanism(listener_name: str, prefix: str, mechanism: str) -> None:
    if mechanism == PLAIN:
        return
    if mechanism == "GSSAPI":
        problem = (
            "GSSAPI (Kerberos) is not supported by Tiercel; set sasl.enabled.mechanisms "
            f"(or {prefix}sasl.enabled.mechanisms) to PLAIN"
        )
    elif mechanism in _NOT_YET:
        problem = f"{mechanism} is not supported yet (Tiercel serves PLAIN)"
    else:
        problem = f"unknown SASL mechanism {mechanism} (Tiercel serves PLAIN)"
    raise ConfigError(f"SASL listener {listener_name}: {problem}", "sasl.enabled.mechanisms")


def _plain_options(jaas: str, key: str) -> Mapping[str, str]:
    """The options of JaasContext's single login module, which must be PLAIN's."""
    try:
        entries = parse_jaas_config(jaas)
    except JaasConfigError as e:
        raise ConfigError(f"Invalid value for configuration {key}: {e}", key) from None
    if len(entries) != 1:
        raise ConfigError(
            f"Invalid value for configuration {key}: JAAS config property contains "
            f"{len(entries)} login modules, should be 1 module",
            key,
        )
    entry = entries[0]
    if entry.login_module_name != PLAIN_LOGIN_MODULE:
        raise ConfigError(
            f"Invalid value for configuration {key}: the login module of PLAIN is "
            f"{PLAIN_LOGIN_MODULE}, not {entry.login_module_name}",
            key,
        )
    return entry.options
