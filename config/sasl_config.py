"""SaslConfig: the SASL settings of one SASL_PLAINTEXT or SASL_SSL listener.

As Kafka's `SaslChannelBuilder` and `JaasContext.loadServerContext`, a listener's
mechanisms are `listener.name.<l>.sasl.enabled.mechanisms` over `sasl.enabled.mechanisms`,
and each mechanism's login module comes from
`listener.name.<l>.<mechanism, lower case>.sasl.jaas.config` (Kafka's
`ListenerName.saslMechanismConfigPrefix`). Tiercel has no static JAAS file, so that key is
required for every enabled mechanism: PLAIN's is Kafka's PlainLoginModule, SCRAM-SHA-256's
and SCRAM-SHA-512's Kafka's ScramLoginModule. PLAIN's users are the login module's
`user_<name>="<password>"` options, as Kafka's `PlainServerCallbackHandler` reads them;
SCRAM's users are in the KRaft metadata log, not here (Kafka's ScramServerCallbackHandler
reads the CredentialCache). OAUTHBEARER's login module is Kafka's OAuthBearerLoginModule:
nothing is stored, each token is checked by the unsecured validator its
`unsecuredValidator*` options configure (`OAuthBearerValidatorOptions`). A login module's
`username` and `password` options (OAUTHBEARER: its `unsecuredLogin*` options) are what
this broker logs in with when it connects to that listener of another broker with that
mechanism (Kafka's login module on the inter-broker listener).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigError, ConfigType
from tiercel.config.jaas_config import JaasConfigError, parse_single_login_module
from tiercel.config.oauthbearer_config import (
    OAUTHBEARER,
    OAUTHBEARER_LOGIN_MODULE,
    OAuthBearerValidatorOptions,
    login_principal,
)
from tiercel.config.sasl_configs import SASL_CONFIGS

__all__ = [
    "LISTENER_SASL_KEYS",
    "PLAIN",
    "SCRAM_MECHANISMS",
    "SaslConfig",
    "SaslLogin",
    "sasl_config",
]

PLAIN: Final = "PLAIN"
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
# Kafka's ScramMechanism names.
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES: Final = {
    PLAIN: PLAIN_LOGIN_MODULE,
    **dict.fromkeys(SCRAM_MECHANISMS, SCRAM_LOGIN_MODULE),
    OAUTHBEARER: OAUTHBEARER_LOGIN_MODULE,
}
_SERVED: Final = ", ".join(_LOGIN_MODULES)
_JAAS_USER_PREFIX: Final = "user_"
_MECHANISMS: Final = ("GSSAPI", *_LOGIN_MODULES)
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
class SaslLogin:
    """What this broker logs in to another broker's SASL listener with: a user name and
    password, or for OAUTHBEARER the login module's options, from which each login makes
    a fresh token (`username` is then the token's principal, `password` empty)."""

    mechanism: str
    username: str
    password: str
    jaas_options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __repr__(self) -> str:
        return f"SaslLogin({self.mechanism}, {self.username}, password=[hidden])"


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """The mechanisms a SASL listener accepts, PLAIN's users and passwords, and the
    broker's own login per mechanism (absent when its JAAS config names no username or
    password), and OAUTHBEARER's validator options (Kafka's defaults when it is not
    enabled). Invariant: every mechanism is one Tiercel serves. Immutable; any thread."""

    listener_name: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    logins: Mapping[str, SaslLogin]
    oauthbearer: OAuthBearerValidatorOptions
    # connections.max.reauth.ms (KIP-368): 0, no session end but a credential's.
    connections_max_reauth_ms: int

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
    max_reauth_ms = values["connections.max.reauth.ms"]
    assert isinstance(max_reauth_ms, int)
    plain_users: Mapping[str, str] = {}
    logins: dict[str, SaslLogin] = {}
    oauthbearer = OAuthBearerValidatorOptions()
    for mechanism in (str(m) for m in mechanisms):
        _check_mechanism(listener_name, prefix, mechanism)
        options = _login_options(listener_name, prefix, mechanism, overrides)
        username, password = options.get("username"), options.get("password")
        if mechanism == OAUTHBEARER:
            oauthbearer = _oauthbearer(prefix, options)
            principal = login_principal(options)
            if principal is not None:
                logins[mechanism] = SaslLogin(mechanism, principal, "", MappingProxyType(options))
        elif username is not None and password is not None:
            logins[mechanism] = SaslLogin(mechanism, username, password)
        if mechanism == PLAIN:
            plain_users = {
                name[len(_JAAS_USER_PREFIX) :]: secret
                for name, secret in options.items()
                if name.startswith(_JAAS_USER_PREFIX)
            }
    return SaslConfig(
        listener_name,
        tuple(str(m) for m in mechanisms),
        MappingProxyType(plain_users),
        MappingProxyType(logins),
        oauthbearer,
        max_reauth_ms,
    )


def _oauthbearer(prefix: str, options: Mapping[str, str]) -> OAuthBearerValidatorOptions:
    key = f"{prefix}oauthbearer.sasl.jaas.config"
    try:
        return OAuthBearerValidatorOptions.from_jaas_options(options)
    except ValueError as e:
        raise ConfigError(f"Invalid value for configuration {key}: {e}", key) from None


def _check_mechanism(listener_name: str, prefix: str, mechanism: str) -> None:
    if mechanism in _LOGIN_MODULES:
        return
    if mechanism == "GSSAPI":
        problem = (
            "GSSAPI (Kerberos) is not supported by Tiercel; set sasl.enabled.mechanisms "
            f"(or {prefix}sasl.enabled.mechanisms) to some of {_SERVED}"
        )
    else:
        problem = f"unknown SASL mechanism {mechanism} (Tiercel serves {_SERVED})"
    raise ConfigError(f"SASL listener {listener_name}: {problem}", "sasl.enabled.mechanisms")


def _login_options(
    listener_name: str, prefix: str, mechanism: str, overrides: Mapping[str, object]
) -> Mapping[str, str]:
    """The options of JaasContext's single login module for the mechanism, which must
    be the mechanism's."""
    key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
    jaas = overrides.get(f"{mechanism.lower()}.sasl.jaas.config")
    if jaas is None:
        # JaasContext.defaultContext's message, then what to set instead of a JAAS file.
        raise ConfigError(
            f"Could not find a '{listener_name.lower()}.KafkaServer' or 'KafkaServer' entry in "
            "the JAAS configuration. System property 'java.security.auth.login.config' is "
            f"not set; Tiercel reads {mechanism}'s login module from {key}",
            key,
        )
    assert isinstance(jaas, str)
    try:
        entry = parse_single_login_module(jaas)
    except JaasConfigError as e:
        raise ConfigError(f"Invalid value for configuration {key}: {e}", key) from None
    expected = _LOGIN_MODULES[mechanism]
    if entry.login_module_name != expected:
        raise ConfigError(
            f"Invalid value for configuration {key}: the login module of {mechanism} is "
            f"{expected}, not {entry.login_module_name}",
            key,
        )
    return entry.options
