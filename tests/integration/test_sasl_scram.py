"""SASL/SCRAM-SHA-256 and -512 end to end on one combined KRaft node: users created by
`tiercel storage format --add-scram` log in with confluent-kafka, kafka-python and
aiokafka over SASL_PLAINTEXT and SASL_SSL; users created, listed and deleted over the
wire with AlterUserScramCredentials / DescribeUserScramCredentials (confluent-kafka's
AdminClient, forwarded to the controller) can log in, or no longer can, once the
broker has applied the record; wrong credentials get Kafka's SASL_AUTHENTICATION_FAILED
message and a log line without the password; credentials survive a restart."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.helpers import create_ssl_context
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from support.broker import BrokerProcess
from support.certs import Pki, make_pki
from support.clients import (
    produce_numbered,
    round_trip,
    round_trip_aiokafka,
    round_trip_kafka_python,
)
from support.kraft import (
    controller_ports,
    describe_quorum,
    format_node,
    kraft_node,
    metadata_partition_dir,
)
from support.wire import WireClient, size_prefixed
from tiercel.config.sasl_config import SaslLogin
from tiercel.protocol.sasl.scram_formatter import ScramMechanism as Sha
from tiercel.protocol.sasl.scram_sasl_client import ScramSaslClient
from tiercel.server.replication.broker_client import BrokerClient, SaslAuthenticationFailedError
from tiercel.tiered.reader.broker_client import BrokerTailError
from tiercel.tiered.reader.broker_tail import describe_topics, read_broker_range
from tiercel.tiered.reader.client_security import ClientSecurity, client_security

_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_JAAS = f"{_SCRAM_MODULE} required;"
_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_DELAY_MS = 200
_METADATA = MetadataRequest(topics=None, include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def scram_node(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    jaas = {
        f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config": _JAAS
        for listener in ("sasl_plaintext", "sasl_ssl")
        for mechanism in _MECHANISMS
    }
    node = kraft_node(
        tmp_path_factory.mktemp("scram"),
        1,
        controller_ports([1]),
        overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(_MECHANISMS),
            **jaas,
            "ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": pki.broker.keystore_pem,
            "connection.failed.authentication.delay.ms": _DELAY_MS,
        },
        formatted=False,
        extra_listeners=["SASL_PLAINTEXT://127.0.0.1:0", "SASL_SSL://127.0.0.1:0"],
    )
    format_node(
        node,
        extra=[
            "--add-scram",
            "SCRAM-SHA-256=[name=alice,password=alice-secret]",
            "--add-scram",
            "SCRAM-SHA-512=[name=alice,iterations=8192,password=alice-secret]",
        ],
    )
    node.start()
    yield node
    node.kill()


def _confluent(
    node: BrokerProcess,
    listener: str,
    mechanism: str,
    pki: Pki,
    user: str = "alice",
    password: str = "alice-secret",
    **settings: Any,
) -> dict[str, Any]:
    tls = {"ssl.ca.location": str(pki.ca_pem)} if listener == "SASL_SSL" else {}
    return {
        "bootstrap.servers": node.listener_address(listener),
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **tls,
        **settings,
    }


def _login_error(config: dict[str, Any]) -> list[KafkaError]:
    """The authentication errors librdkafka reports for a client that cannot log in;
    none once it has read the cluster's metadata."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            try:
                producer.list_topics(timeout=0.5)
                return []
            except KafkaException:
                producer.poll(0)  # error_cb runs from poll
            refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
            if refused:
                return refused
        raise AssertionError(f"neither logged in nor refused: {errors}")
    finally:
        del producer


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", _MECHANISMS)
def test_confluent_kafka_with_a_user_made_by_format(
    scram_node: BrokerProcess, pki: Pki, mechanism: str, listener: str
) -> None:
    config = _confluent(scram_node, listener, mechanism, pki)
    round_trip(config, f"{mechanism}-{listener}".lower(), count=20)


def test_wrong_password_and_unknown_user_are_refused_alike(
    scram_node: BrokerProcess, pki: Pki
) -> None:
    message = (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )
    for user, password in (("alice", "not-her-password"), ("mallory", "alice-secret")):
        config = _confluent(scram_node, "SASL_PLAINTEXT", "SCRAM-SHA-256", pki, user, password)
        errors = _login_error(config)
        assert errors and all(message in e.str() for e in errors), errors
    log = scram_node.log_text()
    assert re.search(
        r"event=sasl_authentication_failed client=127\.0\.0\.1:\d+ .*"
        r"mechanism=SCRAM-SHA-256 reason=.*Invalid client credentials",
        log,
    )
    assert "Invalid user credentials" in log
    assert "not-her-password" not in log


