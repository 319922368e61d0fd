"""SASL/PLAIN end to end: a broker process with a PLAINTEXT listener (between brokers), a
SASL_PLAINTEXT and a SASL_SSL one, users from each listener's JAAS config, driven by
confluent-kafka, kafka-python and aiokafka, and by raw sockets that break Kafka's
SaslServerAuthenticator sequence (ApiVersions, SaslHandshake, SaslAuthenticate).
"""

from __future__ import annotations

import asyncio
import datetime
import re
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from support.broker import BrokerProcess
from support.certs import Pki, make_pki
from support.clients import round_trip, round_trip_aiokafka, round_trip_kafka_python
from support.wire import WireClient, encode_header, size_prefixed
from tiercel.config.sasl_config import SaslLogin
from tiercel.server.replication.broker_client import BrokerClient, SaslAuthenticationFailedError

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_JAAS = (
    f'{_PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
# Long enough that a failed login's answer is measurably late; short enough for a test.
_DELAY_MS = 1000
_MAX_RECEIVE = 4096
# Short, so that a login never finished is closed within the test.
_IDLE_MS = 4000
_METADATA = MetadataRequest(topics=None, include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("sasl-broker"),
        {
            "listeners": ",".join(
                f"{name}://127.0.0.1:0" for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
            ),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": _JAAS,
            "ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": pki.broker.keystore_pem,
            "connection.failed.authentication.delay.ms": _DELAY_MS,
            "sasl.server.max.receive.size": _MAX_RECEIVE,
            "connections.max.idle.ms": _IDLE_MS,
        },
    )
    broker.start()
    yield broker
    broker.kill()


def _bootstrap(broker: BrokerProcess, listener: str = "SASL_PLAINTEXT") -> str:
    return broker.listener_address(listener)


def _confluent(
    broker: BrokerProcess, listener: str, password: str = "alice-secret", **settings: Any
) -> dict[str, Any]:
    return {
        "bootstrap.servers": _bootstrap(broker, listener),
        "security.protocol": listener,
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": password,
        **settings,
    }


def test_confluent_kafka_over_sasl_plaintext(sasl_broker: BrokerProcess) -> None:
    round_trip(_confluent(sasl_broker, "SASL_PLAINTEXT"), "sasl-plaintext", count=50)


def test_confluent_kafka_over_sasl_ssl(sasl_broker: BrokerProcess, pki: Pki) -> None:
    config = _confluent(sasl_broker, "SASL_SSL", **{"ssl.ca.location": str(pki.ca_pem)})
    round_trip(config, "sasl-ssl", count=50)


def test_wrong_password_is_refused_and_others_are_served(sasl_broker: BrokerProcess) -> None:
    errors: list[KafkaError] = []
    config = _confluent(
        sasl_broker, "SASL_PLAINTEXT", password="not-her-password", error_cb=errors.append
    )
    producer = Producer(config)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)  # error_cb runs from poll
    del producer
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Invalid username or password" in e.str() for e in errors), errors
    round_trip(_confluent(sasl_broker, "SASL_PLAINTEXT"), "after-wrong-password", count=5)
    log = sasl_broker.log_text()
    assert re.search(r"event=sasl_authentication_failed client=127\.0\.0\.1:\d+ .*PLAIN", log)
    assert "not-her-password" not in log


def _handshake(client: WireClient, mechanism: str = "PLAIN") -> Any:
    return client.request(SaslHandshakeRequest(mechanism=mechanism))


def _authenticate(client: WireClient, token: bytes) -> Any:
    return client.request(SaslAuthenticateRequest(auth_bytes=token))


def test_failed_login_is_answered_late_without_slowing_another_client(
    sasl_broker: BrokerProcess,
) -> None:
    bootstrap = _bootstrap(sasl_broker)
    with WireClient(bootstrap) as failing, WireClient(bootstrap) as other:
        assert _handshake(failing).error_code == ErrorCode.none
        sent = time.monotonic()
        failing.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"))
        # While the failed login waits, another client logs in and is served.
        assert _handshake(other).error_code == ErrorCode.none
        assert _authenticate(other, b"\0alice\0alice-secret").error_code == ErrorCode.none
        assert other.request(_METADATA).brokers
        # ... before the failed one is answered: the delay held that connection alone.
        failing.sock.settimeout(0)
        with pytest.raises(BlockingIOError):
            failing.sock.recv(1, socket.MSG_PEEK)
        failing.sock.settimeout(10)
        _, response = failing.read_response(36, 2)
        assert time.monotonic() - sent >= _DELAY_MS / 1000 * 0.9
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert failing.closed_by_server()


