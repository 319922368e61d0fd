"""OAUTHBEARER on the broker: Kafka's OAuthBearerUnsecuredValidatorCallbackHandlerTest
and OAuthBearerValidationUtilsTest cases for the validator, and OAuthBearerSaslServerTest's
exchange (success, the JSON error challenge then the failure after %x01, a foreign
authorization id)."""

from __future__ import annotations

import base64
import json

import pytest

from tiercel.config.oauthbearer_config import OAuthBearerValidatorOptions
from tiercel.protocol.sasl.oauthbearer_unsecured_jws import OAuthBearerIllegalTokenError
from tiercel.server.network.oauthbearer_sasl_server import OAuthBearerSaslServer
from tiercel.server.network.oauthbearer_validator import (
    OAuthBearerUnsecuredValidator,
    json_error_response,
)
from tiercel.server.network.plain_sasl_server import SaslAuthenticationError
from tiercel.server.network.scram_sasl_server import SaslError

_NOW_MS = 1_700_000_000_000
_NOW_S = _NOW_MS / 1000


def _jws(claims: object) -> str:
    def b64(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}."


def _validator(**options: str) -> OAuthBearerUnsecuredValidator:
    return OAuthBearerUnsecuredValidator(OAuthBearerValidatorOptions.from_jaas_options(options))


_NO_SCOPE = {"unsecuredValidatorPrincipalClaimName": "principal"}
_HOUR = _NOW_S + 3600


@pytest.mark.parametrize("iat", [None, _NOW_S])
def test_valid_token(iat: float | None) -> None:
    claims: dict[str, object] = {"principal": "username", "exp": _HOUR}
    if iat is not None:
        claims["iat"] = iat
    token = _validator(**_NO_SCOPE).validate(_jws(claims), _NOW_MS)
    assert token.principal_name == "username"


@pytest.mark.parametrize(
    ("claims", "error"),
    [
        ({"exp": _HOUR}, "No principal name in JWT claim: principal"),
        ({"exp": _HOUR, "principal": 1}, "The 'principal' claim was not of type String"),
        (
            {"principal": "u", "iat": _NOW_S, "exp": _NOW_S},
            f"The indicated time ({_NOW_MS} ms) minus allowable clock skew (0 ms) was on or "
            f"after the Expiration Time value ({_NOW_S:f} seconds)",
        ),
        (
            {"principal": "u", "iat": _NOW_S + 1, "exp": _HOUR},
            f"The Issued At value ({_NOW_S + 1:f} seconds) was after the indicated time "
            f"({_NOW_MS} ms) plus allowable clock skew (0 ms)",
        ),
        (
            {"principal": "u", "iat": _NOW_S - 10, "exp": _NOW_S - 10},
            "minus allowable clock skew (0 ms) was on or after the Expiration Time",
        ),
    ],
)
def test_refused_tokens(claims: dict[str, object], error: str) -> None:
    with pytest.raises(OAuthBearerIllegalTokenError) as e:
        _validator(**_NO_SCOPE).validate(_jws(claims), _NOW_MS)
    assert str(e.value).startswith(error) or error in str(e.value)
    assert json_error_response(e.value) == '{"status":"invalid_token"}'


def test_expiration_not_after_issued_at() -> None:
    # Within the skew, iat and exp are each acceptable, but exp must come after iat.
    validator = _validator(unsecuredValidatorAllowableClockSkewMs="5000")
    with pytest.raises(OAuthBearerIllegalTokenError, match="was not after the Issued At time"):
        validator.validate(_jws({"sub": "u", "iat": _NOW_S + 2, "exp": _NOW_S + 1}), _NOW_MS)


def test_clock_skew_admits_a_just_expired_or_future_token() -> None:
    validator = _validator(unsecuredValidatorAllowableClockSkewMs="2000")
    token = _jws({"sub": "u", "iat": _NOW_S + 1, "exp": _NOW_S - 1})
    with pytest.raises(OAuthBearerIllegalTokenError, match="was not after the Issued At"):
        validator.validate(token, _NOW_MS)
    assert validator.validate(_jws({"sub": "u", "exp": _NOW_S - 1}), _NOW_MS).principal_name == "u"
    assert validator.validate(_jws({"sub": "u", "iat": _NOW_S + 1, "exp": _HOUR}), _NOW_MS)


