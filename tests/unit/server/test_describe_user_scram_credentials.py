"""DescribeUserScramCredentials from the broker's credentials, as Kafka's
ScramImage.describe: every user when none is named, mechanisms and iterations only,
RESOURCE_NOT_FOUND and DUPLICATE_RESOURCE with Kafka's messages."""

from __future__ import annotations

import asyncio
from types import MappingProxyType, SimpleNamespace
from typing import Any, cast

from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)

from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.sasl.scram_credential import ScramCredentialData
from tiercel.server.handlers import describe_user_scram_credentials
from tiercel.server.metadata.image.scram import ScramImage
from tiercel.server.network.credential_cache import CredentialCache
from tiercel.server.request_context import RequestContext


def _describe(users: tuple[str, ...] | None) -> dict[str, Any]:
    cache = CredentialCache()
    credential = ScramCredentialData(b"salt", b"stored", b"server", 4096)
    strong = ScramCredentialData(b"salt", b"stored", b"server", 8192)
    cache.update(
        ScramImage(
            MappingProxyType(
                {
                    1: MappingProxyType({"alice": credential, "bob": credential}),
                    2: MappingProxyType({"alice": strong}),
                }
            )
        )
    )
    ctx = cast(
        RequestContext,
        SimpleNamespace(broker=SimpleNamespace(credential_cache=cache), authorizer=None),
    )
    request = DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(UserName(name=u) for u in users)
    )
    response = asyncio.run(describe_user_scram_credentials.handle(ctx, request))
    assert response["error_code"] == ErrorCode.none
    return {r["user"]: r for r in response["results"]}


def test_every_user_when_none_is_named() -> None:
    for users in (None, ()):
        results = _describe(users)
        assert set(results) == {"alice", "bob"}
        assert results["alice"]["credential_infos"] == [
            {"mechanism": 1, "iterations": 4096},
            {"mechanism": 2, "iterations": 8192},
        ]
        assert results["bob"]["credential_infos"] == [{"mechanism": 1, "iterations": 4096}]


def test_unknown_and_duplicate_users() -> None:
    results = _describe(("bob", "carol", "alice", "alice"))
    assert (results["bob"]["error_code"], results["bob"]["error_message"]) == (ErrorCode.none, None)
    assert results["carol"]["error_code"] == ErrorCode.resource_not_found
    assert results["carol"]["error_message"] == (
        "Attempt to describe a user credential that does not exist: carol"
    )
    assert results["alice"]["error_code"] == ErrorCode.duplicate_resource
    assert results["alice"]["error_message"] == (
        "Cannot describe SCRAM credentials for the same user twice in a single request: alice"
    )
    assert results["alice"]["credential_infos"] == []