def test_requests_outside_the_sasl_sequence_close_the_connection(
    sasl_broker: BrokerProcess,
) -> None:
    bootstrap = _bootstrap(sasl_broker)
    # A Produce before the handshake (closed before its body is even parsed).
    with WireClient(bootstrap) as client:
        client.send_raw(size_prefixed(encode_header(0, 9, 1, "raw", True) + b"\0" * 16))
        assert client.closed_by_server()
    # SaslAuthenticate before SaslHandshake.
    with WireClient(bootstrap) as client:
        client.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        assert client.closed_by_server()
    # A Metadata request after the handshake, instead of SaslAuthenticate.
    with WireClient(bootstrap) as client:
        assert _handshake(client).error_code == ErrorCode.none
        client.send(_METADATA)
        assert client.closed_by_server()
    # A SaslAuthenticate above sasl.server.max.receive.size: its size prefix alone closes.
    with WireClient(bootstrap) as client:
        assert _handshake(client).error_code == ErrorCode.none
        client.send_raw(struct.pack(">i", _MAX_RECEIVE + 1))
        assert client.closed_by_server()


def test_a_login_never_finished_is_closed_when_idle(sasl_broker: BrokerProcess) -> None:
    with WireClient(_bootstrap(sasl_broker)) as client:
        assert _handshake(client).error_code == ErrorCode.none
        started = time.monotonic()
        assert client.closed_by_server(timeout=_IDLE_MS / 1000 + 10)
        assert time.monotonic() - started >= _IDLE_MS / 1000 * 0.9


def test_unknown_mechanism_and_malformed_token_are_refused(sasl_broker: BrokerProcess) -> None:
    bootstrap = _bootstrap(sasl_broker)
    with WireClient(bootstrap) as client:
        response = _handshake(client, "SCRAM-SHA-256")
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert response.mechanisms == ("PLAIN",)
        assert client.closed_by_server()
    with WireClient(bootstrap) as client:
        assert _handshake(client).error_code == ErrorCode.none
        response = _authenticate(client, b"alice-without-separators")
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == "Invalid SASL/PLAIN response: expected 3 tokens, got 1"
        assert client.closed_by_server()
    with WireClient(bootstrap) as client:
        assert _handshake(client).error_code == ErrorCode.none
        response = _authenticate(client, b"admin\0alice\0alice-secret")
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert "authorization id that is different from username" in response.error_message


def test_authenticated_connection_is_served_and_refuses_a_second_handshake(
    sasl_broker: BrokerProcess,
) -> None:
    with WireClient(_bootstrap(sasl_broker)) as client:
        assert _handshake(client).error_code == ErrorCode.none
        response = _authenticate(client, b"alice\0alice\0alice-secret")
        assert response.error_code == ErrorCode.none
        assert response.session_lifetime == datetime.timedelta(0)
        assert client.request(_METADATA).brokers
        # Past authentication KafkaApis answers, as Kafka's, with ILLEGAL_SASL_STATE.
        assert _handshake(client).error_code == ErrorCode.illegal_sasl_state


def test_sasl_handshake_v0_takes_a_raw_token(sasl_broker: BrokerProcess) -> None:
    with WireClient(_bootstrap(sasl_broker)) as client:
        assert client.request(SaslHandshakeRequestV0(mechanism="PLAIN")).error_code == 0
        client.send_raw(size_prefixed(b"\0alice\0alice-secret"))
        assert client.read_frame() == b""
        assert client.request(_METADATA).brokers


def test_plaintext_listener_answers_sasl_requests_with_illegal_state(
    sasl_broker: BrokerProcess,
) -> None:
    with WireClient(_bootstrap(sasl_broker, "PLAINTEXT")) as client:
        assert _handshake(client).error_code == ErrorCode.illegal_sasl_state
        response = _authenticate(client, b"\0alice\0alice-secret")
        assert response.error_code == ErrorCode.illegal_sasl_state


def test_kafka_python_over_sasl_plaintext(sasl_broker: BrokerProcess) -> None:
    round_trip_kafka_python(_kafka_python_settings(sasl_broker), "kafka-python-sasl", count=10)


def test_aiokafka_over_sasl_plaintext(sasl_broker: BrokerProcess) -> None:
    round_trip_aiokafka(_kafka_python_settings(sasl_broker), "aiokafka-sasl", count=10)


def _kafka_python_settings(broker: BrokerProcess) -> dict[str, Any]:
    """alice over SASL_PLAINTEXT in kafka-python's (and aiokafka's) spelling."""
    return {
        "bootstrap_servers": _bootstrap(broker),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }


def test_broker_client_logs_in_with_plain(sasl_broker: BrokerProcess) -> None:
    """The inter-broker client (replica fetchers, marker sender, ...) against a SASL
    listener: its login works, and a refused one raises with the broker's message."""
    endpoint = ("127.0.0.1", sasl_broker.listener_port("SASL_PLAINTEXT"))

    async def metadata(password: str) -> Any:
        client = BrokerClient(
            1,
            lambda: endpoint,
            "sasl-test",
            10.0,
            sasl_login=SaslLogin("PLAIN", "alice", password),
        )
        try:
            _, response = await client.request(
                3, (12, 12), {"topics": None, "include_topic_authorized_operations": False}
            )
            return response
        finally:
            client.close()

    assert asyncio.run(metadata("alice-secret")).brokers
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid username or password"):
        asyncio.run(metadata("wrong"))
