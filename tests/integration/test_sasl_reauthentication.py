"""KIP-368 re-authentication end to end: a broker with a short `connections.max.reauth.ms`
on a SASL_PLAINTEXT listener serving PLAIN and OAUTHBEARER. librdkafka producers keep
producing on their connections across several session lifetimes (they log in again on
the same connection, as SaslAuthenticate's session_lifetime_ms tells them); raw sockets
check Kafka's server side (SaslServerAuthenticator, KafkaChannel, SocketServer's
Processor): an expired session is closed at its next request, a re-authentication keeps
the connection, and may change neither the principal nor the mechanism; the inter-broker
BrokerClient re-authenticates before its session ends.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from support.broker import BrokerProcess
from support.wire import WireClient
from tiercel.config.sasl_config import SaslLogin
from tiercel.server.replication.broker_client import BrokerClient

_REAUTH_MS = 1500
_PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_bob="bob-secret";'
)
_OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
_METADATA = MetadataRequest(topics=None, include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("reauth-broker"),
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _PLAIN_JAAS,
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": _OAUTH_JAAS,
            "connections.max.reauth.ms": _REAUTH_MS,
            "connection.failed.authentication.delay.ms": 0,
        },
    )
    broker.start()
    yield broker
    broker.kill()


def _bootstrap(broker: BrokerProcess) -> str:
    return broker.listener_address("SASL_PLAINTEXT")


def _token(sub: str, lifetime_s: float) -> bytes:
    def b64(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = time.time()
    token = f"{b64({'alg': 'none'})}.{b64({'sub': sub, 'iat': now, 'exp': now + lifetime_s})}."
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def _login(client: WireClient, mechanism: str, token: bytes) -> Any:
    assert client.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
    return client.request(SaslAuthenticateRequest(auth_bytes=token))


def _sleep_until(deadline: float) -> None:
    """The session's end is a time, not an event: wait for it, bounded by it."""
    time.sleep(max(deadline - time.monotonic(), 0))


@pytest.mark.parametrize(
    "login",
    [
        {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"},
        {
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=alice",
        },
    ],
    ids=["PLAIN", "OAUTHBEARER"],
)
def test_librdkafka_keeps_producing_across_reauthentications(
    reauth_broker: BrokerProcess, login: dict[str, Any]
) -> None:
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(reauth_broker),
            "security.protocol": "SASL_PLAINTEXT",
            "acks": "all",
            "linger.ms": 5,
            "statistics.interval.ms": 200,
            "stats_cb": lambda text: stats.append(json.loads(text)),
            **login,
        }
    )
    topic = f"reauth-{login['sasl.mechanism'].lower()}"
    delivered: list[int] = []

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.append(int(message.value()))

    # Four session lifetimes: each connection must log in again at least three times.
    end = time.monotonic() + 4 * _REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < end:
        producer.produce(topic, str(sent).encode(), on_delivery=on_delivery)
        sent += 1
        producer.poll(0.05)
    assert producer.flush(30) == 0
    producer.poll(0.5)  # one more statistics callback
    assert sorted(delivered) == list(range(sent))
    brokers = [b for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0]
    assert brokers and all(b["disconnects"] == 0 for b in brokers), brokers
    assert "sasl_session_expired" not in reauth_broker.log_text()


def test_an_expired_session_is_closed_at_its_next_request(reauth_broker: BrokerProcess) -> None:
    with WireClient(_bootstrap(reauth_broker)) as client:
        response = _login(client, "PLAIN", b"\0alice\0alice-secret")
        logged_in = time.monotonic()
        assert response.session_lifetime == datetime.timedelta(milliseconds=_REAUTH_MS)
        assert client.request(_METADATA).brokers
        _sleep_until(logged_in + _REAUTH_MS / 1000 + 0.2)
        client.send(_METADATA)
        assert client.closed_by_server()
    assert re.search(
        r"event=sasl_session_expired client=127\.0\.0\.1:\d+ .*mechanism=PLAIN "
        r"principal=User:alice",
        reauth_broker.log_text(),
    )


def test_reauthentication_keeps_the_connection(reauth_broker: BrokerProcess) -> None:
    with WireClient(_bootstrap(reauth_broker)) as client:
        _login(client, "PLAIN", b"\0alice\0alice-secret")
        first_end = time.monotonic() + _REAUTH_MS / 1000
        # Late in the first session, so that the second one outlasts it.
        _sleep_until(first_end - 0.6)
        response = _login(client, "PLAIN", b"\0alice\0alice-secret")
        assert response.error_code == ErrorCode.none
        assert response.session_lifetime == datetime.timedelta(milliseconds=_REAUTH_MS)
        # A second handshake within a second of the last re-authentication is not one
        # (KafkaChannel's one-second minimum): KafkaApis answers it, the connection stays.
        handshake = client.request(SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.illegal_sasl_state
        _sleep_until(first_end + 0.2)
        # Past the first session's end, within the second's (0.8 s into its 1.5 s).
        assert client.request(_METADATA).brokers


def test_reauthentication_may_change_neither_principal_nor_mechanism(
    reauth_broker: BrokerProcess,
) -> None:
    with WireClient(_bootstrap(reauth_broker)) as client:
        _login(client, "PLAIN", b"\0alice\0alice-secret")
        response = _login(client, "PLAIN", b"\0bob\0bob-secret")
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert client.closed_by_server()
    with WireClient(_bootstrap(reauth_broker)) as client:
        _login(client, "PLAIN", b"\0alice\0alice-secret")
        response = _login(client, "OAUTHBEARER", _token("alice", 60))
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert response.error_message == (
            "SASL mechanism 'OAUTHBEARER' requested by client is not supported for "
            "re-authentication of mechanism 'PLAIN'"
        )
        assert client.closed_by_server()


def test_an_oauthbearer_session_ends_with_its_token(reauth_broker: BrokerProcess) -> None:
    with WireClient(_bootstrap(reauth_broker)) as client:
        response = _login(client, "OAUTHBEARER", _token("alice", 1.0))
        lifetime = response.session_lifetime.total_seconds() * 1000
        assert 0 < lifetime <= 1000 < _REAUTH_MS


def test_broker_client_reauthenticates_before_its_session_ends(
    reauth_broker: BrokerProcess,
) -> None:
    host, port = _bootstrap(reauth_broker).split(":")

    async def run() -> None:
        client = BrokerClient(
            1,
            lambda: (host, int(port)),
            "reauth-test",
            10.0,
            sasl_login=SaslLogin("PLAIN", "alice", "alice-secret"),
        )
        body = {"topics": None, "include_topic_authorized_operations": False}
        try:
            await client.request(3, (12, 12), body)
            # Past 95% of the session, within it: the client logs in again first.
            await asyncio.sleep(_REAUTH_MS / 1000 * 0.96)
            await client.request(3, (12, 12), body)
            # Past the first session's end too: the renewed session serves it.
            await asyncio.sleep(_REAUTH_MS / 1000 * 0.5)
            await client.request(3, (12, 12), body)
        finally:
            client.close()

    asyncio.run(run())
