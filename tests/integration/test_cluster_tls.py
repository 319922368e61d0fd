"""A three-node KRaft cluster whose brokers talk to each other only over TLS.

Every node serves its controller listener (the Raft quorum, broker registrations and
heartbeats) and its inter-broker listener INTERNAL over SSL with client certificates
required, as a Kafka cluster with `listener.security.protocol.map=...,CONTROLLER:SSL,
INTERNAL:SSL` and `ssl.client.auth=required`: the quorum electing a leader, the brokers
registering, the followers reaching a full ISR with byte-identical replicas and a
transactional producer's markers all go through TLS, since no plaintext port serves
those listeners. Clients use the PLAINTEXT listener, and an SSL client the INTERNAL one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from support.certs import make_pki
from support.clients import consume_values
from support.cluster import ClusterProcess


def test_replication_and_the_quorum_over_tls(
    cluster_factory: Callable[..., ClusterProcess], tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = cluster_factory(
        overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki.broker.keystore_pem,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki.ca_pem,
            "ssl.client.auth": "required",
        },
        extra_listeners=["INTERNAL://127.0.0.1:0"],
    )
    cluster.create_topic("tls", 3, replication_factor=3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap([1]),
            "acks": "all",
            "transactional.id": "tls-txn",
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(300):
        producer.produce("tls", f"v{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)

    node = cluster.brokers[2]
    values = consume_values(
        node.listener_address("INTERNAL"),
        "tls",
        300,
        "tls",
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(pki.client.chain_pem),
            "ssl.key.location": str(pki.client.key_pem),
            "isolation.level": "read_committed",
        },
        timeout_s=30,
    )
    assert values == {f"v{i}".encode() for i in range(300)}
    # The read_committed consumer saw every record, so the commit markers (written after
    # EndTxn returned, through the marker sender's TLS connections) are in: the high
    # watermark, which librdkafka's read_committed watermark query reads as the last
    # stable offset, is 100 records and the marker on every partition.
    for partition in range(3):
        cluster.wait_until_isr("tls", partition, [1, 2, 3])
        assert cluster.assert_replicas_identical_below_hw("tls", partition) == 101
