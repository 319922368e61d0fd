"""A three-node KRaft cluster whose brokers log in to each other with SASL/SCRAM-SHA-512
over TLS, as test_cluster_sasl's PLAIN cluster but with the brokers' user made by
`tiercel storage format --add-scram` on every node: replication over INTERNAL needs that
login before its first fetch. A user created with AlterUserScramCredentials through one
broker logs in on another; after the active controller stops, the new one keeps every
credential and takes new ones, and the stopped node, restarted, knows them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from support.certs import Pki, make_pki
from support.cluster import ClusterProcess

_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)


def _internal(cluster: ClusterProcess, node: int) -> str:
    """The INTERNAL listener of ``node``'s latest run."""
    return cluster.brokers[node].listener_address("INTERNAL")


def _client(cluster: ClusterProcess, node: int, pki: Pki, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": _internal(cluster, node),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca_pem),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def _logs_in(config: dict[str, Any]) -> bool:
    producer = Producer(config)
    try:
        producer.list_topics(timeout=5)
    except KafkaException:
        return False
    finally:
        del producer
    return True


def _wait_until_logs_in(config: dict[str, Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _logs_in(config):
        assert time.monotonic() < deadline, f"{config['sasl.username']} cannot log in"


def _create_user(cluster: ClusterProcess, node: int, user: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap([node])})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, f"{user}-secret".encode())]
    )
    futures[user].result(timeout=30)


def test_replication_over_sasl_ssl_scram_and_users_across_a_failover(
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
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": _JAAS,
        },
        extra_listeners=["INTERNAL://127.0.0.1:0"],
        start=False,
    )
    cluster.format(["--add-scram", "SCRAM-SHA-512=[name=broker,password=broker-secret]"])
    cluster.start()
    cluster.create_topic("scram", 3, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap([1]), "acks": "all"})
    for i in range(150):
        producer.produce("scram", f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    for partition in range(3):
        cluster.wait_until_isr("scram", partition, [1, 2, 3])
        assert cluster.assert_replicas_identical_below_hw("scram", partition) == 50

    _create_user(cluster, 1, "erin")
    _wait_until_logs_in(_client(cluster, 3, pki, "erin"))

    controller = cluster.wait_for_controller()
    cluster.terminate(controller)
    cluster.wait_for_controller(exclude=[controller])
    others = [n for n in cluster.brokers if n != controller]
    _create_user(cluster, others[0], "frank")
    for node in others:
        for user in ("erin", "frank"):
            _wait_until_logs_in(_client(cluster, node, pki, user))
    cluster.start_broker(controller)
    for user in ("broker", "erin", "frank"):
        _wait_until_logs_in(_client(cluster, controller, pki, user))
    for broker in cluster.brokers.values():
        assert "sasl_authentication_failed" not in broker.log_text()
