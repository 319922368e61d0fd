"""OAUTHBEARER's sans-io parts: the client initial response (Kafka's
OAuthBearerClientInitialResponseTest), the unsecured JWS (OAuthBearerUnsecuredJwsTest)
and the token a login makes (OAuthBearerUnsecuredLoginCallbackHandlerTest)."""

from __future__ import annotations

import base64
import json

import pytest

from tiercel.protocol.sasl.oauthbearer_client_initial_response import (
    OAuthBearerClientInitialResponse,
    SaslMessageError,
)
from tiercel.protocol.sasl.oauthbearer_unsecured_jws import (
    OAuthBearerIllegalTokenError,
    OAuthBearerUnsecuredJws,
)
from tiercel.protocol.sasl.oauthbearer_unsecured_login import (
    OAuthBearerConfigError,
    client_initial_response,
    unsecured_login_token,
)


def _b64(obj: object) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def _jws(claims: object, header: object = None) -> str:
    return f"{_b64(header or {'alg': 'none'})}.{_b64(claims)}."


# --- OAuthBearerClientInitialResponseTest ---------------------------------------------


def test_build_client_response_to_bytes() -> None:
    response = OAuthBearerClientInitialResponse("123.345.567", "", {"nineteen": "42"})
    assert response.to_bytes() == b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01"


def test_parsed_response_writes_back_the_same_bytes() -> None:
    message = b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01"
    assert OAuthBearerClientInitialResponse.parse(message).to_bytes() == message


def test_invalid_extension_key_is_refused() -> None:
    with pytest.raises(SaslMessageError, match="Extension name 19 is invalid"):
        OAuthBearerClientInitialResponse("123.345.567", "", {"19": "42"})
    with pytest.raises(SaslMessageError, match="Extension name auth is invalid"):
        OAuthBearerClientInitialResponse("123.345.567", "", {"auth": "x"})


def test_token_and_authorization_id() -> None:
    response = OAuthBearerClientInitialResponse.parse(b"n,,\x01auth=Bearer 123.345.567\x01\x01")
    assert (response.token_value, response.authorization_id) == ("123.345.567", "")
    response = OAuthBearerClientInitialResponse.parse(b"n,a=myuser,\x01auth=Bearer 345\x01\x01")
    assert (response.token_value, response.authorization_id) == ("345", "myuser")


def test_extensions_around_the_auth_pair() -> None:
    message = b"n,,\x01propA=valueA1, valueA2\x01auth=Bearer 567\x01propB=valueB\x01\x01"
    response = OAuthBearerClientInitialResponse.parse(message)
    assert response.token_value == "567"
    assert dict(response.extensions) == {"propA": "valueA1, valueA2", "propB": "valueB"}


@pytest.mark.parametrize(
    "token",
    [
        "vF9dft4qmTc2Nvb3RlckBhbHRhdmlzdGEuY29tCg",  # RFC 7628's example without padding
        "vF-9.df_t4qm~Tc2Nvb3RlckBhbHR+hdmlzdGEuY29/tCg==",  # RFC 6750's token characters
    ],
)
def test_rfc_7628_example(token: str) -> None:
    message = (
        "n,a=user@example.com,\x01host=server.example.com\x01port=143\x01"
        f"auth=Bearer {token}\x01\x01"
    )
    response = OAuthBearerClientInitialResponse.parse(message.encode())
    assert (response.token_value, response.authorization_id) == (token, "user@example.com")
    assert dict(response.extensions) == {"host": "server.example.com", "port": "143"}


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"y,,\x01auth=Bearer 1\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer 1\x01", "Invalid OAUTHBEARER client first message"),
        (b"\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01host=x\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Basic abc\x01\x01", "Invalid scheme in OAUTHBEARER client first message"),
    ],
)
def test_malformed_initial_responses(message: bytes, error: str) -> None:
    with pytest.raises(SaslMessageError, match=error):
        OAuthBearerClientInitialResponse.parse(message)


def test_the_scheme_is_case_insensitive_and_the_token_never_printed() -> None:
    response = OAuthBearerClientInitialResponse.parse(b"n,,\x01auth=bEaReR secret\x01\x01")
    assert response.token_value == "secret"
    assert "secret" not in repr(response)


# --- OAuthBearerUnsecuredJwsTest --------------------------------------------------------


def test_valid_compact_serialization() -> None:
    claims = {"sub": "user", "iat": 100.1, "exp": 200.2, "scope": ["a", " b ", ""], "x": True}
    jws = OAuthBearerUnsecuredJws.parse(_jws(claims), "sub", "scope")
    assert jws.principal_name == "user"
    assert (jws.start_time_ms, jws.lifetime_ms) == (100100, 200200)
    assert jws.scope == {"a", "b"}
    assert jws.claims["x"] == "true"  # Jackson's asText of a boolean
    assert "user" in repr(jws) and jws.value not in repr(jws)


def test_scope_may_be_one_string() -> None:
    jws = OAuthBearerUnsecuredJws.parse(
        _jws({"sub": "u", "exp": 1, "scope": " s "}), "sub", "scope"
    )
    assert jws.scope == {"s"}


