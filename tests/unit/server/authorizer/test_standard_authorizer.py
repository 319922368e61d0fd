"""StandardAuthorizer's decisions, case for case as Kafka's StandardAuthorizerTest
(testFindResultImplication, testFindResultPrincipalMatching, testListAcls,
testSimpleAuthorizations, testDenyPrecedenceWithOperationAll,
testTopicAclWithOperationAll, testHostAddressAclValidation,
testAuthorizationWithManyAcls, testPrefixAcls, the allow.everyone.if.no.acl.found and
super.users ones) and Authorizer.authorizeByResourceType's rules (AuthorizerTest)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.server.authorizer.acl import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tiercel.server.authorizer.auth_helper import client_host
from tiercel.server.authorizer.authorizer import StandardAuthorizer, load_authorizer
from tiercel.server.metadata.image.acls import StandardAcl

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
LOCALHOST = "127.0.0.1"


def acl(
    resource_type: ResourceType,
    name: str,
    pattern: PatternType,
    principal: str,
    host: str,
    operation: AclOperation,
    permission: AclPermissionType,
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(
    acls: Sequence[StandardAcl],
    super_users: str = "User:superman",
    allow_everyone: bool = False,
) -> StandardAuthorizer:
    result = StandardAuthorizer()
    result.configure({"super.users": super_users, "allow.everyone.if.no.acl.found": allow_everyone})
    result.update_acls({uuid.uuid4(): a for a in acls})
    return result


def decide(
    auth: StandardAuthorizer,
    user: str,
    actions: Sequence[tuple[AclOperation, ResourceType, str]],
    host: str = LOCALHOST,
) -> list[bool]:
    return [auth.authorize(f"User:{user}", host, op, rt, name) for op, rt, name in actions]


def foo_acl(op: AclOperation, permission: AclPermissionType) -> StandardAcl:
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, permission)


def bar_acl(op: AclOperation, permission: AclPermissionType) -> StandardAcl:
    return acl(GROUP, "bar", LITERAL, "User:*", "*", op, permission)


@pytest.mark.parametrize("op", [Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_allow_of_read_write_delete_alter_implies_describe(op: AclOperation) -> None:
    assert decide(authorizer([foo_acl(op, ALLOW)]), "bob", [(Op.DESCRIBE, TOPIC, "foo_bar")]) == [
        True
    ]


def test_create_does_not_imply_describe() -> None:
    auth = authorizer([foo_acl(Op.CREATE, ALLOW)])
    assert decide(auth, "bob", [(Op.DESCRIBE, TOPIC, "foo_bar")]) == [False]


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_a_deny_implies_nothing(op: AclOperation) -> None:
    # The DENY does not speak for DESCRIBE: with an ALLOW of DESCRIBE beside it, allowed.
    auth = authorizer([foo_acl(op, DENY), foo_acl(Op.DESCRIBE, ALLOW)])
    assert decide(auth, "bob", [(Op.DESCRIBE, TOPIC, "foo_bar"), (op, TOPIC, "foo_bar")]) == [
        True,
        False,
    ]


def test_describe_configs_implied_by_alter_configs_and_not_by_its_deny() -> None:
    for op in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        auth = authorizer([foo_acl(op, ALLOW)])
        assert decide(auth, "bob", [(Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")]) == [True]
    auth = authorizer([foo_acl(Op.ALTER_CONFIGS, DENY), foo_acl(Op.DESCRIBE_CONFIGS, ALLOW)])
    assert decide(
        auth, "bob", [(Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar"), (Op.ALTER_CONFIGS, TOPIC, "foo_")]
    ) == [True, False]


def test_principal_matching() -> None:
    auth = authorizer([foo_acl(Op.READ, ALLOW), bar_acl(Op.READ, DENY)])
    assert decide(auth, "bob", [(Op.READ, TOPIC, "foo_bar")]) == [True]
    assert decide(auth, "alice", [(Op.READ, TOPIC, "foo_bar")]) == [False]
    assert decide(auth, "alice", [(Op.READ, GROUP, "bar")]) == [False]


def test_list_acls() -> None:
    foo = [foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW)]
    bar = [bar_acl(Op.DESCRIBE_CONFIGS, DENY), bar_acl(Op.ALTER_CONFIGS, DENY)]
    auth = authorizer([*foo, *bar])
    any_acl = AclBindingFilter(1, None, 1, None, None, 1, 1)
    assert sorted(auth.acls(any_acl), key=repr) == sorted([*foo, *bar], key=repr)
    topics = AclBindingFilter(TOPIC, None, PatternType.ANY, None, None, 1, 1)
    assert sorted(auth.acls(topics), key=repr) == sorted(foo, key=repr)


def test_simple_authorizations() -> None:
    auth = authorizer(
        [
            foo_acl(Op.READ, ALLOW),
            foo_acl(Op.WRITE, ALLOW),
            bar_acl(Op.DESCRIBE_CONFIGS, ALLOW),
            bar_acl(Op.ALTER_CONFIGS, ALLOW),
        ]
    )
    assert decide(auth, "bob", [(Op.READ, TOPIC, "foo_")]) == [True]
    assert decide(auth, "fred", [(Op.ALTER_CONFIGS, GROUP, "bar")]) == [True]


def test_deny_precedence_with_operation_all() -> None:
    auth = authorizer(
        [
            acl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.ALL, DENY),
            acl(TOPIC, "foo", PREFIXED, "User:alice", "*", Op.READ, ALLOW),
            acl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, DENY),
            acl(TOPIC, "foo", PREFIXED, "User:*", "*", Op.DESCRIBE, ALLOW),
        ]
    )
    assert decide(
        auth,
        "alice",
        [
            (Op.WRITE, TOPIC, "foo"),
            (Op.READ, TOPIC, "foo"),
            (Op.DESCRIBE, TOPIC, "foo"),
            (Op.READ, TOPIC, "foobar"),
        ],
    ) == [False, False, False, True]
    assert decide(
        auth,
        "bob",
        [
            (Op.DESCRIBE, TOPIC, "foo"),
            (Op.READ, TOPIC, "foo"),
            (Op.WRITE, TOPIC, "foo"),
            (Op.DESCRIBE, TOPIC, "foobaz"),
            (Op.READ, TOPIC, "foobaz"),
        ],
    ) == [False, False, False, True, False]


def test_topic_acl_with_operation_all() -> None:
    auth = authorizer(
        [
            acl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, ALLOW),
            acl(TOPIC, "bar", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
            acl(TOPIC, "baz", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
        ]
    )
    assert decide(
        auth,
        "alice",
        [
            (Op.WRITE, TOPIC, "foo"),
            (Op.DESCRIBE_CONFIGS, TOPIC, "bar"),
            (Op.DESCRIBE, TOPIC, "baz"),
        ],
    ) == [True, True, False]
    assert decide(
        auth,
        "bob",
        [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "baz")],
    ) == [True, False, True]
    assert decide(
        auth,
        "malory",
        [(Op.DESCRIBE, TOPIC, "foo"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")],
    ) == [True, False, False]


def test_host_address_acl_validation() -> None:
    host1, host2 = "192.168.1.1", "192.168.1.2"
    auth = authorizer(
        [
            acl(TOPIC, "foo", LITERAL, "User:alice", host1, Op.READ, DENY),
            acl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.READ, ALLOW),
            acl(TOPIC, "bar", LITERAL, "User:bob", host2, Op.READ, ALLOW),
            acl(TOPIC, "bar", LITERAL, "User:*", LOCALHOST, Op.DESCRIBE, ALLOW),
        ]
    )
    actions = [(Op.READ, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "bar")]
    assert decide(auth, "alice", actions, LOCALHOST) == [True, False, True]
    assert decide(auth, "alice", actions, host1) == [False, False, False]
    assert decide(auth, "alice", actions, host2) == [True, False, False]
    assert decide(auth, "bob", actions, LOCALHOST) == [False, False, True]
    assert decide(auth, "bob", actions, host1) == [False, False, False]
    assert decide(auth, "bob", actions, host2) == [False, True, True]


def many_acls() -> list[StandardAcl]:
    return [
        acl(TOPIC, "green2", LITERAL, "User:*", "*", Op.READ, ALLOW),
        acl(TOPIC, "green", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "betamax4", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "betamax", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "beta", PREFIXED, "User:*", "*", Op.READ, ALLOW),
        acl(TOPIC, "alpha", PREFIXED, "User:*", "*", Op.READ, ALLOW),
        acl(TOPIC, "alp", PREFIXED, "User:bob", "*", Op.READ, DENY),
        acl(GROUP, "*", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
        acl(GROUP, "wheel", LITERAL, "User:*", "*", Op.WRITE, DENY),
    ]


def test_authorization_with_many_acls() -> None:
    auth = authorizer(many_acls())
    assert decide(auth, "bob", [(Op.READ, TOPIC, "green1"), (Op.WRITE, GROUP, "wheel")]) == [
        True,
        False,
    ]
    assert decide(
        auth,
        "bob",
        [(Op.READ, TOPIC, "alpha"), (Op.WRITE, GROUP, "arbitrary"), (Op.READ, TOPIC, "ala")],
    ) == [False, True, False]


def test_prefix_acls() -> None:
    auth = authorizer(
        [
            acl(TOPIC, "fooa", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
            acl(TOPIC, "foobar", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
            acl(TOPIC, "f", PREFIXED, "User:bob", "*", Op.ALL, ALLOW),
        ]
    )
    assert decide(
        auth,
        "bob",
        [(Op.WRITE, TOPIC, "foobarr"), (Op.READ, TOPIC, "goobar"), (Op.READ, TOPIC, "fooa")],
    ) == [True, False, True]
    assert decide(
        auth,
        "alice",
        [(Op.DESCRIBE, TOPIC, "fooa"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")],
    ) == [True, False, False]


def test_allow_everyone_if_no_acl_found() -> None:
    acls = [acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", Op.READ, ALLOW)]
    actions = [(Op.READ, TOPIC, "topic1"), (Op.READ, TOPIC, "topic2")]
    # An ACL on topic1 for someone else denies Bob even with the no-ACL default allowing.
    assert decide(authorizer(acls, allow_everyone=True), "Bob", actions) == [False, True]
    assert decide(authorizer(acls, allow_everyone=False), "Bob", actions) == [False, False]


def test_super_users_may_do_anything_whatever_the_acls() -> None:
    auth = authorizer(
        [acl(TOPIC, "*", LITERAL, "User:*", "*", Op.ALL, DENY)],
        super_users=" User:alice ; User:chris ;",
    )
    assert decide(
        auth, "alice", [(Op.WRITE, TOPIC, "t"), (Op.ALTER, CLUSTER, "kafka-cluster")]
    ) == [
        True,
        True,
    ]
    assert decide(auth, "bob", [(Op.WRITE, TOPIC, "t")]) == [False]


def test_acls_replaced_on_update() -> None:
    auth = authorizer([foo_acl(Op.READ, ALLOW)])
    assert decide(auth, "bob", [(Op.READ, TOPIC, "foo_1")]) == [True]
    auth.update_acls({})
    assert decide(auth, "bob", [(Op.READ, TOPIC, "foo_1")]) == [False]


def by_type(auth: StandardAuthorizer, user: str, op: AclOperation = Op.WRITE) -> bool:
    return auth.authorize_by_resource_type(f"User:{user}", LOCALHOST, op, TOPIC)


def test_authorize_by_resource_type() -> None:
    # Kafka's AuthorizerTest cases for the default authorizeByResourceType.
    assert not by_type(authorizer([]), "alice")
    assert by_type(authorizer([], super_users="User:alice"), "alice")
    assert by_type(authorizer([], allow_everyone=True), "alice")
    allowed = acl(TOPIC, "orders", LITERAL, "User:alice", "*", Op.WRITE, ALLOW)
    assert by_type(authorizer([allowed]), "alice")
    assert not by_type(authorizer([allowed]), "alice", Op.READ)
    assert not by_type(authorizer([allowed]), "bob")
    denied_literal = acl(TOPIC, "orders", LITERAL, "User:alice", "*", Op.WRITE, DENY)
    assert not by_type(authorizer([allowed, denied_literal]), "alice")
    denied_prefix = acl(TOPIC, "ord", PREFIXED, "User:*", "*", Op.ALL, DENY)
    assert not by_type(authorizer([allowed, denied_prefix]), "alice")
    other = acl(TOPIC, "payments", PREFIXED, "User:alice", "*", Op.ALL, ALLOW)
    assert by_type(authorizer([allowed, denied_prefix, other]), "alice")
    wildcard_deny = acl(TOPIC, "*", LITERAL, "User:alice", "*", Op.WRITE, DENY)
    assert not by_type(authorizer([other, wildcard_deny]), "alice")
    wildcard_allow = acl(TOPIC, "*", LITERAL, "User:*", "*", Op.WRITE, ALLOW)
    assert by_type(authorizer([denied_prefix, wildcard_allow]), "alice")


def kraft_config(tmp_path: Path, **extra: object) -> BrokerConfig:
    return BrokerConfig(
        {
            "process.roles": "broker,controller",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(tmp_path),
            **extra,
        }
    )


class Recording:
    """A user's own authorizer (authorizer.class.name=module:Class), implementing
    `Authorizer`: it allows everything and remembers its settings."""

    configured: ClassVar[dict[str, object]] = {}

    def configure(self, configs: Mapping[str, object]) -> None:
        Recording.configured = dict(configs)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        return True

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return True

    def acls(self, acl_filter: AclBindingFilter) -> list[StandardAcl]:
        return []

    def update_acls(self, acls: Mapping[uuid.UUID, StandardAcl]) -> None:
        pass


def test_authorizer_class_names(tmp_path: Path) -> None:
    assert load_authorizer(kraft_config(tmp_path)) is None
    for name in (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    ):
        loaded = load_authorizer(kraft_config(tmp_path, **{"authorizer.class.name": name}))
        assert isinstance(loaded, StandardAuthorizer)
    own = load_authorizer(
        kraft_config(
            tmp_path,
            **{"authorizer.class.name": f"{__name__}:Recording", "super.users": "User:admin"},
        )
    )
    assert isinstance(own, Recording)
    assert Recording.configured["super.users"] == "User:admin"
    assert Recording.configured["node.id"] == 1
    with pytest.raises(ConfigError, match="is not supported"):
        load_authorizer(kraft_config(tmp_path, **{"authorizer.class.name": "com.example.Mine"}))
    with pytest.raises(ConfigError, match="cannot load it"):
        load_authorizer(kraft_config(tmp_path, **{"authorizer.class.name": "no_such:Thing"}))
    with pytest.raises(ConfigError, match=r"super\.users"):
        load_authorizer(
            kraft_config(
                tmp_path,
                **{
                    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                    "super.users": "admin",
                },
            )
        )


def test_a_node_without_process_roles_refuses_an_authorizer(tmp_path: Path) -> None:
    config = BrokerConfig(
        {
            "log.dirs": str(tmp_path),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        }
    )
    with pytest.raises(ConfigError, match=r"process.roles=broker,controller"):
        load_authorizer(config)


@pytest.mark.parametrize(
    ("client_address", "host"),
    [
        ("10.0.0.7:51234", "10.0.0.7"),
        ("::1:51234", "0:0:0:0:0:0:0:1"),
        ("2001:db8::ab:9092", "2001:db8:0:0:0:0:0:ab"),
        ("fe80::1%eth0:9092", "fe80:0:0:0:0:0:0:1"),
    ],
)
def test_client_host_is_written_as_java_writes_it(client_address: str, host: str) -> None:
    assert client_host(client_address) == host


def test_an_ipv6_acl_host_matches_java_s_form() -> None:
    auth = authorizer([acl(TOPIC, "t", LITERAL, "User:a", "0:0:0:0:0:0:0:1", Op.READ, ALLOW)])
    host = client_host("::1:40000")
    assert auth.authorize("User:a", host, Op.READ, TOPIC, "t")
