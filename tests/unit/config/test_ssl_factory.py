"""SSLContexts from every kind of store, checked by a TLS handshake in memory (two
MemoryBIO pairs, no socket): the server presents the certificate of its key store, the
client verifies it against its trust store, and client authentication works as
ssl.client.auth says."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from support.certs import PASSWORD, Pki, make_pki
from tiercel.config.config_def import ConfigError
from tiercel.config.ssl_config import SslConfig, ssl_config
from tiercel.config.ssl_configs import SSL_CONFIGS
from tiercel.config.ssl_factory import client_context, server_context
from tiercel.server.network.principal_builder import ANONYMOUS, KafkaPrincipal, ssl_principal
from tiercel.server.network.ssl_principal_mapper import SslPrincipalMapper

_DEFAULTS = {d.name: d.default for d in SSL_CONFIGS}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _config(**settings: object) -> SslConfig:
    return ssl_config("SSL", _DEFAULTS, {k.replace("_", "."): v for k, v in settings.items()})


def _handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, hostname: str = "127.0.0.1"
) -> ssl.SSLObject:
    """Run the handshake; the server's SSLObject (raises what either side raises)."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, side, out, peer_in in (("c", c, c_out, s_in), ("s", s, s_out, c_in)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            # TLS 1.3: the server learns of a refused client certificate on first read.
            c.write(b"x")
            s_in.write(c_out.read())
            assert s.read(1) == b"x"
            return s
    raise AssertionError("handshake did not finish")


def _client(pki: Pki, **settings: object) -> ssl.SSLContext:
    return client_context(
        _config(ssl_truststore_type="PEM", ssl_truststore_location=str(pki.ca_pem), **settings)
    )


def test_pem_keystore_file(pki: Pki) -> None:
    server = server_context(
        _config(ssl_keystore_type="PEM", ssl_keystore_location=str(pki.broker.keystore_pem))
    )
    assert ssl_principal(_handshake(server, _client(pki)), SslPrincipalMapper("DEFAULT")) == (
        ANONYMOUS
    )


def test_encrypted_pem_key_with_ssl_key_password(pki: Pki) -> None:
    location = str(pki.broker.encrypted_keystore_pem)
    server = server_context(
        _config(ssl_keystore_type="PEM", ssl_keystore_location=location, ssl_key_password=PASSWORD)
    )
    _handshake(server, _client(pki))
    with pytest.raises(ConfigError, match=r"Failed to load SSL keystore .* of type PEM"):
        server_context(
            _config(ssl_keystore_type="PEM", ssl_keystore_location=location, ssl_key_password="no")
        )


def test_inline_pem_keystore_and_truststore(pki: Pki) -> None:
    server = server_context(
        _config(
            ssl_keystore_type="PEM",
            ssl_keystore_key=pki.broker.key_pem.read_text(),
            ssl_keystore_certificate_chain=pki.broker.chain_pem.read_text(),
        )
    )
    client = client_context(
        _config(ssl_truststore_type="PEM", ssl_truststore_certificates=pki.ca_pem.read_text())
    )
    _handshake(server, client)


def test_pkcs12_keystore_and_truststore(pki: Pki) -> None:
    server = server_context(
        _config(
            ssl_keystore_type="PKCS12",
            ssl_keystore_location=str(pki.broker.pkcs12),
            ssl_keystore_password=PASSWORD,
        )
    )
    client = client_context(
        _config(
            ssl_truststore_type="PKCS12",
            ssl_truststore_location=str(pki.truststore_p12),
            ssl_truststore_password=PASSWORD,
        )
    )
    _handshake(server, client)
    with pytest.raises(ConfigError, match=r"Failed to load SSL keystore .* of type PKCS12"):
        server_context(
            _config(
                ssl_keystore_type="PKCS12",
                ssl_keystore_location=str(pki.broker.pkcs12),
                ssl_keystore_password="wrong",
            )
        )


def test_missing_store_file_is_a_config_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match=f"Failed to load SSL keystore {missing}"):
        server_context(_config(ssl_keystore_type="PEM", ssl_keystore_location=missing))


def _server(pki: Pki, client_auth: str) -> ssl.SSLContext:
    return server_context(
        _config(
            ssl_keystore_type="PEM",
            ssl_keystore_location=str(pki.broker.keystore_pem),
            ssl_truststore_type="PEM",
            ssl_truststore_location=str(pki.ca_pem),
            ssl_client_auth=client_auth,
        )
    )


def _with_cert(pki: Pki, identity_pem: Path) -> ssl.SSLContext:
    return _client(pki, ssl_keystore_type="PEM", ssl_keystore_location=str(identity_pem))


def test_client_auth_required(pki: Pki) -> None:
    server = _server(pki, "required")
    tls = _handshake(server, _with_cert(pki, pki.client.keystore_pem))
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT")
    assert ssl_principal(tls, mapper) == KafkaPrincipal("User", "alice")
    assert str(ssl_principal(tls, SslPrincipalMapper("DEFAULT"))) == (
        "User:CN=alice,OU=ServiceUsers,O=Tiercel,C=US"
    )
    with pytest.raises(ssl.SSLError):
        _handshake(server, _client(pki))
    with pytest.raises(ssl.SSLError):
        _handshake(server, _with_cert(pki, pki.untrusted_client.keystore_pem))


def test_client_auth_requested_lets_a_client_without_certificate_in(pki: Pki) -> None:
    server = _server(pki, "requested")
    assert ssl_principal(_handshake(server, _client(pki)), SslPrincipalMapper("DEFAULT")) == (
        ANONYMOUS
    )
    tls = _handshake(server, _with_cert(pki, pki.client.keystore_pem))
    assert ssl_principal(tls, SslPrincipalMapper("DEFAULT")).name.startswith("CN=alice")


def test_client_checks_the_host_name_unless_identification_is_off(pki: Pki) -> None:
    server = _server(pki, "none")
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        _handshake(server, _client(pki), hostname="broker.example.com")
    _handshake(
        server,
        _client(pki, ssl_endpoint_identification_algorithm=""),
        hostname="broker.example.com",
    )


def test_client_refuses_a_broker_it_does_not_trust(pki: Pki) -> None:
    client = client_context(
        _config(ssl_truststore_type="PEM", ssl_truststore_location=str(pki.other_ca_pem))
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(_server(pki, "none"), client)


def test_enabled_protocols_bound_the_version(pki: Pki) -> None:
    server = server_context(
        _config(
            ssl_keystore_type="PEM",
            ssl_keystore_location=str(pki.broker.keystore_pem),
            ssl_enabled_protocols=("TLSv1.2",),
        )
    )
    assert _handshake(server, _client(pki)).version() == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        _handshake(server, _client(pki, ssl_enabled_protocols=("TLSv1.3",)))


def test_unknown_cipher_suites_are_a_config_error(pki: Pki) -> None:
    with pytest.raises(ConfigError, match=r"no cipher of ssl\.cipher\.suites NOPE"):
        _client(pki, ssl_cipher_suites=("NOPE",))


def test_ssl_protocol_tls12_caps_the_version(pki: Pki) -> None:
    server = _server(pki, "none")
    assert _handshake(server, _client(pki)).version() == "TLSv1.3"
    assert _handshake(server, _client(pki, ssl_protocol="TLSv1.2")).version() == "TLSv1.2"
