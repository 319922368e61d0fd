"""SASL listener settings: mechanisms and JAAS users per listener (Kafka's
SaslChannelBuilder / JaasContext.loadServerContext), and the refusals with Kafka's
messages or a sentence saying what to set."""

from __future__ import annotations

import re

import pytest

from tiercel.config.broker_config import BrokerConfig, ConfigError
from tiercel.config.oauthbearer_config import OAuthBearerValidatorOptions
from tiercel.config.sasl_config import SaslLogin

_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)
_BASE: dict[str, object] = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS,
}


def test_plain_users_come_from_the_listeners_jaas_config() -> None:
    config = BrokerConfig(_BASE)
    sasl = config.sasl_config("SASL_PLAINTEXT")
    assert sasl is not None
    assert sasl.enabled_mechanisms == ("PLAIN",)
    assert dict(sasl.plain_users) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert "secret" not in repr(sasl)
    assert config.sasl_config("PLAINTEXT") is None
    assert set(config.sasl_configs) == {"SASL_PLAINTEXT"}


def test_listener_mechanisms_override_the_broker_wide_ones() -> None:
    config = BrokerConfig(
        {
            **_BASE,
            "sasl.enabled.mechanisms": "GSSAPI",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        }
    )
    sasl = config.sasl_config("SASL_PLAINTEXT")
    assert sasl is not None and sasl.enabled_mechanisms == ("PLAIN",)


def test_sasl_ssl_listener_needs_a_key_store_and_gets_its_tls_settings() -> None:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _JAAS,
    }
    with pytest.raises(ConfigError, match="SASL_SSL listener SASL_SSL has no key store"):
        BrokerConfig(settings)
    config = BrokerConfig(
        {**settings, "ssl.keystore.type": "PEM", "ssl.keystore.location": "/keys/broker.pem"}
    )
    assert config.ssl_config("SASL_SSL") is not None
    assert config.sasl_config("SASL_SSL") is not None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"sasl.enabled.mechanisms": "GSSAPI"},
            "SASL listener SASL_PLAINTEXT: GSSAPI (Kerberos) is not supported by Tiercel; "
            "set sasl.enabled.mechanisms (or "
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms) to some of PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        ),
        (
            {"sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks"},
            "validating signed OAUTHBEARER tokens with a JWKS endpoint is not supported yet",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    'required unsecuredValidatorAllowableClockSkewMs="-5";'
                ),
            },
            "Invalid value for configuration "
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config: Allowable clock skew "
            "millis must not be negative: -5",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": _JAAS,
            },
            "the login module of OAUTHBEARER is "
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule, not "
            "org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
        (
            {
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    'required unsecuredLoginExtension_a="b";'
                ),
            },
            "The JAAS config of inter-broker listener SASL_PLAINTEXT has no "
            'unsecuredLoginStringClaim_sub="..." for the broker\'s own OAUTHBEARER logins',
        ),
        ({"sasl.enabled.mechanisms": "DIGEST-MD5"}, "unknown SASL mechanism DIGEST-MD5"),
        ({"sasl.enabled.mechanisms": ""}, "No SASL mechanisms are enabled"),
        (
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": None},
            "Could not find a 'sasl_plaintext.KafkaServer' or 'KafkaServer' entry in the JAAS "
            "configuration. System property 'java.security.auth.login.config' is not set; "
            "Tiercel reads PLAIN's login module from "
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        (
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS[:-1]},
            "Invalid value for configuration listener.name.sasl_plaintext.plain.sasl.jaas.config"
            ": JAAS config entry not terminated by semi-colon",
        ),
        (
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{_JAAS} {_JAAS}"},
            "JAAS config property contains 2 login modules, should be 1 module",
        ),
        (
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": "x.Module required;"},
            "the login module of PLAIN is "
            "org.apache.kafka.common.security.plain.PlainLoginModule, not x.Module",
        ),
        (
            {"listener.name.sasl_plaintext.scram-sha-256.sasl.login.class": "x"},
            "unknown key",
        ),
        (
            {"inter.broker.listener.name": "SASL_PLAINTEXT"},
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms "
            "when SASL is used for inter-broker communication (listener SASL_PLAINTEXT: GSSAPI "
            "is not; set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)",
        ),
        (
            {
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    f'{_JAAS.split(" username=")[0]} user_admin="admin-secret";'
                ),
            },
            "The JAAS config of inter-broker listener SASL_PLAINTEXT has no "
            'username="..." password="..." for the broker\'s own PLAIN logins',
        ),
        (
            {"connections.max.reauth.ms": -1},
            "connections.max.reauth.ms",
        ),
        (
            {"connection.failed.authentication.delay.ms": 5000, "connections.max.idle.ms": 5000},
            "connection.failed.authentication.delay.ms=5000 should always be less than "
            "connections.max.idle.ms=5000 to prevent failed authentication responses from "
            "timing out",
        ),
    ],
)
def test_refused_settings(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig({**_BASE, **settings})


@pytest.mark.parametrize(
    "inter_broker",
    [
        {"inter.broker.listener.name": "SASL_PLAINTEXT"},
        {"security.inter.broker.protocol": "SASL_PLAINTEXT"},
    ],
)
def test_brokers_log_in_with_the_jaas_username_on_a_sasl_inter_broker_listener(
    inter_broker: dict[str, object],
) -> None:
    config = BrokerConfig(
        {**_BASE, **inter_broker, "sasl.mechanism.inter.broker.protocol": "PLAIN"}
    )
    assert config.inter_broker_listener_name == "SASL_PLAINTEXT"
    assert config.inter_broker_sasl_login() == SaslLogin("PLAIN", "admin", "admin-secret")
    assert BrokerConfig(_BASE).inter_broker_sasl_login() is None


def test_controller_listeners_may_not_be_sasl() -> None:
    with pytest.raises(ConfigError, match="Controller listener CONTROLLER is SASL_PLAINTEXT"):
        BrokerConfig(
            {
                **_BASE,
                "process.roles": "broker,controller",
                "node.id": 1,
                "controller.quorum.voters": "1@127.0.0.1:9095",
                "controller.listener.names": "CONTROLLER",
                "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093,"
                "CONTROLLER://127.0.0.1:9095",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
                "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "listener.name.controller.plain.sasl.jaas.config": _JAAS,
            }
        )


_SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="admin" password="admin-secret";'
)
_KRAFT: dict[str, object] = {
    "process.roles": "broker,controller",
    "node.id": 1,
    "controller.quorum.voters": "1@127.0.0.1:9095",
    "controller.listener.names": "CONTROLLER",
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9095",
    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _SCRAM_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": _SCRAM_JAAS,
}


