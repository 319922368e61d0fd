"""AclControlManager as Kafka's AclControlManagerTest has it: validation messages,
creation and deletion results, records replayed, deletion deduplicated; plus the
request-path checks (cluster name, empty name, principal form) and the MATCH filter."""

from __future__ import annotations

import random

import pytest

from tiercel.protocol.errors import ErrorCode, InvalidRequestError
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
)
from tiercel.server.authorizer.acl import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tiercel.server.controller.acl_control_manager import AclControlManager, validate_new_acl
from tiercel.server.metadata.image.acls import StandardAcl

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
ANY_FILTER = AclBindingFilter(1, None, 1, None, None, 1, 1)

TEST_ACLS = [
    StandardAcl(TOPIC, "foo", LITERAL, "User:bob", "*", Op.READ, ALLOW),
    StandardAcl(GROUP, "mygroup", PREFIXED, "User:*", "*", Op.READ, DENY),
    StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "127.0.0.1", Op.WRITE, ALLOW),
]


def replay_all(manager: AclControlManager, records: list) -> None:  # type: ignore[type-arg]
    for record in records:
        message = record.message
        if isinstance(message, AccessControlEntryRecord):
            manager.replay(message)
        else:
            manager.replay_remove(message)


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (
            StandardAcl(TOPIC, "foo", 0, "User:a", "*", Op.READ, ALLOW),
            "Invalid patternType UNKNOWN",
        ),
        (StandardAcl(TOPIC, "foo", 2, "User:a", "*", Op.READ, ALLOW), "Invalid patternType MATCH"),
        (
            StandardAcl(0, "foo", LITERAL, "User:a", "*", Op.READ, ALLOW),
            "Invalid resourceType UNKNOWN",
        ),
        (StandardAcl(1, "foo", LITERAL, "User:a", "*", Op.READ, ALLOW), "Invalid resourceType ANY"),
        (StandardAcl(TOPIC, "foo", LITERAL, "User:a", "*", 0, ALLOW), "Invalid operation UNKNOWN"),
        (StandardAcl(TOPIC, "foo", LITERAL, "User:a", "*", 1, ALLOW), "Invalid operation ANY"),
        (
            StandardAcl(TOPIC, "foo", LITERAL, "User:a", "*", Op.READ, 0),
            "Invalid permissionType UNKNOWN",
        ),
        (
            StandardAcl(TOPIC, "foo", LITERAL, "User:a", "*", Op.READ, 1),
            "Invalid permissionType ANY",
        ),
        (
            StandardAcl(TOPIC, "", PREFIXED, "User:a", "*", Op.READ, ALLOW),
            "Invalid empty resource name",
        ),
        (
            StandardAcl(ResourceType.CLUSTER, "c", LITERAL, "User:a", "*", Op.ALTER, ALLOW),
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (
            StandardAcl(TOPIC, "foo", LITERAL, "alice", "*", Op.READ, ALLOW),
            "expected a string in format principalType:principalName but got alice",
        ),
    ],
)
def test_validate_new_acl(binding: StandardAcl, message: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        validate_new_acl(binding)
    assert refused.value.message == message


def test_create_acl_delete_acl() -> None:
    manager = AclControlManager(random.Random(1))
    bad = StandardAcl(TOPIC, "*", 0, "User:*", "*", Op.ALTER, ALLOW)
    created = manager.create_acls([*TEST_ACLS, bad])
    assert created.response[:3] == [None, None, None]
    error = created.response[3]
    assert error is not None and error.error_code == ErrorCode.invalid_request
    assert len(created.records) == 3
    replay_all(manager, list(created.records))
    assert sorted(manager.id_to_acl.values(), key=repr) == sorted(TEST_ACLS, key=repr)
    # Creating what exists succeeds without a record.
    again = manager.create_acls([TEST_ACLS[0]])
    assert again.response == [None] and not again.records

    deleted = manager.delete_acls(
        [
            AclBindingFilter(ResourceType.ANY, None, LITERAL, None, None, 1, 1),
            AclBindingFilter(ResourceType.UNKNOWN, None, LITERAL, None, None, 1, 1),
        ]
    )
    first, second = deleted.response
    assert first.error is None and set(first.deleted) == {TEST_ACLS[0], TEST_ACLS[2]}
    assert second.error is not None and second.error.message == "Unknown patternFilter."
    replay_all(manager, list(deleted.records))
    assert list(manager.id_to_acl.values()) == [TEST_ACLS[1]]


def test_delete_dedupe() -> None:
    manager = AclControlManager(random.Random(2))
    binding = StandardAcl(TOPIC, "topic-1", LITERAL, "User:user", "10.0.0.1", Op.ALL, ALLOW)
    created = manager.create_acls([binding])
    replay_all(manager, list(created.records))
    [record] = created.records
    assert isinstance(record.message, AccessControlEntryRecord)
    exact = AclBindingFilter(*[getattr(binding, f) for f in binding.__slots__])
    result = manager.delete_acls([ANY_FILTER, exact])
    assert [r.message for r in result.records] == [
        RemoveAccessControlEntryRecord(id=record.message.id)
    ]
    assert [r.deleted for r in result.response] == [(binding,), (binding,)]


def test_match_filter_finds_the_acls_that_apply_to_a_resource() -> None:
    acls = [
        StandardAcl(TOPIC, "orders", LITERAL, "User:a", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "*", LITERAL, "User:a", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "ord", PREFIXED, "User:a", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "orders-eu", LITERAL, "User:a", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "pay", PREFIXED, "User:a", "*", Op.READ, ALLOW),
    ]
    match = AclBindingFilter(TOPIC, "orders", PatternType.MATCH, None, None, 1, 1)
    assert [a for a in acls if match.matches(a)] == acls[:3]
    prefixed_only = AclBindingFilter(TOPIC, "ord", PREFIXED, None, None, 1, 1)
    assert [a for a in acls if prefixed_only.matches(a)] == [acls[2]]
    by_principal = AclBindingFilter(1, None, 1, "User:b", None, 1, 1)
    assert not [a for a in acls if by_principal.matches(a)]
