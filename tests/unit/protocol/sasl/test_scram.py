"""SCRAM (RFC 5802/7677) against RFC 7677's SCRAM-SHA-256 example and the cases of Kafka's
ScramFormatterTest, ScramMessagesTest and ScramSaslServerTest, with Kafka's messages."""

from __future__ import annotations

import base64
import re
from types import MappingProxyType

import pytest

from tiercel.protocol.sasl.scram_formatter import (
    ScramMechanism,
    generate_credential,
    sasl_name,
    secure_random_string,
    username,
)
from tiercel.protocol.sasl.scram_messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ScramMessageError,
)
from tiercel.protocol.sasl.scram_sasl_client import ScramSaslClient
from tiercel.server.metadata.image.scram import ScramImage
from tiercel.server.network.credential_cache import CredentialCache
from tiercel.server.network.plain_sasl_server import SaslAuthenticationError
from tiercel.server.network.scram_sasl_server import SaslError, ScramSaslServer

SHA_256 = ScramMechanism.SCRAM_SHA_256
SHA_512 = ScramMechanism.SCRAM_SHA_512
# RFC 7677 §3.
C1 = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
S1 = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
C2 = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
S2 = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _cache(mechanism: ScramMechanism, users: dict[str, str]) -> CredentialCache:
    cache = CredentialCache()
    credentials = {name: generate_credential(mechanism, pw, 4096) for name, pw in users.items()}
    cache.update(ScramImage(MappingProxyType({mechanism.type: MappingProxyType(credentials)})))
    return cache


def _rfc_cache() -> CredentialCache:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = SHA_256.credential(salt, SHA_256.salted_password("pencil", salt, 4096), 4096)
    cache = CredentialCache()
    cache.update(ScramImage(MappingProxyType({1: MappingProxyType({"user": credential})})))
    return cache


def test_rfc7677_example_served() -> None:
    server = ScramSaslServer(SHA_256, _rfc_cache(), lambda: SERVER_NONCE)
    assert server.evaluate_response(C1) == S1
    assert server.authorization_id is None
    assert server.evaluate_response(C2) == S2
    assert server.authorization_id == "user"


def test_rfc7677_example_wrong_proof_refused() -> None:
    server = ScramSaslServer(SHA_256, _rfc_cache(), lambda: SERVER_NONCE)
    server.evaluate_response(C1)
    proof = base64.b64encode(bytes(32)).decode()
    with pytest.raises(SaslError, match=r"^Invalid client credentials$"):
        server.evaluate_response(C2[: C2.index(b"p=") + 2] + proof.encode())
    assert server.authorization_id is None
    with pytest.raises(SaslError, match="Unexpected challenge in Sasl server state FAILED"):
        server.evaluate_response(C2)


def test_mechanisms_as_kafka() -> None:
    assert (SHA_256.type, SHA_256.mechanism_name, SHA_256.min_iterations) == (
        1,
        "SCRAM-SHA-256",
        4096,
    )
    assert (SHA_512.type, SHA_512.mechanism_name) == (2, "SCRAM-SHA-512")
    assert ScramMechanism.for_mechanism_name("SCRAM-SHA-512") is SHA_512
    assert ScramMechanism.from_type(3) is None


@pytest.mark.parametrize(
    "name", ["user1", "123", "1,2", "user=A", "user==B", "user,1", "user 1", ",", "=", ",=", "=="]
)
def test_sasl_name_round_trip(name: str) -> None:
    encoded = sasl_name(name)
    assert "," not in encoded
    assert "=" not in encoded.replace("=2C", "").replace("=3D", "")
    assert username(encoded) == name


def test_invalid_sasl_name() -> None:
    with pytest.raises(ValueError, match="Invalid username: a=b"):
        username("a=b")


@pytest.mark.parametrize(
    ("message", "sasl", "authzid"),
    [
        ("n,,n=testuser,r=abc", "testuser", ""),
        ("n,,n=test=2Cuser,r=abc", "test=2Cuser", ""),
        ("n,a=testauthzid,n=testuser,r=abc", "testuser", "testauthzid"),
        ("n,,m=reserved-value,n=testuser,r=abc", "testuser", ""),
        ("n,,m=name1=value1 name2=another test value \"'!$[](),n=testuser,r=abc", "testuser", ""),
        ("n,,n=testuser,r=abc,ext=val1", "testuser", ""),
        ("n,,n=testuser,r=abc,first=val1,second=name1 = value ,third=123", "testuser", ""),
    ],
)
def test_valid_client_first_message(message: str, sasl: str, authzid: str) -> None:
    parsed = ClientFirstMessage.parse(message.encode())
    assert (parsed.sasl_name, parsed.nonce, parsed.authorization_id) == (sasl, "abc", authzid)


@pytest.mark.parametrize(
    "message",
    [
        "n,x=something,n=testuser,r=abc",
        "n,,m,n=testuser,r=abc",
        "n,,m=name,value,n=testuser,r=abc",
        "n,,m=,,n=testuser,r=abc",
        "y,,n=testuser,r=abc",
        "p=tls-unique,,n=testuser,r=abc",
        *(
            f"n,,n=testuser,r=abc,{ext}"
            for ext in ["ext1=value", "ext", "ext=value1,value2", "ext=,", "ext =value"]
        ),
    ],
)
def test_invalid_client_first_message(message: str) -> None:
    with pytest.raises(ScramMessageError, match=r"^Invalid SCRAM client first message format: "):
        ClientFirstMessage.parse(message.encode())


