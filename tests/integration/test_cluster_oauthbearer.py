"""A three-node KRaft cluster whose brokers log in to each other with SASL/OAUTHBEARER.

The inter-broker listener INTERNAL is SASL_PLAINTEXT with
`sasl.mechanism.inter.broker.protocol=OAUTHBEARER`: each broker's JAAS entry both
validates tokens (requiring the scope `cluster`) and makes its own from
`unsecuredLoginStringClaim_sub` and `unsecuredLoginListClaim_scope`, as Kafka's
OAuthBearerLoginModule does. Replica fetching logs in before its first request, since
INTERNAL serves nothing else; a consumer logs in as alice with librdkafka's unsecured
token on another broker's INTERNAL listener.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer

from support.clients import consume_values
from support.cluster import ClusterProcess

_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="broker" unsecuredLoginListClaim_scope=",cluster" '
    'unsecuredValidatorRequiredScope="cluster";'
)


def test_replication_over_oauthbearer_between_brokers(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    cluster = cluster_factory(
        overrides={
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
            "listener.name.internal.oauthbearer.sasl.jaas.config": _JAAS,
        },
        extra_listeners=["INTERNAL://127.0.0.1:0"],
    )
    cluster.create_topic("oauth", 3, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap([1]), "acks": "all"})
    for i in range(300):
        producer.produce("oauth", f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0

    values = consume_values(
        cluster.brokers[2].listener_address("INTERNAL"),
        "oauth",
        300,
        "oauth",
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=alice scope=cluster",
        },
        timeout_s=30,
    )
    assert values == {f"v{i}".encode() for i in range(300)}
    # acks=all over three replicas: the followers fetched over INTERNAL, logged in with
    # their own tokens, and hold identical copies.
    for partition in range(3):
        cluster.wait_until_isr("oauth", partition, [1, 2, 3])
        assert cluster.assert_replicas_identical_below_hw("oauth", partition) == 100
    for broker in cluster.brokers.values():
        assert "sasl_authentication_failed" not in broker.log_text()
