"""ACLs on a three-node KRaft cluster: brokers log in to each other as User:broker (a
super user) over a SASL_PLAINTEXT inter-broker listener, so replication, the
controller's forwarding and the coordinators keep working under StandardAuthorizer;
an ACL created through one broker is enforced by every other within seconds.

The controller listeners stay PLAINTEXT (User:ANONYMOUS, hence a super user too, as
Kafka needs for a PLAINTEXT controller listener under an authorizer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from support.broker import BrokerProcess
from support.cluster import ClusterProcess
from tiercel.config.sasl_config import SaslLogin
from tiercel.server.replication.broker_client import BrokerClient

_JAAS: Final = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
_DESCRIBE_ANY: Final = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}


def internal(node: BrokerProcess) -> str:
    return node.listener_address("INTERNAL")


def as_user(address: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def acls_seen_by(address: str) -> int:
    """How many ACLs the broker at ``address`` answers DescribeAcls with (its own
    authorizer's view), asked as admin."""

    async def ask() -> int:
        host, port = address.split(":")
        client = BrokerClient(
            0,
            lambda: (host, int(port)),
            "acl-tests",
            10.0,
            sasl_login=SaslLogin("PLAIN", "admin", "admin-secret"),
        )
        try:
            _, response = await client.request(29, (3, 3), _DESCRIBE_ANY)
        finally:
            client.close()
        assert response.error_code == 0
        return sum(len(r.acls) for r in response.resources)

    return asyncio.run(ask())


def produce_error(address: str, user: str, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer(
        {**as_user(address, user), "acks": "all", "message.timeout.ms": 10000, "retries": 0}
    )
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1
    return errors[0]


def test_an_acl_created_through_one_broker_is_enforced_by_the_others(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    cluster = cluster_factory(
        overrides={
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": _JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:broker;User:admin;User:ANONYMOUS",
        },
        extra_listeners=["INTERNAL://127.0.0.1:0"],
    )
    cluster.create_topic("guarded", 3, replication_factor=3)
    addresses = {n: internal(b) for n, b in cluster.brokers.items()}
    error = produce_error(addresses[3], "alice", "guarded")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error

    admin = AdminClient(as_user(addresses[1], "admin"))
    granted = AclBinding(
        ResourceType.TOPIC,
        "guarded",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([granted], request_timeout=30).values():
        future.result(30)
    deadline = time.monotonic() + 20
    while not all(acls_seen_by(a) == 1 for a in addresses.values()):
        assert time.monotonic() < deadline, "the ACL did not reach every broker"
        time.sleep(0.2)

    # One record per partition, each appended by that partition's leader (the three are
    # spread over the brokers), through a bootstrap on broker 3 only.
    producer = Producer({**as_user(addresses[3], "alice"), "acks": "all"})
    delivered: list[KafkaError | None] = []
    for partition in range(3):
        producer.produce(
            "guarded", b"v", partition=partition, on_delivery=lambda e, _m: delivered.append(e)
        )
    assert producer.flush(30) == 0
    assert delivered == [None, None, None], delivered
    # Followers replicate as User:broker, a super user: every ISR stays whole.
    for partition in range(3):
        cluster.wait_until_isr("guarded", partition, [1, 2, 3])
