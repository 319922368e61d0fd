"""The transaction coordinator fails over with its __transaction_state partition, in
the three-broker example cluster (replication factor 3, min ISR 2):

a transaction is open (records produced to three partitions) when the broker
coordinating its transactional id is SIGKILLed. The partition's new leader replays
the partition, the producer finds it and commits; every partition gets its marker, so
read_committed consumers see the records, once. The killed broker, restarted, follows
again and the id's state is the same on whichever broker leads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from support.cluster import ClusterProcess
from tiercel.server.coordinator.coordinator_partition import partition_for

PARTITIONS = 3
TXN_TOPIC = "__transaction_state"
# 50 partitions times three replicas is a lot of replication for a test cluster.
TXN_PARTITIONS = 5


@pytest.fixture
def cluster(cluster_factory: Callable[..., ClusterProcess]) -> ClusterProcess:
    return cluster_factory(overrides={"transaction.state.log.num.partitions": TXN_PARTITIONS})


def read_committed(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"checker-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        settle: float | None = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            values += [m.value() for m in consumer.consume(100, 0.2) if m.error() is None]
            if settle is None and len(values) >= expect:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return sorted(values)


def test_the_coordinator_fails_over_with_its_partition(cluster: ClusterProcess) -> None:
    cluster.create_topic("payments", PARTITIONS, replication_factor=3)
    transactional_id = "failover-app"
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "transactional.id": transactional_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    partition = partition_for(transactional_id, TXN_PARTITIONS)
    coordinator = cluster.leader_of(TXN_TOPIC, partition)

    producer.begin_transaction()
    for i in range(30):
        producer.produce("payments", b"first-%02d" % i, partition=i % PARTITIONS)
    producer.commit_transaction(60)

    producer.begin_transaction()
    for i in range(30):
        producer.produce("payments", b"second-%02d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    cluster.kill(coordinator)
    successor = cluster.wait_for_leader(TXN_TOPIC, partition, exclude=[coordinator]).leader
    assert successor != coordinator
    producer.commit_transaction(90)

    survivors = [n for n in cluster.brokers if n != coordinator]
    expected = sorted(
        [b"first-%02d" % i for i in range(30)] + [b"second-%02d" % i for i in range(30)]
    )
    assert read_committed(cluster.bootstrap(survivors), "payments", 60) == expected
    log = cluster.brokers[successor].log_text()
    assert "event=transaction_partition_loaded" in log

    # The old coordinator comes back as a follower; the id keeps working.
    cluster.start_broker(coordinator)
    producer.begin_transaction()
    producer.produce("payments", b"third", partition=0)
    producer.commit_transaction(60)
    assert read_committed(cluster.bootstrap(), "payments", 61) == sorted([*expected, b"third"])
