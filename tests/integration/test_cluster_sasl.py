"""A three-node KRaft cluster whose brokers log in to each other with SASL/PLAIN over TLS.

The inter-broker listener INTERNAL is SASL_SSL, as a Kafka cluster with
`listener.security.protocol.map=...,INTERNAL:SASL_SSL`,
`sasl.mechanism.inter.broker.protocol=PLAIN` and the brokers' own `username`/`password`
in the listener's JAAS config: replica fetching, the transaction markers and
AddPartitionsToTxn all log in before their first request, since INTERNAL serves nothing
else. The controllers stay on SSL. Clients produce on the PLAINTEXT listener; a
read_committed consumer logs in as alice on INTERNAL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from support.certs import make_pki
from support.clients import consume_values
from support.cluster import ClusterProcess

_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" '
    'user_broker="broker-secret" user_alice="alice-secret";'
)


def test_replication_and_transactions_over_sasl_ssl(
    cluster_factory: Callable[..., ClusterProcess], tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = cluster_factory(
        overrides={
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SSL"
            ),
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki.broker.keystore_pem,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki.ca_pem,
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": _JAAS,
        },
        extra_listeners=["INTERNAL://127.0.0.1:0"],
    )
    cluster.create_topic("sasl", 3, replication_factor=3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap([1]),
            "acks": "all",
            "transactional.id": "sasl-txn",
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(300):
        producer.produce("sasl", f"v{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)

    node = cluster.brokers[2]
    values = consume_values(
        node.listener_address("INTERNAL"),
        "sasl",
        300,
        "sasl",
        {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca_pem),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "isolation.level": "read_committed",
        },
        timeout_s=30,
    )
    assert values == {f"v{i}".encode() for i in range(300)}
    # Every record was read under read_committed, so the markers the coordinator sent
    # over INTERNAL are in; the followers, fetching over INTERNAL, hold identical copies.
    for partition in range(3):
        cluster.wait_until_isr("sasl", partition, [1, 2, 3])
        assert cluster.assert_replicas_identical_below_hw("sasl", partition) == 101
    for broker in cluster.brokers.values():
        assert "sasl_authentication_failed" not in broker.log_text()
