"""The broker tail's security settings: Kafka client properties parsed as Kafka's clients
read them, refusals that name the key, and a value Spark can ship to executors."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest

from support.certs import PASSWORD, make_pki
from tiercel.tiered.reader.client_security import (
    PLAINTEXT,
    ClientSecurityError,
    client_security,
)

_PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="alice" password="alice-secret";'
)


def test_no_settings_is_plaintext() -> None:
    assert client_security({}) == PLAINTEXT
    assert client_security({"security.protocol": "plaintext"}) == PLAINTEXT
    assert PLAINTEXT.ssl_context() is None


def test_ssl_with_a_pem_trust_store_checks_the_host_name(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    security = client_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
        }
    )
    context = security.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert security.ssl_context() is context  # built once per process
    unchecked = client_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "ssl.endpoint.identification.algorithm": "",
        }
    ).ssl_context()
    assert unchecked is not None and not unchecked.check_hostname


def test_sasl_ssl_plain_login_is_a_picklable_value_that_hides_the_password(
    tmp_path: Path,
) -> None:
    pki = make_pki(tmp_path)
    security = client_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": _PLAIN_JAAS,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(pki.truststore_p12),
            "ssl.truststore.password": PASSWORD,
        }
    )
    assert security.sasl_login == ("alice", "alice-secret")
    assert security.tls is not None and security.tls.truststore_type == "PKCS12"
    assert pickle.loads(pickle.dumps(security)) == security
    assert "alice-secret" not in repr(security) and PASSWORD not in repr(security)


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol 'TLS': expected one of"),
        ({"ssl.truststore.type": "PEM"}, "ssl.truststore.type is set but security.protocol"),
        ({"sasl.mechanism": "PLAIN"}, "sasl.mechanism is set but security.protocol is PLAIN"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism GSSAPI: .* PLAIN only"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"},
            "sasl.mechanism SCRAM-SHA-512: the broker tail logs in with PLAIN only",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
            "sasl.jaas.config is required with SASL",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "PlainLoginModule required username=",
            },
            "sasl.jaas.config: ",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'a.B required username="u";',
            },
            "needs username and password",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": _PLAIN_JAAS + " " + _PLAIN_JAAS,
            },
            "contains 2 login modules, should be 1 module",
        ),
        (
            {"security.protocol": "SSL", "ssl.client.auth": "required"},
            "ssl.client.auth: not an ssl setting of a Kafka client",
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.password": "x",
            },
            "SSL trust store is not specified, but trust store password is specified",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/etc/ts.jks"},
            "JKS, which Python cannot read",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_key(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ClientSecurityError, match=message):
        client_security(properties)
