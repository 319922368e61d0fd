"""ACLs end to end on one combined KRaft node (process.roles=broker,controller) with
StandardAuthorizer: a SASL_PLAINTEXT listener (CLIENT) where admin (a super user), alice and bob
(no rights of their own) log in with PLAIN, driven by confluent-kafka's AdminClient,
Producer and Consumer. Each API family: the user without the permission gets Kafka's
error, the same user succeeds once an ACL grants it, without a restart.

The PLAINTEXT listeners (between brokers, and the controller's) are User:ANONYMOUS,
which is therefore a super user here, as Kafka needs for PLAINTEXT inter-broker and
controller listeners under an authorizer.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from support.broker import TIERCEL, BrokerProcess
from support.kraft import controller_ports, kraft_node
from support.kraft import request as kraft_request
from tiercel.config.sasl_config import SaslLogin
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.replication.broker_client import BrokerClient

_PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
_JAAS: Final = (
    f'{_PLAIN_MODULE} required user_admin="admin-secret" user_alice="alice-secret" '
    'user_bob="bob-secret" user_carol="carol-secret";'
)
_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Long enough for a metadata record to reach the broker's authorizer on a loaded machine.
_GRANT_TIMEOUT_S: Final = 20.0


def acl_node(root: Path, overrides: dict[str, object] | None = None) -> BrokerProcess:
    """A formatted combined KRaft node with the SASL_PLAINTEXT listener and the
    authorizer (not started)."""
    return kraft_node(
        root,
        1,
        controller_ports([1]),
        overrides={
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.client.plain.sasl.jaas.config": _JAAS,
            "authorizer.class.name": _AUTHORIZER,
            "super.users": "User:admin;User:ANONYMOUS",
            "offsets.topic.replication.factor": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            **(overrides or {}),
        },
        extra_listeners=["CLIENT://127.0.0.1:0"],
    )


def sasl_bootstrap(node: BrokerProcess) -> str:
    return node.listener_address("CLIENT")


def client_config(node: BrokerProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": sasl_bootstrap(node),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    started = acl_node(tmp_path_factory.mktemp("acls")).start(60)
    yield started
    started.kill()


def request_as(
    node: BrokerProcess, user: str, api_key: int, versions: tuple[int, int], body: Any
) -> Any:
    """One request sent by ``user`` logged in with PLAIN (for what librdkafka does not
    surface: it drops DescribeAcls' top-level error); the kio response."""

    async def ask() -> Any:
        host, port = sasl_bootstrap(node).split(":")
        client = BrokerClient(
            1,
            lambda: (host, int(port)),
            "acl-tests",
            20.0,
            sasl_login=SaslLogin("PLAIN", user, f"{user}-secret"),
        )
        try:
            _, response = await client.request(api_key, versions, body)
        finally:
            client.close()
        return response

    return asyncio.run(ask())


def admin_of(node: BrokerProcess, user: str = "admin") -> AdminClient:
    return AdminClient(client_config(node, user))


def allow(
    principal: str,
    operation: AclOperation,
    resource_type: ResourceType = ResourceType.TOPIC,
    name: str = "*",
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def create_acls(node: BrokerProcess, bindings: list[AclBinding]) -> None:
    admin = admin_of(node)  # alive until the results are in
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(30)


def delete_acls(node: BrokerProcess, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
    admin = admin_of(node)
    futures = admin.delete_acls(filters, request_timeout=30)
    return [futures[f].result(30) for f in filters]


def create_topic(node: BrokerProcess, name: str, partitions: int = 1) -> None:
    admin = admin_of(node)
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30)[name].result(30)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(check: Callable[[], bool], timeout_s: float = _GRANT_TIMEOUT_S) -> None:
    """Until ``check`` holds (an ACL has reached the broker's authorizer)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def produce_error(node: BrokerProcess, user: str, topic: str) -> KafkaError | None:
    """The delivery error of one record produced as ``user`` (None: delivered)."""
    errors: list[KafkaError | None] = []
    producer = Producer(
        {
            **client_config(node, user),
            "acks": "all",
            "enable.idempotence": False,
            "message.timeout.ms": 10000,
            "retries": 0,
        }
    )
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1
    return errors[0]


def any_topic_acl(name: str) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def test_create_describe_delete_acls(node: BrokerProcess) -> None:
    topic = unique("orders")
    prefix = topic[:8]
    bindings = [
        allow("User:alice", AclOperation.READ, name=topic),
        allow("User:bob", AclOperation.WRITE, name=prefix, pattern=ResourcePatternType.PREFIXED),
    ]
    create_acls(node, bindings)
    admin = admin_of(node)
    # The MATCH filter finds the literal ACL and the prefixed one that applies.
    eventually(
        lambda: len(admin.describe_acls(any_topic_acl(topic), request_timeout=30).result(30)) == 2
    )
    described = admin.describe_acls(any_topic_acl(topic), request_timeout=30).result(30)
    assert sorted(described, key=str) == sorted(bindings, key=str)
    deleted = delete_acls(
        node,
        [
            AclBindingFilter(
                ResourceType.ANY,
                prefix,
                ResourcePatternType.ANY,
                "User:bob",
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ],
    )
    assert deleted == [[bindings[1]]]
    eventually(
        lambda: (
            admin.describe_acls(any_topic_acl(topic), request_timeout=30).result(30)
            == [bindings[0]]
        )
    )


def test_produce_needs_write_on_the_topic(node: BrokerProcess) -> None:
    topic = unique("produce")
    create_topic(node, topic)
    create_acls(node, [allow("User:alice", AclOperation.DESCRIBE, name=topic)])
    error = produce_error(node, "alice", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(node, [allow("User:alice", AclOperation.WRITE, name=topic)])
    eventually(lambda: produce_error(node, "alice", topic) is None)


def test_fetch_needs_read_on_the_topic(node: BrokerProcess) -> None:
    topic, group = unique("fetch"), unique("group")
    create_topic(node, topic)
    assert produce_error(node, "admin", topic) is None
    # librdkafka's consumer finds its group's coordinator even when assigned: the group
    # is granted, the topic only described.
    create_acls(
        node,
        [
            allow("User:bob", AclOperation.DESCRIBE, name=topic),
            allow("User:bob", AclOperation.READ, ResourceType.GROUP, group),
        ],
    )
    consumer = Consumer(
        {**client_config(node, "bob"), "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = None
        deadline = time.monotonic() + 20
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is not None
        assert message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    create_acls(node, [allow("User:bob", AclOperation.READ, name=topic)])

    def reads() -> bool:
        consumer = Consumer(
            {**client_config(node, "bob"), "group.id": group, "enable.auto.commit": False}
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None:
                    return message.error() is None and message.value() == b"v"
            return False
        finally:
            consumer.close()

    eventually(reads)


def test_metadata_hides_topics_without_describe(node: BrokerProcess) -> None:
    topic = unique("hidden")
    create_topic(node, topic)
    alice = admin_of(node, "alice")
    assert topic not in alice.list_topics(timeout=20).topics
    create_acls(node, [allow("User:alice", AclOperation.DESCRIBE, name=topic)])
    eventually(lambda: topic in alice.list_topics(timeout=20).topics)


def test_acl_requests_need_alter_and_describe_on_the_cluster(node: BrokerProcess) -> None:
    alice = admin_of(node, "alice")
    futures = alice.create_acls([allow("User:alice", AclOperation.ALL)], request_timeout=30)
    with pytest.raises(KafkaException) as refused:
        next(iter(futures.values())).result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    describe_any = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    refused_describe = request_as(node, "alice", 29, (3, 3), describe_any)
    assert refused_describe.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert refused_describe.resources == ()
    assert request_as(node, "admin", 29, (3, 3), describe_any).error_code == 0


def test_scram_user_management_needs_alter_and_describe_on_the_cluster(
    node: BrokerProcess,
) -> None:
    """AlterUserScramCredentials needs ALTER on the cluster (ControllerApis, through the
    forwarding broker's Envelope with carol's principal), DescribeUserScramCredentials
    DESCRIBE (KafkaApis.handleDescribeUserScramCredentialsRequest)."""
    carol = admin_of(node, "carol")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion("dave", info, b"dave-secret")

    def alter_error() -> KafkaError | None:
        try:
            carol.alter_user_scram_credentials([upsert], request_timeout=30)["dave"].result(30)
        except KafkaException as e:
            error: KafkaError = e.args[0]
            return error
        return None

    def described() -> Any:
        return carol.describe_user_scram_credentials(["dave"], request_timeout=30)["dave"].result(
            30
        )

    refused = alter_error()
    assert refused is not None and refused.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The refused describe is read off the wire: confluent-kafka 2.x aborted the test
    # process after this refusal (Kafka's answer: a result per named user, no user name).
    not_described = request_as(node, "carol", 50, (0, 0), {"users": [{"name": "dave"}]})
    assert not_described.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert [(r.user, r.error_code) for r in not_described.results] == [
        ("", KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    ]
    create_acls(
        node,
        [
            allow("User:carol", operation, ResourceType.BROKER, "kafka-cluster")
            for operation in (AclOperation.ALTER, AclOperation.DESCRIBE)
        ],
    )
    eventually(lambda: alter_error() is None)
    eventually(
        lambda: (
            [i.mechanism for i in described().scram_credential_infos]
            == [ScramMechanism.SCRAM_SHA_256]
        )
    )


def consume_one(node: BrokerProcess, user: str, topic: str, group: str) -> KafkaError | None:
    """Subscribe as ``user`` in ``group``, read one record and commit it: the first
    error met, None once the record is read and its offset committed."""
    consumer = Consumer(
        {
            **client_config(node, user),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                error: KafkaError = message.error()
                return error
            consumer.commit(message, asynchronous=False)
            return None
        raise AssertionError("nothing consumed and no error")
    except KafkaException as e:
        failed: KafkaError = e.args[0]
        return failed
    finally:
        consumer.close()


def test_consumer_group_needs_read_on_the_group(node: BrokerProcess) -> None:
    topic, group = unique("grouped"), unique("members")
    create_topic(node, topic)
    assert produce_error(node, "admin", topic) is None
    create_acls(node, [allow("User:bob", AclOperation.READ, name=topic)])
    error = consume_one(node, "bob", topic, group)
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    create_acls(node, [allow("User:bob", AclOperation.READ, ResourceType.GROUP, group)])
    eventually(lambda: consume_one(node, "bob", topic, group) is None)
    # The committed offset is there for bob, who may DESCRIBE the group (READ implies it).
    bob = admin_of(node, "bob")
    [listed] = bob.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])], request_timeout=30
    ).values()
    assert [p.offset for p in listed.result(30).topic_partitions] == [1]
    # alice, without rights on the group, sees neither it nor its offsets.
    alice = admin_of(node, "alice")
    listing = alice.list_consumer_groups(request_timeout=30).result(30)
    assert group not in {g.group_id for g in listing.valid}
    admin = admin_of(node)
    assert group in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    [denied] = alice.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])], request_timeout=30
    ).values()
    with pytest.raises(KafkaException) as refused:
        denied.result(30)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_list_offsets_needs_describe_on_the_topic(node: BrokerProcess) -> None:
    # librdkafka asks Metadata first, which hides the topic already: ListOffsets is sent
    # as it is, to see its own answer.
    topic = unique("offsets")
    create_topic(node, topic)
    assert produce_error(node, "admin", topic) is None
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }

    def latest() -> tuple[int, int]:
        [answer] = request_as(node, "alice", 2, (7, 7), body).topics
        [partition] = answer.partitions
        return partition.error_code, partition.offset

    assert latest() == (KafkaError.TOPIC_AUTHORIZATION_FAILED, -1)
    create_acls(node, [allow("User:alice", AclOperation.DESCRIBE, name=topic)])
    eventually(lambda: latest() == (0, 1))


def test_deny_wins_over_allow(node: BrokerProcess) -> None:
    topic = unique("denied")
    create_topic(node, topic)
    create_acls(
        node,
        [
            allow("User:*", AclOperation.ALL, name=topic),
            allow("User:bob", AclOperation.WRITE, name=topic, permission=AclPermissionType.DENY),
        ],
    )
    eventually(lambda: produce_error(node, "alice", topic) is None)
    error = produce_error(node, "bob", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_prefixed_acl_covers_the_topics_it_starts(node: BrokerProcess) -> None:
    prefix = unique("pfx")
    inside, outside = f"{prefix}-orders", unique("other")
    create_topic(node, inside)
    create_topic(node, outside)
    create_acls(
        node,
        [
            allow(
                "User:alice", AclOperation.WRITE, name=prefix, pattern=ResourcePatternType.PREFIXED
            )
        ],
    )
    eventually(lambda: produce_error(node, "alice", inside) is None)
    error = produce_error(node, "alice", outside)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def create_topic_error(node: BrokerProcess, user: str, name: str) -> KafkaError | None:
    admin = admin_of(node, user)
    future = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name]
    try:
        future.result(30)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


def test_topic_admin_needs_create_delete_alter(node: BrokerProcess) -> None:
    """CreateTopics, CreatePartitions, IncrementalAlterConfigs and DeleteTopics go through the
    broker to the controller with alice's principal, which authorizes them."""
    topic = unique("admin")
    error = create_topic_error(node, "alice", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(node, [allow("User:alice", AclOperation.CREATE, name=topic)])
    eventually(lambda: create_topic_error(node, "alice", topic) is None)
    alice = admin_of(node, "alice")

    def partitions_error() -> KafkaError | None:
        future = alice.create_partitions([NewPartitions(topic, 2)], request_timeout=30)[topic]
        try:
            future.result(30)
        except KafkaException as e:
            failed: KafkaError = e.args[0]
            return failed
        return None

    error = partitions_error()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as refused:
        alice.incremental_alter_configs([resource], request_timeout=30)[resource].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        alice.delete_topics([topic], request_timeout=30)[topic].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(
        node,
        [
            allow("User:alice", AclOperation.ALTER, name=topic),
            allow("User:alice", AclOperation.ALTER_CONFIGS, name=topic),
            allow("User:alice", AclOperation.DELETE, name=topic),
        ],
    )
    eventually(lambda: partitions_error() is None)
    alice.incremental_alter_configs([resource], request_timeout=30)[resource].result(30)
    alice.delete_topics([topic], request_timeout=30)[topic].result(30)


def test_describe_configs_needs_describe_configs(node: BrokerProcess) -> None:
    topic = unique("configs")
    create_topic(node, topic)
    bob = admin_of(node, "bob")
    resource = ConfigResource(ResourceType.TOPIC, topic)
    with pytest.raises(KafkaException) as refused:
        bob.describe_configs([resource], request_timeout=30)[resource].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    create_acls(node, [allow("User:bob", AclOperation.ALTER_CONFIGS, name=topic)])

    def described() -> bool:
        try:
            configs = bob.describe_configs([resource], request_timeout=30)[resource].result(30)
        except KafkaException:
            return False
        return "retention.ms" in configs

    eventually(described)


def test_delete_records_needs_delete_on_the_topic(node: BrokerProcess) -> None:
    topic = unique("records")
    create_topic(node, topic)
    assert produce_error(node, "admin", topic) is None
    alice = admin_of(node, "alice")
    create_acls(node, [allow("User:alice", AclOperation.DESCRIBE, name=topic)])

    def delete_error() -> KafkaError | None:
        tp = TopicPartition(topic, 0, 1)
        try:
            alice.delete_records([tp], request_timeout=30)[tp].result(30)
        except KafkaException as e:
            failed: KafkaError = e.args[0]
            return failed
        return None

    eventually(lambda: (e := delete_error()) is not None and e.code() != KafkaError._NOENT)
    error = delete_error()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(node, [allow("User:alice", AclOperation.DELETE, name=topic)])
    eventually(lambda: delete_error() is None)


def test_idempotent_and_transactional_producers(node: BrokerProcess) -> None:
    """InitProducerId: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic; a transactional one WRITE on its transactional id."""
    topic, txn = unique("txn"), unique("txn-id")
    create_topic(node, topic)
    idempotent = Producer(
        {**client_config(node, "bob"), "enable.idempotence": True, "message.timeout.ms": 10000}
    )
    errors: list[KafkaError | None] = []
    idempotent.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    idempotent.flush(20)
    assert errors and errors[0] is not None
    assert errors[0].code() in (
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    create_acls(node, [allow("User:bob", AclOperation.WRITE, name=topic)])

    def idempotent_delivers() -> bool:
        producer = Producer(
            {
                **client_config(node, "bob"),
                "enable.idempotence": True,
                "message.timeout.ms": 10000,
            }
        )
        delivered: list[KafkaError | None] = []
        producer.produce(topic, b"v", on_delivery=lambda err, _msg: delivered.append(err))
        producer.flush(20)
        return delivered == [None]

    eventually(idempotent_delivers)
    transactional = Producer({**client_config(node, "bob"), "transactional.id": txn})
    with pytest.raises(KafkaException) as refused:
        transactional.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    create_acls(node, [allow("User:bob", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn)])

    def commits() -> bool:
        producer = Producer({**client_config(node, "bob"), "transactional.id": txn})
        try:
            producer.init_transactions(20)
        except KafkaException:
            return False
        producer.begin_transaction()
        producer.produce(topic, b"t")
        producer.commit_transaction(20)
        return True

    eventually(commits)


# librdkafka's tests/0081-admin.c ACL cases (do_test_CreateAcls, do_test_DescribeAcls,
# do_test_DeleteAcls), same bindings, filters and expected results, against a broker
# of version 2.0+ (prefixed patterns and MATCH filters supported).
_TEST1, _TEST2 = "User:test1", "User:test2"


def acl_filter(
    name: str,
    pattern: ResourcePatternType,
    operation: AclOperation = AclOperation.ANY,
) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.TOPIC, name, pattern, None, None, operation, AclPermissionType.ANY
    )


def describe(node: BrokerProcess, acl_filter: AclBindingFilter) -> list[AclBinding]:
    admin = admin_of(node)
    described: list[AclBinding] = admin.describe_acls(acl_filter, request_timeout=10).result(11)
    return described


def test_0081_create_acls(node: BrokerProcess) -> None:
    base = unique("rdkafkatest_do_test_CreateAcls")
    bindings = [
        allow(_TEST1, AclOperation.READ, name=f"{base}_1", pattern=ResourcePatternType.PREFIXED),
        allow(_TEST2, AclOperation.WRITE, name=f"{base}_2"),
    ]
    admin = admin_of(node)
    results = admin.create_acls(bindings, request_timeout=10)
    assert len(results) == 2
    for future in results.values():
        assert future.result(11) is None


def test_0081_describe_acls(node: BrokerProcess) -> None:
    topic = unique("rdkafkatest_do_test_DescribeAcls")
    created = [
        allow(_TEST1, AclOperation.READ, name=topic, pattern=ResourcePatternType.PREFIXED),
        allow(_TEST2, AclOperation.WRITE, name=topic),
    ]
    create_acls(node, created)
    # librdkafka's test sleeps for the ACLs to reach the broker; here, until they have.
    match = acl_filter(topic, ResourcePatternType.MATCH)
    eventually(lambda: len(describe(node, match)) == 2)
    assert sorted(describe(node, match), key=str) == sorted(created, key=str)
    writes = describe(node, acl_filter(topic, ResourcePatternType.LITERAL, AclOperation.WRITE))
    assert writes == [created[1]]


def test_0081_delete_acls(node: BrokerProcess) -> None:
    base = unique("rdkafkatest_do_test_DeleteAcls")
    topic1, topic2 = f"{base}_1", f"{base}_2"
    created = [
        allow(_TEST1, AclOperation.READ, name=topic1, pattern=ResourcePatternType.PREFIXED),
        allow(_TEST2, AclOperation.WRITE, name=topic1),
        allow(_TEST2, AclOperation.WRITE, name=topic2),
    ]
    create_acls(node, created)
    first = acl_filter(topic1, ResourcePatternType.MATCH)
    eventually(lambda: len(describe(node, first)) == 2)
    [deleted] = delete_acls(node, [first])
    assert sorted(deleted, key=str) == sorted(created[:2], key=str)
    eventually(lambda: describe(node, first) == [])
    second = acl_filter(topic2, ResourcePatternType.LITERAL)
    assert delete_acls(node, [second]) == [[created[2]]]
    eventually(lambda: describe(node, second) == [])


def test_a_controller_answers_describe_acls_from_its_own_authorizer(node: BrokerProcess) -> None:
    """What kafka-acls --bootstrap-controller sends; the controller listener is
    PLAINTEXT here, User:ANONYMOUS a super user."""
    topic = unique("controller")
    granted = allow("User:alice", AclOperation.READ, name=topic)
    create_acls(node, [granted])
    port = re.search(r"CONTROLLER://127\.0\.0\.1:(\d+)", str(node.overrides["listeners"]))
    assert port is not None
    body = {
        "resource_type_filter": ResourceType.TOPIC.value,
        "resource_name_filter": topic,
        "pattern_type_filter": ResourcePatternType.LITERAL.value,
        "principal_filter": None,
        "host_filter": None,
        "operation": AclOperation.ANY.value,
        "permission_type": AclPermissionType.ANY.value,
    }

    def described() -> list[tuple[str, str, int]]:
        response = kraft_request(f"127.0.0.1:{port.group(1)}", 29, (3, 3), body)
        return [
            (r.resource_name, a.principal, a.operation) for r in response.resources for a in r.acls
        ]

    eventually(lambda: described() == [(topic, "User:alice", AclOperation.READ.value)])


def test_describe_transactions_leaves_out_topics_not_described(node: BrokerProcess) -> None:
    topic, txn = unique("txn-topic"), unique("txn-described")
    create_topic(node, topic)
    create_acls(
        node, [allow("User:bob", AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn)]
    )
    producer = Producer({**client_config(node, "admin"), "transactional.id": txn})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    assert producer.flush(20) == 0

    def topics_seen_by(user: str) -> list[str] | None:
        """The transaction's topics as ``user`` sees them; None while it may not
        describe the transaction (bob's ACL on its way)."""
        [state] = request_as(
            node, user, 65, (0, 0), {"transactional_ids": [txn]}
        ).transaction_states
        return None if state.error_code else [t.topic for t in state.topics]

    try:
        assert topics_seen_by("admin") == [topic]
        eventually(lambda: topics_seen_by("bob") == [])
        [refused] = request_as(
            node, "alice", 65, (0, 0), {"transactional_ids": [txn]}
        ).transaction_states
        assert refused.error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        producer.abort_transaction(20)


def test_transactional_records_need_write_on_the_transactional_id(node: BrokerProcess) -> None:
    """Produce of transactional records (sent as a client sends them after
    InitProducerId): alice may write the topic but not the transactional id."""
    topic = unique("txn-produce")
    create_topic(node, topic)
    create_acls(node, [allow("User:alice", AclOperation.WRITE, name=topic)])
    batch = build_record_batch(
        [SimpleRecord(None, b"v", timestamp=int(time.time() * 1000))],
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    body = {
        "transactional_id": "not-alices",
        "acks": -1,
        "timeout": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }

    def produced() -> int:
        [answer] = request_as(node, "alice", 0, (9, 9), body).responses
        [partition] = answer.partition_responses
        return int(partition.error_code)

    # The transactional id is checked first, for the whole request: the topic's ACL
    # (in or not yet) does not matter.
    assert produced() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_acls_survive_a_restart(node: BrokerProcess) -> None:
    """The last test on the shared node, which it restarts. The ACLs are records of the
    metadata log, replayed at start by the controller and the broker alike."""
    topic = unique("durable")
    create_topic(node, topic)
    granted = allow("User:alice", AclOperation.WRITE, name=topic)
    create_acls(node, [granted])
    eventually(lambda: produce_error(node, "alice", topic) is None)
    node.restart()
    assert describe(node, acl_filter(topic, ResourcePatternType.MATCH)) == [granted]
    assert produce_error(node, "alice", topic) is None
    error = produce_error(node, "bob", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The controller's authorizer has them too: alice still may not create topics.
    refused = create_topic_error(node, "alice", unique("after-restart"))
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_node_without_process_roles_refuses_an_authorizer(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            str(TIERCEL),
            "broker",
            "--override",
            f"log.dirs={tmp_path / 'logs'}",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"authorizer.class.name={_AUTHORIZER}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "run this node as a KRaft node (process.roles=broker,controller" in result.stderr