@pytest.mark.parametrize(
    "message", ["c=ab,r=abc,p=AAAA", "c=biws,r=abc,p=123", "c=biws,r=abc,ext=,,p=AAAA"]
)
def test_invalid_client_final_message(message: str) -> None:
    with pytest.raises(ScramMessageError, match=r"^Invalid SCRAM client final message format: "):
        ClientFinalMessage.parse(message.encode())


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_client_and_server_agree(mechanism: ScramMechanism) -> None:
    server = ScramSaslServer(mechanism, _cache(mechanism, {"alice": "alice-secret"}))
    client = ScramSaslClient(mechanism, "alice", "alice-secret")
    server_first = server.evaluate_response(client.first_message())
    server_final = server.evaluate_response(client.final_message(server_first))
    client.verify_server_final(server_final)
    assert server.authorization_id == "alice"


def test_client_refuses_a_server_without_the_credential() -> None:
    server = ScramSaslServer(SHA_256, _cache(SHA_256, {"alice": "other"}))
    client = ScramSaslClient(SHA_256, "alice", "alice-secret")
    with pytest.raises(SaslError):
        server.evaluate_response(
            client.final_message(server.evaluate_response(client.first_message()))
        )
    with pytest.raises(ScramMessageError, match="Invalid server signature"):
        client.verify_server_final(b"v=" + base64.b64encode(bytes(32)))
    with pytest.raises(
        ScramMessageError,
        match="Sasl authentication using SCRAM_SHA_256 failed with error: invalid-proof",
    ):
        client.verify_server_final(b"e=invalid-proof")


def test_user_name_with_comma_and_equals() -> None:
    server = ScramSaslServer(SHA_512, _cache(SHA_512, {"a,b=c": "pw"}))
    client = ScramSaslClient(SHA_512, "a,b=c", "pw")
    server.evaluate_response(client.final_message(server.evaluate_response(client.first_message())))
    assert server.authorization_id == "a,b=c"


def test_authorization_id_equal_to_user_accepted() -> None:
    server = ScramSaslServer(SHA_256, _cache(SHA_256, {"userA": "passwordA"}))
    assert server.evaluate_response(b"n,a=userA,n=userA,r=abc")


def test_authorization_id_not_equal_to_user_refused() -> None:
    server = ScramSaslServer(SHA_256, _cache(SHA_256, {"userA": "a", "userB": "b"}))
    with pytest.raises(
        SaslAuthenticationError,
        match="Client requested an authorization id that is different from username",
    ):
        server.evaluate_response(b"n,a=userB,n=userA,r=abc")


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (b"n,,n=nobody,r=abc", "Authentication failed: Invalid user credentials"),
        (
            b"n,,n=userA,r=abc,tokenauth=true",
            "Token Authentication failed: Invalid tokenId : userA",
        ),
        (b"n,,n=a=b,r=abc", "Invalid SCRAM client first message format: n,,n=a=b,r=abc"),
        (b"garbage", "Invalid SCRAM client first message format: garbage"),
    ],
)
def test_client_first_refused(first: bytes, reason: str) -> None:
    server = ScramSaslServer(SHA_256, _cache(SHA_256, {"userA": "passwordA"}))
    with pytest.raises(SaslError, match=reason):
        server.evaluate_response(first)


def test_other_mechanism_credentials_not_used() -> None:
    server = ScramSaslServer(SHA_512, _cache(SHA_256, {"userA": "passwordA"}))
    with pytest.raises(SaslError, match="Invalid user credentials"):
        server.evaluate_response(b"n,,n=userA,r=abc")


def test_nonce_exchange() -> None:
    server = ScramSaslServer(SHA_256, _cache(SHA_256, {"userA": "passwordA"}))
    server_first = server.evaluate_response(b"n,,n=userA,r=clientnonce").decode()
    assert server_first.startswith("r=clientnonce")
    other = secure_random_string()
    with pytest.raises(SaslError, match=r"^Invalid client nonce in the final client message\.$"):
        server.evaluate_response(f"c=biws,r={other},p=AAAA".encode())


def test_credential_iterations_below_minimum_refused() -> None:
    cache = CredentialCache()
    weak = SHA_256.credential(b"salt", SHA_256.salted_password("pw", b"salt", 4095), 4095)
    cache.update(ScramImage(MappingProxyType({1: MappingProxyType({"u": weak})})))
    with pytest.raises(
        SaslError, match="Iterations 4095 is less than the minimum 4096 for SCRAM_SHA_256"
    ):
        ScramSaslServer(SHA_256, cache).evaluate_response(b"n,,n=u,r=abc")


def test_secure_random_string_is_base36_of_130_bits() -> None:
    values = {secure_random_string() for _ in range(50)}
    assert len(values) == 50
    assert all(v.isalnum() and v == v.lower() and int(v, 36) < 2**130 for v in values)


@pytest.mark.parametrize(
    ("server_first", "message"),
    [
        (b"r=other,s=c2FsdA==,i=4096", "Invalid server nonce: does not start with client nonce"),
        (
            b"r={nonce}x,s=c2FsdA==,i=4095",
            "Requested iterations 4095 is less than the minimum 4096 for SCRAM_SHA_256",
        ),
        (
            b"r={nonce}x,s=c2FsdA==,i=16385",
            "Requested iterations 16385 is more than the maximum 16384 for SCRAM_SHA_256",
        ),
        (b"r={nonce}x,s=c2Fsd,i=4096", "Invalid SCRAM server first message format"),
        (b"s=c2FsdA==,i=4096", "Invalid SCRAM server first message format"),
    ],
)
def test_client_refuses_a_bad_server_first_message(server_first: bytes, message: str) -> None:
    client = ScramSaslClient(SHA_256, "alice", "alice-secret")
    nonce = ClientFirstMessage.parse(client.first_message()).nonce
    with pytest.raises(ScramMessageError, match=re.escape(message)):
        client.final_message(server_first.replace(b"{nonce}", nonce.encode()))
