"""The ssl.* keys, their per-listener overrides and Kafka's checks of them."""

from __future__ import annotations

import re

import pytest

from tiercel.config.broker_config import BrokerConfig, ConfigError

_SSL = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"}
_PEM = {"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem"}


def test_defaults_are_kafkas() -> None:
    ssl = BrokerConfig({**_SSL, **_PEM}).ssl_config("SSL")
    assert ssl is not None
    assert ssl.protocol == "TLSv1.3"
    assert ssl.enabled_protocols == ("TLSv1.2", "TLSv1.3")
    assert ssl.cipher_suites == ()
    assert ssl.truststore_type == "JKS"
    assert ssl.client_auth == "none"
    assert ssl.endpoint_identification_algorithm == "https"
    assert ssl.principal_mapping_rules == "DEFAULT"
    assert BrokerConfig({}).get("ssl.keystore.type") == "JKS"


def test_plaintext_listeners_have_no_ssl_config() -> None:
    assert BrokerConfig({**_SSL, **_PEM}).ssl_config("PLAINTEXT") is None


def test_listener_prefixed_keys_override_the_broker_wide_ones() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL",
            **_PEM,
            "ssl.client.auth": "requested",
            "listener.name.internal.ssl.client.auth": "required",
            "listener.name.internal.ssl.keystore.location": "/internal.pem",
        }
    )
    external, internal = config.ssl_config("SSL"), config.ssl_config("INTERNAL")
    assert external is not None and internal is not None
    assert (external.client_auth, external.keystore_location) == ("requested", "/k.pem")
    assert (internal.client_auth, internal.keystore_location) == ("required", "/internal.pem")


def test_passwords_never_show_in_reprs() -> None:
    config = BrokerConfig(
        {
            **_SSL,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": "/k.p12",
            "ssl.keystore.password": "s3cret",
        }
    )
    assert "s3cret" not in repr(config.ssl_config("SSL"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"ssl.keystore.location": "/k.jks"},
            "ssl.keystore.type is JKS, which Python cannot read; convert the store to PKCS12",
        ),
        (
            {**_PEM, "ssl.truststore.location": "/t.jks"},
            "ssl.truststore.type is JKS, which Python cannot read",
        ),
        (
            {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12"},
            "SSL key store is specified, but key store password is not specified.",
        ),
        (
            {**_PEM, "ssl.keystore.password": "x"},
            "SSL key store password cannot be specified with PEM format, only key password",
        ),
        (
            {"ssl.keystore.type": "PKCS12", "ssl.keystore.key": "KEY"},
            "SSL private key can be specified only for PEM, but key store type is PKCS12.",
        ),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY"},
            "SSL private key is specified, but certificate chain is not specified.",
        ),
        (
            {**_PEM, "ssl.keystore.key": "KEY", "ssl.keystore.certificate.chain": "C"},
            "Both SSL key store location and separate private key are specified.",
        ),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "C"},
            "SSL certificate chain is specified, but private key is not specified",
        ),
        (
            {"ssl.keystore.password": "x"},
            "SSL key store is not specified, but key store password is specified.",
        ),
        (
            {**_PEM, "ssl.truststore.type": "PKCS12", "ssl.truststore.certificates": "C"},
            "SSL trust store certs can be specified only for PEM, but trust store type is PKCS12.",
        ),
        (
            {
                **_PEM,
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/t.pem",
                "ssl.truststore.password": "x",
            },
            "SSL trust store password cannot be specified for PEM format.",
        ),
        (
            {**_PEM, "ssl.truststore.password": "x"},
            "SSL trust store is not specified, but trust store password is specified.",
        ),
        ({}, "SSL listener SSL has no key store: set ssl.keystore.location"),
    ],
)
def test_store_settings_are_checked_with_kafkas_messages(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig({**_SSL, **settings})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl.client.auth": "always"}, "must be one of required, requested, none"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
        ({"ssl.keystore.type": "JCEKS"}, "must be one of JKS, PKCS12, PEM"),
        ({"listener.name.SSL.ssl.client.auth": "required"}, "must be lower case"),
        ({"listener.name.ssl.sasl.login.class": "x"}, "unknown key"),
        ({"listener.name.ssl.socket.send.buffer.bytes": "1"}, "unknown key"),
        ({"listener.name.other.ssl.client.auth": "required"}, "no listener OTHER"),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
            "Only one of inter.broker.listener.name and security.inter.broker.protocol "
            "should be set.",
        ),
        (
            {"security.inter.broker.protocol": "SASL_SSL"},
            "inter.broker.listener.name SASL_SSL must be one of the advertised listeners",
        ),
    ],
)
def test_bad_settings(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig({**_SSL, **_PEM, **settings})


def test_security_inter_broker_protocol_names_the_inter_broker_listener() -> None:
    config = BrokerConfig({**_SSL, **_PEM, "security.inter.broker.protocol": "SSL"})
    assert config.inter_broker_listener_name == "SSL"
    assert BrokerConfig({**_SSL, **_PEM}).inter_broker_listener_name == "PLAINTEXT"


def test_a_kraft_node_knows_the_ssl_settings_of_its_controller_listener() -> None:
    # A broker-only node does not serve the controller listener but connects to it.
    config = BrokerConfig(
        {
            "process.roles": "broker",
            "node.id": 2,
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/ca.pem",
        }
    )
    controller = config.ssl_config("CONTROLLER")
    assert controller is not None and controller.truststore_location == "/ca.pem"