def test_kafka_python_over_sasl_ssl(scram_node: BrokerProcess, pki: Pki) -> None:
    settings: dict[str, Any] = {
        "bootstrap_servers": scram_node.listener_address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca_pem),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    round_trip_kafka_python(settings, "kafka-python-scram", count=10)


def test_aiokafka_over_sasl_ssl(scram_node: BrokerProcess, pki: Pki) -> None:
    settings: dict[str, Any] = {
        "bootstrap_servers": scram_node.listener_address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=str(pki.ca_pem)),
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    round_trip_aiokafka(settings, "aiokafka-scram", count=10)


def _admin(node: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.bootstrap})


def _describe(admin: AdminClient, user: str) -> dict[ScramMechanism, int]:
    [future] = admin.describe_user_scram_credentials([user]).values()
    return {i.mechanism: i.iterations for i in future.result(timeout=10).scram_credential_infos}


def test_users_created_and_deleted_over_the_wire(scram_node: BrokerProcess, pki: Pki) -> None:
    admin = _admin(scram_node)
    sha_512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", sha_512, b"bob-secret")]
    )
    futures["bob"].result(timeout=10)
    config = _confluent(scram_node, "SASL_SSL", "SCRAM-SHA-512", pki, "bob", "bob-secret")
    _wait_until(lambda: not _login_error(config), "bob cannot log in")
    round_trip(config, "bob", count=5)
    assert _describe(admin, "bob") == {ScramMechanism.SCRAM_SHA_512: 4096}
    assert _describe(admin, "alice") == {
        ScramMechanism.SCRAM_SHA_256: 4096,
        ScramMechanism.SCRAM_SHA_512: 8192,
    }
    every = admin.describe_user_scram_credentials().result(timeout=10)
    assert {"alice", "bob"} <= set(every)

    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)]
    )
    deleted["bob"].result(timeout=10)
    _wait_until(lambda: bool(_login_error(config)), "bob can still log in")
    with pytest.raises(KafkaException) as e:
        _describe(admin, "bob")
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    assert "Attempt to describe a user credential that does not exist: bob" in str(e.value)


def test_alterations_refused_with_kafkas_errors(scram_node: BrokerProcess) -> None:
    admin = _admin(scram_node)
    few = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000)
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion("carol", few, b"carol-secret"),
            UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
        ]
    )
    with pytest.raises(KafkaException) as e:
        futures["carol"].result(timeout=10)
    assert e.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert "Too few iterations" in str(e.value)
    with pytest.raises(KafkaException) as e:
        futures["nobody"].result(timeout=10)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_credentials_survive_a_restart(scram_node: BrokerProcess, pki: Pki) -> None:
    admin = _admin(scram_node)
    sha_256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("dave", sha_256, b"dave-secret")]
    )["dave"].result(timeout=10)
    del admin
    scram_node.restart()
    for user, password in (("alice", "alice-secret"), ("dave", "dave-secret")):
        config = _confluent(scram_node, "SASL_PLAINTEXT", "SCRAM-SHA-256", pki, user, password)
        round_trip(config, f"after-restart-{user}", count=5)


def test_scram_needs_a_kraft_node(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _JAAS,
        },
    )
    broker.launch()
    assert broker.proc is not None
    assert broker.proc.wait(timeout=60) != 0
    assert "needs the KRaft metadata log" in broker.log_text()
    assert "process.roles=broker,controller after tiercel storage format" in broker.log_text()


def _bootstrap(node: BrokerProcess, listener: str = "SASL_PLAINTEXT") -> str:
    return node.listener_address(listener)


def test_sasl_handshake_v0_takes_raw_scram_tokens(scram_node: BrokerProcess) -> None:
    """Before SaslAuthenticate (KIP-152) the two SCRAM rounds are size-prefixed raw
    tokens, answered the same way."""
    scram = ScramSaslClient(Sha.SCRAM_SHA_512, "alice", "alice-secret")
    with WireClient(_bootstrap(scram_node)) as client:
        handshake = client.request(SaslHandshakeRequestV0(mechanism="SCRAM-SHA-512"))
        assert handshake.error_code == ErrorCode.none
        client.send_raw(size_prefixed(scram.first_message()))
        client.send_raw(size_prefixed(scram.final_message(client.read_frame())))
        scram.verify_server_final(client.read_frame())
        assert client.request(_METADATA).brokers


def test_a_wrong_proof_is_answered_late_and_closed(scram_node: BrokerProcess) -> None:
    scram = ScramSaslClient(Sha.SCRAM_SHA_256, "alice", "wrong")
    with WireClient(_bootstrap(scram_node)) as client:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        first = client.request(SaslAuthenticateRequest(auth_bytes=scram.first_message()))
        assert first.error_code == ErrorCode.none
        sent = time.monotonic()
        final = client.request(
            SaslAuthenticateRequest(auth_bytes=scram.final_message(first.auth_bytes))
        )
        assert time.monotonic() - sent >= _DELAY_MS / 1000 * 0.9
        assert final.error_code == ErrorCode.sasl_authentication_failed
        assert final.error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-256"
        )
        assert client.closed_by_server()