def test_padded_base64url_and_other_claim_names() -> None:
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').decode()
    payload = base64.urlsafe_b64encode(b'{"principal":"p","exp":1,"roles":"r"}').decode()
    jws = OAuthBearerUnsecuredJws.parse(f"{header}.{payload}.", " principal ", "roles")
    assert (jws.principal_name, jws.scope, jws.start_time_ms) == ("p", {"r"}, None)


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (f"{_b64({'alg': 'none'})}..", "Malformed compact serialization contains '..'"),
        (f"{_b64({'alg': 'none'})}.{_b64({'sub': 'u', 'exp': 1})}", "must have 3 dot-separated"),
        (
            f"{_b64({'alg': 'none'})}.{_b64({'sub': 'u', 'exp': 1})}.sig",
            "Unsecured JWS must not contain a digital signature",
        ),
        (_jws({"sub": "u", "exp": 1}, {"alg": "HS256"}), "must have 'none' for an algorithm"),
        (_jws({"sub": "u", "exp": 1}, {"typ": "JWT"}), "must have 'none' for an algorithm"),
        (f"{_b64({'alg': 'none'})}.a*b.", "malformed Base64 URL encoded value"),
        (f"{_b64({'alg': 'none'})}.{_b64('not json')}.", "malformed JSON"),
        (f"{_b64({'alg': 'none'})}.{_b64([1])}.", "malformed JSON"),
        (_jws({"sub": "u"}), "No expiration time in JWT"),
        (_jws({"sub": "u", "exp": "soon"}), "The 'exp' claim was not of type Number: String"),
        (_jws({"exp": 1}), "No principal name in JWT claim: sub"),
        (_jws({"sub": "  ", "exp": 1}), "No principal name in JWT claim: sub"),
        (_jws({"sub": 7, "exp": 1}), "The 'sub' claim was not of type String: Integer"),
        (_jws({"sub": "u", "exp": 1, "iat": "x"}), "The 'iat' claim was not of type Number"),
        (
            _jws({"sub": "u", "exp": 1, "scope": 2.5}),
            "The 'scope' claim was not of type List: Double",
        ),
    ],
)
def test_illegal_tokens(token: str, error: str) -> None:
    with pytest.raises(OAuthBearerIllegalTokenError, match=error):
        OAuthBearerUnsecuredJws.parse(token, "sub", "scope")


def test_blank_claim_names_are_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="Must specify a non-blank principal claim name"):
        OAuthBearerUnsecuredJws.parse(_jws({"sub": "u", "exp": 1}), " ", "scope")


# --- OAuthBearerUnsecuredLoginCallbackHandlerTest ---------------------------------------


def test_login_token_with_string_number_and_list_claims() -> None:
    options = {
        "unsecuredLoginStringClaim_sub": "admin",
        "unsecuredLoginNumberClaim_n": "1",
        "unsecuredLoginListClaim_scope": ",a,b",
        "unsecuredLoginListClaim_empty": "|",
        "unsecuredLoginListClaim_gap": ",x,,y",
        "unsecuredLoginLifetimeSeconds": "60",
        "unsecuredLoginExtension_traceid": "t1",
    }
    jws = unsecured_login_token(options, now_ms=1_000_000)
    assert jws.principal_name == "admin"
    assert (jws.start_time_ms, jws.lifetime_ms) == (1_000_000, 1_060_000)
    assert jws.scope == {"a", "b"}
    assert jws.claims["n"] == 1.0
    assert jws.claims["empty"] == [] and jws.claims["gap"] == ["x", "", "y", ""]
    assert jws.header == {"alg": "none"}


def test_login_principal_claim_name_and_default_lifetime() -> None:
    options = {"unsecuredLoginPrincipalClaimName": "who", "unsecuredLoginStringClaim_who": "me"}
    jws = unsecured_login_token(options, now_ms=0)
    assert (jws.principal_name, jws.lifetime_ms) == ("me", 3_600_000)


def test_client_initial_response_carries_the_token_and_extensions() -> None:
    options = {"unsecuredLoginStringClaim_sub": "admin", "unsecuredLoginExtension_a": "b"}
    response = OAuthBearerClientInitialResponse.parse(client_initial_response(options, 5000))
    assert OAuthBearerUnsecuredJws.parse(response.token_value, "sub", "scope").principal_name == (
        "admin"
    )
    assert dict(response.extensions) == {"a": "b"}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({}, "Token not provided"),
        (
            {"unsecuredLoginExtension_a": "b"},
            "Extensions provided in login context without a token",
        ),
        ({"unsecuredLoginStringClaim_exp": "1"}, "Cannot explicitly set the 'exp' claim"),
        ({"unsecuredLoginNumberClaim_iat": "1"}, "Cannot explicitly set the 'iat' claim"),
        ({"unsecuredLoginStringClaim_x": "1"}, "No principal name in JWT claim: sub"),
        ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginLifetimeSeconds": "x"}, "x"),
        ({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_n": "y"}, "y"),
    ],
)
def test_login_options_that_make_no_token(options: dict[str, str], error: str) -> None:
    with pytest.raises(OAuthBearerConfigError, match=error):
        unsecured_login_token(options, now_ms=0)


def test_invalid_login_extension_is_a_configuration_error() -> None:
    options = {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginExtension_b1": "c"}
    with pytest.raises(OAuthBearerConfigError, match="Extension name b1 is invalid"):
        client_initial_response(options, 0)