def test_includes_required_scope() -> None:
    validator = _validator(unsecuredValidatorRequiredScope="scope1")
    assert validator.validate(_jws({"sub": "u", "exp": _HOUR, "scope": "scope1"}), _NOW_MS)


def test_missing_required_scope() -> None:
    validator = _validator(unsecuredValidatorRequiredScope="scope1 scope2")
    with pytest.raises(OAuthBearerIllegalTokenError) as e:
        validator.validate(_jws({"sub": "u", "exp": _HOUR, "scope": "scope1"}), _NOW_MS)
    assert str(e.value) == (
        "The provided scope ([scope1]) was missing a required scope (scope2).  All required "
        "scope elements: [scope1, scope2]"
    )
    assert e.value.failure_scope == "[scope1, scope2]"
    assert json_error_response(e.value) == (
        '{"status":"insufficient_scope", "scope":"[scope1, scope2]"}'
    )


def test_scope_claim_name_option() -> None:
    validator = _validator(
        unsecuredValidatorScopeClaimName="roles", unsecuredValidatorRequiredScope="r"
    )
    assert validator.validate(_jws({"sub": "u", "exp": _HOUR, "roles": ["r", "s"]}), _NOW_MS)


@pytest.mark.parametrize(
    ("skew", "error"),
    [
        ("-1", "Allowable clock skew millis must not be negative: -1"),
        ("x", 'For input string: "x"'),
    ],
)
def test_invalid_clock_skew_option(skew: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        OAuthBearerValidatorOptions.from_jaas_options(
            {"unsecuredValidatorAllowableClockSkewMs": skew}
        )


# --- OAuthBearerSaslServer -----------------------------------------------------------


def _server(**options: str) -> OAuthBearerSaslServer:
    return OAuthBearerSaslServer(_validator(**options), lambda: _NOW_MS)


def _initial(token: str, authzid: str = "", extensions: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01{extensions}auth=Bearer {token}\x01\x01".encode()


def test_valid_token_completes_at_once_with_its_principal() -> None:
    server = _server()
    assert server.authorization_id is None
    challenge = server.evaluate_response(_initial(_jws({"sub": "alice", "exp": _HOUR}), "alice"))
    assert challenge == b""
    assert server.authorization_id == "alice"
    assert server.token is not None and server.token.lifetime_ms == round(_HOUR * 1000)


def test_extensions_are_accepted() -> None:
    server = _server()
    token = _jws({"sub": "alice", "exp": _HOUR})
    assert server.evaluate_response(_initial(token, extensions="traceId=x\x01")) == b""


def test_refused_token_gets_the_json_challenge_then_fails_after_control_a() -> None:
    server = _server(unsecuredValidatorRequiredScope="write")
    challenge = server.evaluate_response(_initial(_jws({"sub": "u", "exp": _HOUR})))
    assert challenge == b'{"status":"insufficient_scope", "scope":"[write]"}'
    assert server.authorization_id is None
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate_response(b"\x01")
    assert str(e.value) == '{"status":"insufficient_scope", "scope":"[write]"}'
    # The reason stays on the broker, for its log.
    assert "missing a required scope (write)" in str(e.value.__cause__)


def test_expired_token_is_invalid_token() -> None:
    server = _server()
    challenge = server.evaluate_response(_initial(_jws({"sub": "u", "exp": _NOW_S - 60})))
    assert challenge == b'{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError, match='"invalid_token"'):
        server.evaluate_response(b"\x01")


def test_foreign_authorization_id_is_refused_with_kafkas_message() -> None:
    with pytest.raises(SaslAuthenticationError) as e:
        _server().evaluate_response(_initial(_jws({"sub": "alice", "exp": _HOUR}), "bob"))
    assert str(e.value) == (
        "Authentication failed: Client requested an authorization id (bob) that is different "
        "from the token's principal name (alice)"
    )


@pytest.mark.parametrize("message", [b"\x01", b"n,,\x01auth=Bearer\x01\x01", b"garbage"])
def test_malformed_messages_are_sasl_errors(message: bytes) -> None:
    with pytest.raises(SaslError, match="OAUTHBEARER client first message"):
        _server().evaluate_response(message)
