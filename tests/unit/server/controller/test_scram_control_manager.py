"""ScramControlManager: AlterUserScramCredentials' per-user checks and error codes as
Kafka's ScramControlManager (and ScramControlManagerTest), the records it writes, replay
and snapshots."""

from __future__ import annotations

import pytest
from control_manager_support import ManagersContext

from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.metadata.metadata_version import LATEST_PRODUCTION, MetadataVersion
from tiercel.protocol.metadata.security_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.sasl.scram_formatter import ScramMechanism
from tiercel.server.controller.scram_control_manager import (
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserScramResult,
)

SHA_256, SHA_512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def _upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> ScramCredentialUpsertion:
    salted = SHA_256.salted_password("pw", b"salt", 4096)
    return ScramCredentialUpsertion(name, mechanism, iterations, b"salt", salted)


def _alter(
    ctx: ManagersContext,
    deletions: list[ScramCredentialDeletion] = [],  # noqa: B006 - never mutated
    upsertions: list[ScramCredentialUpsertion] = [],  # noqa: B006
    version: MetadataVersion = LATEST_PRODUCTION,
) -> dict[str, tuple[ErrorCode, str | None]]:
    results = ctx.run(ctx.state.scram.alter_credentials(deletions, upsertions, version))
    return {r.user: (r.error_code, r.error_message) for r in results}


def test_upsertion_writes_stored_and_server_keys_never_the_salted_password() -> None:
    ctx = ManagersContext()
    result = ctx.state.scram.alter_credentials([], [_upsert("alice")], LATEST_PRODUCTION)
    assert list(result.response) == [UserScramResult("alice", ErrorCode.none)]
    [record] = [r.message for r in result.records]
    salted = SHA_256.salted_password("pw", b"salt", 4096)
    expected = SHA_256.credential(b"salt", salted, 4096)
    assert record == UserScramCredentialRecord(
        name="alice",
        mechanism=1,
        salt=b"salt",
        stored_key=expected.stored_key,
        server_key=expected.server_key,
        iterations=4096,
    )
    assert salted not in (record.stored_key, record.server_key)


@pytest.mark.parametrize(
    ("upsertion", "error"),
    [
        (_upsert(""), (ErrorCode.unacceptable_credential, "Username must not be empty")),
        (
            _upsert("a", mechanism=3),
            (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ),
        (
            _upsert("a", mechanism=0),
            (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ),
        (_upsert("a", iterations=4095), (ErrorCode.unacceptable_credential, "Too few iterations")),
        (
            _upsert("a", iterations=16385),
            (ErrorCode.unacceptable_credential, "Too many iterations"),
        ),
    ],
)
def test_upsertion_refused(
    upsertion: ScramCredentialUpsertion, error: tuple[ErrorCode, str]
) -> None:
    ctx = ManagersContext()
    result = ctx.state.scram.alter_credentials([], [upsertion], LATEST_PRODUCTION)
    assert result.records == []
    assert [(r.error_code, r.error_message) for r in result.response] == [error]


def test_iteration_bounds_accepted() -> None:
    ctx = ManagersContext()
    results = _alter(ctx, upsertions=[_upsert("a", iterations=4096), _upsert("b", 2, 16384)])
    assert results == {"a": (ErrorCode.none, None), "b": (ErrorCode.none, None)}


def test_deleting_a_missing_credential_is_resource_not_found() -> None:
    ctx = ManagersContext()
    _alter(ctx, upsertions=[_upsert("alice", mechanism=1)])
    results = _alter(ctx, [ScramCredentialDeletion("alice", 2), ScramCredentialDeletion("bob", 1)])
    message = "Attempt to delete a user credential that does not exist"
    assert results == {
        "alice": (ErrorCode.resource_not_found, message),
        "bob": (ErrorCode.resource_not_found, message),
    }


def test_a_user_altered_twice_is_duplicate_resource_and_nothing_is_written() -> None:
    ctx = ManagersContext()
    _alter(ctx, upsertions=[_upsert("alice"), _upsert("bob")])
    result = ctx.state.scram.alter_credentials(
        [ScramCredentialDeletion("alice", 1), ScramCredentialDeletion("bob", 1)],
        [_upsert("alice", mechanism=2), _upsert("carol"), _upsert("carol", mechanism=2)],
        LATEST_PRODUCTION,
    )
    duplicate = (
        ErrorCode.duplicate_resource,
        "A user credential cannot be altered twice in the same request",
    )
    results = {r.user: (r.error_code, r.error_message) for r in result.response}
    assert results == {"alice": duplicate, "carol": duplicate, "bob": (ErrorCode.none, None)}
    assert [r.message for r in result.records] == [
        RemoveUserScramCredentialRecord(name="bob", mechanism=1)
    ]


def test_before_3_5_iv2_scram_is_unsupported_version() -> None:
    ctx = ManagersContext()
    results = _alter(
        ctx,
        [ScramCredentialDeletion("a", 1)],
        [_upsert("b")],
        version=MetadataVersion.IBP_3_5_IV1,
    )
    message = "The current metadata.version does not support SCRAM"
    assert results == {
        "a": (ErrorCode.unsupported_version, message),
        "b": (ErrorCode.unsupported_version, message),
    }


def test_replay_and_snapshot_keep_the_credentials() -> None:
    ctx = ManagersContext()
    _alter(ctx, upsertions=[_upsert("alice"), _upsert("bob", mechanism=2)])
    _alter(ctx, [ScramCredentialDeletion("alice", 1)], [_upsert("carol")])
    records = [r.message for r in ctx.state.scram.records()]
    assert sorted((r.name, r.mechanism) for r in records) == [("bob", 2), ("carol", 1)]
    fresh = ManagersContext()
    fresh.replay(list(ctx.state.records()))
    assert [r.message for r in fresh.state.scram.records()] == records


def test_replaying_a_removal_of_a_missing_credential_fails() -> None:
    ctx = ManagersContext()
    with pytest.raises(RuntimeError, match="Unable to find credential to delete"):
        ctx.state.replay(RemoveUserScramCredentialRecord(name="x", mechanism=1), ctx.offset)
