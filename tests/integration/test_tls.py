"""SSL listeners end to end: a broker process with one PLAINTEXT and four SSL listeners,
driven by confluent-kafka, kafka-python and aiokafka over real TLS, and by raw sockets
that misbehave.

The listeners: SSL (PEM key store file, server authentication only), MTLS (client
certificate required, verified against the test CA, principal mapping rules that accept
only OU=ServiceUsers, as Kafka's ssl.principal.mapping.rules), P12 (PKCS12 key store)
and INLINE (key and chain inline, KIP-651), the last three set with listener.name.<l>.
prefixed keys as Kafka's per-listener overrides. Certificates are made in the session.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.helpers import create_ssl_context
from confluent_kafka import KafkaException, Producer

from support.broker import BrokerProcess
from support.certs import PASSWORD, Pki, make_pki
from support.clients import round_trip, round_trip_aiokafka, round_trip_kafka_python

# Short, so that the never-finished handshake is closed within the test.
_IDLE_MS = 3000


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("tls-broker"),
        {
            "listeners": ",".join(
                f"{name}://127.0.0.1:0" for name in ("PLAINTEXT", "SSL", "MTLS", "P12", "INLINE")
            ),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,P12:SSL,INLINE:SSL"
            ),
            "connections.max.idle.ms": _IDLE_MS,
            "ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.location": pki.broker.keystore_pem,
            "listener.name.mtls.ssl.keystore.location": pki.broker.keystore_pem,
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.truststore.location": pki.ca_pem,
            "listener.name.mtls.ssl.principal.mapping.rules": (
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/"
            ),
            "listener.name.p12.ssl.keystore.type": "PKCS12",
            "listener.name.p12.ssl.keystore.location": pki.broker.pkcs12,
            "listener.name.p12.ssl.keystore.password": PASSWORD,
            "listener.name.inline.ssl.keystore.key": pki.broker.key_pem.read_text(),
            "listener.name.inline.ssl.keystore.certificate.chain": pki.broker.chain_pem.read_text(),
        },
    )
    broker.start()
    yield broker
    broker.kill()


def _confluent(broker: BrokerProcess, listener: str, **settings: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.listener_address(listener),
        "security.protocol": "SSL",
        **settings,
    }


def _assert_refused(config: dict[str, Any]) -> None:
    """librdkafka gets no metadata over ``config`` (the connection is closed)."""
    producer = Producer(config)
    with pytest.raises(KafkaException, match=r"_TRANSPORT|_ALL_BROKERS_DOWN|_TIMED_OUT"):
        producer.list_topics(timeout=3)


def test_confluent_kafka_with_server_authentication(tls_broker: BrokerProcess, pki: Pki) -> None:
    round_trip(
        _confluent(tls_broker, "SSL", **{"ssl.ca.location": str(pki.ca_pem)}), "ssl", count=100
    )


def test_confluent_kafka_with_a_client_certificate(tls_broker: BrokerProcess, pki: Pki) -> None:
    config = _confluent(
        tls_broker,
        "MTLS",
        **{
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(pki.client.chain_pem),
            "ssl.key.location": str(pki.client.key_pem),
        },
    )
    round_trip(config, "mtls", count=100)


def test_pkcs12_and_inline_pem_key_stores(tls_broker: BrokerProcess, pki: Pki) -> None:
    for listener in ("P12", "INLINE"):
        config = _confluent(tls_broker, listener, **{"ssl.ca.location": str(pki.ca_pem)})
        round_trip(config, listener.lower(), count=10)


def test_client_without_certificate_is_refused_when_required(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    _assert_refused(_confluent(tls_broker, "MTLS", **{"ssl.ca.location": str(pki.ca_pem)}))


def test_client_certificate_from_an_untrusted_authority_is_refused(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    config = _confluent(
        tls_broker,
        "MTLS",
        **{
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(pki.untrusted_client.chain_pem),
            "ssl.key.location": str(pki.untrusted_client.key_pem),
        },
    )
    _assert_refused(config)


def test_a_subject_no_mapping_rule_applies_to_is_refused(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    # bob's certificate is valid, but OU=Users matches no rule and there is no DEFAULT:
    # Kafka fails the authentication (SslPrincipalMapper.NoMatchingRule).
    config = _confluent(
        tls_broker,
        "MTLS",
        **{
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(pki.other_client.chain_pem),
            "ssl.key.location": str(pki.other_client.key_pem),
        },
    )
    _assert_refused(config)
    assert "event=ssl_principal_refused" in tls_broker.log_text()
    assert f"No rules apply to {pki.other_client.subject}" in tls_broker.log_text()


def test_client_that_does_not_trust_the_broker_fails_the_handshake(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    errors: list[str] = []
    producer = Producer(
        _confluent(
            tls_broker,
            "SSL",
            **{
                "ssl.ca.location": str(pki.other_ca_pem),
                "error_cb": lambda e: errors.append(str(e)),
            },
        )
    )
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)
    producer.poll(1)
    assert "certificate verify failed" in " ".join(errors), errors


def _closed_by_broker(sock: socket.socket, within_s: float) -> bool:
    """Whether the broker closes ``sock`` within ``within_s`` (EOF or reset)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def _api_versions_frame() -> bytes:
    client_id = b"raw"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def test_bad_handshakes_are_closed_and_the_broker_keeps_serving(
    tls_broker: BrokerProcess, pki: Pki
) -> None:
    port = tls_broker.listener_port("SSL")
    # Plaintext Kafka bytes to the SSL port: not a TLS record, the handshake fails.
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_api_versions_frame())
        assert _closed_by_broker(sock, 10)
    # A ClientHello cut short, then silence: closed by the handshake bound.
    hello = _client_hello(pki)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(hello[: len(hello) // 2])
        assert _closed_by_broker(sock, _IDLE_MS / 1000 + 10)
    # A client that connects and never starts the handshake.
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        assert _closed_by_broker(sock, _IDLE_MS / 1000 + 10)
        assert time.monotonic() - started >= _IDLE_MS / 1000 * 0.9
    # A ClientHello cut short, then the client hangs up.
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(hello[:20])
    # Plaintext still answers, TLS still works.
    with socket.create_connection(("127.0.0.1", tls_broker.listener_port("PLAINTEXT"))) as sock:
        sock.sendall(_api_versions_frame())
        sock.settimeout(10)
        assert len(sock.recv(4)) == 4
    round_trip(
        _confluent(tls_broker, "SSL", **{"ssl.ca.location": str(pki.ca_pem)}), "after", count=5
    )
    assert tls_broker.running


def _client_hello(pki: Pki) -> bytes:
    """The first flight of a real TLS client, taken from an in-memory handshake."""
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_kafka_python_with_a_client_certificate(tls_broker: BrokerProcess, pki: Pki) -> None:
    settings: dict[str, Any] = {
        "bootstrap_servers": tls_broker.listener_address("MTLS"),
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca_pem),
        "ssl_certfile": str(pki.client.chain_pem),
        "ssl_keyfile": str(pki.client.key_pem),
    }
    round_trip_kafka_python(settings, "kafka-python", count=10)


def test_aiokafka_with_server_authentication(tls_broker: BrokerProcess, pki: Pki) -> None:
    settings: dict[str, Any] = {
        "bootstrap_servers": tls_broker.listener_address("SSL"),
        "security_protocol": "SSL",
        "ssl_context": create_ssl_context(cafile=str(pki.ca_pem)),
    }
    round_trip_aiokafka(settings, "aiokafka", count=10)


def test_unreadable_key_store_stops_the_broker_with_a_message(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": tmp_path / "missing.pem",
        },
    )
    with pytest.raises(RuntimeError, match="Failed to load SSL keystore"):
        broker.start()