def test_delegation_token_logins_are_refused(scram_node: BrokerProcess) -> None:
    with WireClient(_bootstrap(scram_node)) as client:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        response = client.request(
            SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=nonce,tokenauth=true")
        )
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert client.closed_by_server()
    assert "Token Authentication failed: Invalid tokenId : alice" in scram_node.log_text()


def test_broker_client_logs_in_with_scram(scram_node: BrokerProcess) -> None:
    """The inter-broker client (replica fetchers, marker sender, ...) against a SCRAM
    listener: its two rounds and the server's signature check work, and a refused
    login raises with the broker's message."""
    endpoint = ("127.0.0.1", scram_node.listener_port("SASL_PLAINTEXT"))

    async def metadata(password: str) -> Any:
        client = BrokerClient(
            1,
            lambda: endpoint,
            "scram-test",
            10.0,
            sasl_login=SaslLogin("SCRAM-SHA-512", "alice", password),
        )
        try:
            _, response = await client.request(
                3, (12, 12), {"topics": None, "include_topic_authorized_operations": False}
            )
            return response
        finally:
            client.close()

    assert asyncio.run(metadata("alice-secret")).brokers
    with pytest.raises(
        SaslAuthenticationFailedError,
        match="SASL/SCRAM-SHA-512 login to broker 1 as alice failed: Authentication failed "
        "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
    ):
        asyncio.run(metadata("wrong"))


@pytest.mark.parametrize("mechanism", _MECHANISMS)
def test_the_spark_sources_broker_tail_logs_in_with_scram(
    scram_node: BrokerProcess, pki: Pki, mechanism: str
) -> None:
    """The broker tail (tiered.reader) over SASL_SSL with SCRAM, from the Kafka client
    properties Spark's Kafka source passes on: it reads, and a wrong password fails the
    read at once with the broker's message."""
    address = scram_node.listener_address("SASL_SSL")
    produce_numbered(scram_node.bootstrap, f"tail-{mechanism}", 5)

    def security(password: str) -> ClientSecurity:
        return client_security(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism,
                "sasl.jaas.config": (
                    f'{_SCRAM_MODULE} required username="alice" password="{password}";'
                ),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(pki.ca_pem),
            }
        )

    batches = read_broker_range(
        address, f"tail-{mechanism}", 0, 0, 4, security=security("alice-secret"), timeout_s=20
    )
    assert [v.as_py() for b in batches for v in b.column("value")] == [b"v%d" % i for i in range(5)]
    with pytest.raises(
        BrokerTailError,
        match=f"SASL/{mechanism} login as alice failed: Authentication failed during "
        f"authentication due to invalid credentials with SASL mechanism {mechanism}",
    ):
        describe_topics(address, None, timeout_s=20, security=security("wrong"))


def test_credentials_survive_in_snapshots(tmp_path: Path, pki: Pki) -> None:
    """Frequent snapshots: once a snapshot covers every credential, a restarted node
    loads them from it (the controller's records and the broker's image both write
    them), not from the records that created them."""
    node = kraft_node(
        tmp_path,
        1,
        controller_ports([1]),
        overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": _JAAS,
            "metadata.log.max.record.bytes.between.snapshots": 1024,
        },
        formatted=False,
        extra_listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
    )
    format_node(node, extra=["-S", "SCRAM-SHA-512=[name=alice,password=alice-secret]"])
    try:
        node.start(120)
        admin = _admin(node)
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        users = [f"user-{i}" for i in range(30)]
        futures = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(u, info, f"{u}-secret".encode()) for u in users]
        )
        for future in futures.values():
            future.result(timeout=30)
        [partition] = describe_quorum(node).topics[0].partitions
        committed = partition.high_watermark
        metadata = metadata_partition_dir(node)
        _wait_until(
            lambda: any(
                int(p.stem.split("-")[0]) >= committed for p in metadata.glob("*.checkpoint")
            ),
            f"a snapshot at or past offset {committed}",
            timeout=60,
        )
        del admin
        assert node.stop() == 0
        node.start(120)
        restarted = node.log_text().split("---- start #2 ----")[1]
        loaded = re.search(r"control records of snapshot OffsetAndEpoch\(offset=(\d+)", restarted)
        assert loaded is not None and int(loaded.group(1)) >= committed
        for user in ("alice", "user-29"):
            config = _confluent(
                node, "SASL_PLAINTEXT", "SCRAM-SHA-512", pki, user, f"{user}-secret"
            )
            assert _login_error(config) == []
        admin = _admin(node)
        assert len(admin.describe_user_scram_credentials().result(timeout=10)) == 31
    finally:
        node.kill()