def test_scram_on_a_kraft_node_with_the_scram_login_module() -> None:
    config = BrokerConfig(_KRAFT)
    sasl = config.sasl_config("SASL_PLAINTEXT")
    assert sasl is not None
    assert sasl.enabled_mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256")
    assert dict(sasl.plain_users) == {}
    assert config.inter_broker_sasl_login() == SaslLogin("SCRAM-SHA-512", "admin", "admin-secret")
    assert "admin-secret" not in repr(config.inter_broker_sasl_login())


def test_scram_needs_process_roles() -> None:
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "SASL listener SASL_PLAINTEXT: SCRAM-SHA-256 needs the KRaft metadata log, where "
            "SCRAM credentials are stored; run this node as a KRaft node "
            "(process.roles=broker,controller after tiercel storage format"
        ),
    ):
        BrokerConfig(
            {
                **_BASE,
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _SCRAM_JAAS,
            }
        )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _JAAS},
            "the login module of SCRAM-SHA-256 is "
            "org.apache.kafka.common.security.scram.ScramLoginModule, not "
            "org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
        (
            {"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": None},
            "Tiercel reads SCRAM-SHA-512's login module from "
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config",
        ),
        (
            {
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            },
            "The JAAS config of inter-broker listener SASL_PLAINTEXT has no "
            'username="..." password="..." for the broker\'s own SCRAM-SHA-512 logins',
        ),
    ],
)
def test_scram_settings_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig({**_KRAFT, **settings})


_OAUTH_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="broker" unsecuredLoginLifetimeSeconds="60" '
    'unsecuredValidatorRequiredScope="kafka tiercel" unsecuredValidatorScopeClaimName="roles" '
    'unsecuredValidatorPrincipalClaimName="uid" unsecuredValidatorAllowableClockSkewMs="250";'
)


def test_oauthbearer_on_any_node_with_the_validator_and_login_options() -> None:
    config = BrokerConfig(
        {
            **_BASE,
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
            "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": _OAUTH_JAAS,
        }
    )
    sasl = config.sasl_config("SASL_PLAINTEXT")
    assert sasl is not None and sasl.enabled_mechanisms == ("PLAIN", "OAUTHBEARER")
    assert sasl.oauthbearer == OAuthBearerValidatorOptions(
        "uid", "roles", ("kafka", "tiercel"), 250
    )
    login = config.inter_broker_sasl_login()
    assert login is not None
    assert (login.mechanism, login.username, login.password) == ("OAUTHBEARER", "broker", "")
    assert login.jaas_options["unsecuredLoginLifetimeSeconds"] == "60"


def test_oauthbearer_validator_defaults_are_kafkas() -> None:
    config = BrokerConfig(
        {
            **_BASE,
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            ),
        }
    )
    sasl = config.sasl_config("SASL_PLAINTEXT")
    assert sasl is not None
    assert sasl.oauthbearer == OAuthBearerValidatorOptions("sub", "scope", (), 0)
    assert dict(sasl.logins) == {}
    assert sasl.connections_max_reauth_ms == 0


def test_connections_max_reauth_ms_applies_to_every_sasl_listener() -> None:
    sasl = BrokerConfig({**_BASE, "connections.max.reauth.ms": 60000}).sasl_config("SASL_PLAINTEXT")
    assert sasl is not None and sasl.connections_max_reauth_ms == 60000
