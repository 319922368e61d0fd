"""SASL/OAUTHBEARER end to end with Kafka's default unsecured tokens: a broker process
with a PLAINTEXT, a SASL_PLAINTEXT and a SASL_SSL listener whose OAuthBearerLoginModule
requires the scope `kafka`, driven by confluent-kafka (librdkafka's unsecured JWT
builder, `enable.sasl.oauthbearer.unsecure.jwt`), by raw sockets that send tokens
librdkafka never would (expired, foreign authorization id, malformed), and by the
inter-broker BrokerClient's own login.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from support.broker import BrokerProcess
from support.certs import Pki, make_pki
from support.clients import round_trip
from support.wire import WireClient
from tiercel.config.sasl_config import SaslLogin
from tiercel.server.replication.broker_client import BrokerClient, SaslAuthenticationFailedError

_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredValidatorRequiredScope="kafka";'
)
# Long enough that a refused token's failure is measurably late; short enough for a test.
_DELAY_MS = 1000
_METADATA = MetadataRequest(topics=None, include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("oauth-broker"),
        {
            "listeners": ",".join(
                f"{name}://127.0.0.1:0" for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
            ),
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": _JAAS,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": _JAAS,
            "ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": pki.broker.keystore_pem,
            "connection.failed.authentication.delay.ms": _DELAY_MS,
        },
    )
    broker.start()
    yield broker
    broker.kill()


def _confluent(
    broker: BrokerProcess, listener: str, oauth: str = "principal=alice scope=kafka", **kw: Any
) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.listener_address(listener),
        "security.protocol": listener,
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": oauth,
        **kw,
    }


def _token(claims: dict[str, object]) -> str:
    def b64(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}."


def _initial(token: str, authzid: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}\x01\x01".encode()


def test_confluent_kafka_over_sasl_plaintext(oauth_broker: BrokerProcess) -> None:
    round_trip(_confluent(oauth_broker, "SASL_PLAINTEXT"), "oauth-plaintext", count=50)


def test_confluent_kafka_over_sasl_ssl(oauth_broker: BrokerProcess, pki: Pki) -> None:
    config = _confluent(oauth_broker, "SASL_SSL", **{"ssl.ca.location": str(pki.ca_pem)})
    round_trip(config, "oauth-ssl", count=50)


def test_wrong_scope_is_refused_with_kafkas_json_error(oauth_broker: BrokerProcess) -> None:
    errors: list[KafkaError] = []
    config = _confluent(
        oauth_broker,
        "SASL_PLAINTEXT",
        oauth="principal=mallory scope=other",
        error_cb=errors.append,
    )
    producer = Producer(config)
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        # A refused login is seen as soon as librdkafka reports it, in short rounds.
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=1)
        producer.poll(0.1)  # error_cb runs from poll
    del producer
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("insufficient_scope" in e.str() for e in errors), errors
    log = oauth_broker.log_text()
    assert re.search(
        r"event=sasl_authentication_failed client=127\.0\.0\.1:\d+ .*OAUTHBEARER"
        r".*missing a required scope \(kafka\)",
        log,
    )


def _handshake(client: WireClient) -> Any:
    return client.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"))


def _authenticate(client: WireClient, token: bytes) -> Any:
    return client.request(SaslAuthenticateRequest(auth_bytes=token))


def test_expired_token_gets_the_error_challenge_then_fails_late_without_slowing_others(
    oauth_broker: BrokerProcess,
) -> None:
    now = time.time()
    expired = _token({"sub": "alice", "iat": now - 120, "exp": now - 60, "scope": "kafka"})
    bootstrap = oauth_broker.listener_address("SASL_PLAINTEXT")
    with WireClient(bootstrap) as failing, WireClient(bootstrap) as other:
        assert _handshake(failing).error_code == ErrorCode.none
        challenge = _authenticate(failing, _initial(expired))
        assert challenge.error_code == ErrorCode.none
        assert challenge.auth_bytes == b'{"status":"invalid_token"}'
        sent = time.monotonic()
        failing.send(SaslAuthenticateRequest(auth_bytes=b"\x01"))
        # While the failure waits out its delay, another client logs in and is served.
        valid = _token({"sub": "bob", "exp": now + 600, "scope": ["kafka", "x"]})
        assert _handshake(other).error_code == ErrorCode.none
        response = _authenticate(other, _initial(valid))
        assert (response.error_code, response.auth_bytes) == (ErrorCode.none, b"")
        # connections.max.reauth.ms is 0, but the session still ends with the token, as
        # Kafka's: SaslAuthenticate tells the client when (KIP-368).
        assert 590 < response.session_lifetime.total_seconds() <= 600
        assert other.request(_METADATA).brokers
        failing.sock.settimeout(0)
        with pytest.raises(BlockingIOError):
            failing.sock.recv(1, socket.MSG_PEEK)
        failing.sock.settimeout(10)
        _, response = failing.read_response(36, 2)
        assert time.monotonic() - sent >= _DELAY_MS / 1000 * 0.9
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == '{"status":"invalid_token"}'
        assert failing.closed_by_server()
    log = oauth_broker.log_text()
    assert re.search(
        r"event=sasl_authentication_failed client=127\.0\.0\.1:\d+ .*OAUTHBEARER"
        r".*on or after the Expiration Time",
        log,
    )
    assert expired not in log and valid not in log


def test_foreign_authorization_id_and_malformed_messages_are_refused(
    oauth_broker: BrokerProcess,
) -> None:
    bootstrap = oauth_broker.listener_address("SASL_PLAINTEXT")
    token = _token({"sub": "alice", "exp": time.time() + 600, "scope": "kafka"})
    with WireClient(bootstrap) as client:
        assert _handshake(client).error_code == ErrorCode.none
        response = _authenticate(client, _initial(token, authzid="admin"))
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == (
            "Authentication failed: Client requested an authorization id (admin) that is "
            "different from the token's principal name (alice)"
        )
        assert client.closed_by_server()
    with WireClient(bootstrap) as client:
        assert _handshake(client).error_code == ErrorCode.none
        response = _authenticate(client, b"n,,\x01auth=Basic abc\x01\x01")
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism OAUTHBEARER"
        )
        assert client.closed_by_server()


def test_broker_client_logs_in_with_an_unsecured_token(oauth_broker: BrokerProcess) -> None:
    """The inter-broker client's OAUTHBEARER login, from the JAAS unsecuredLogin* options:
    with the required scope it is served; without, it raises with the broker's error."""
    endpoint = ("127.0.0.1", oauth_broker.listener_port("SASL_PLAINTEXT"))

    async def metadata(options: dict[str, str]) -> Any:
        login = SaslLogin("OAUTHBEARER", options["unsecuredLoginStringClaim_sub"], "", options)
        client = BrokerClient(1, lambda: endpoint, "oauth-test", 10.0, sasl_login=login)
        try:
            _, response = await client.request(
                3, (12, 12), {"topics": None, "include_topic_authorized_operations": False}
            )
            return response
        finally:
            client.close()

    broker = {"unsecuredLoginStringClaim_sub": "broker", "unsecuredLoginLifetimeSeconds": "60"}
    assert asyncio.run(metadata({**broker, "unsecuredLoginListClaim_scope": ",kafka"})).brokers
    with pytest.raises(SaslAuthenticationFailedError, match="insufficient_scope"):
        asyncio.run(metadata(broker))
