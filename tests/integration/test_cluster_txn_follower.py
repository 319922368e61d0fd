"""A follower that was away while two transactions interleaved and aborted catches up
with one fetch, rejoins the ISR and, once it leads, hides the aborted records.

Three broker processes; a partition on two of them. The follower is paused (SIGSTOP)
until the controller takes it out of the ISR; meanwhile two transactional producers
write A's record, then B's, and abort B's transaction before A's, so the leader's log
holds A's data, B's data, B's ABORT, A's ABORT, then a committed transaction. The
follower resumed fetches all of it in one response and must complete the two aborted
transactions in the order of their markers (Kafka's
UnifiedLog.analyzeAndValidateProducerState). Completing them producer by producer wrote
A's index entry first, the transaction index refused B's, and the follower stalled for
ever below the log end, out of the ISR, with B's aborted records unindexed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from support.cluster import ClusterProcess

TOPIC = "ledger"
TXN_PARTITIONS = 5
# A's data, B's data (one batch), B's ABORT, A's ABORT, then A's commit: data and marker.
END_OFFSET = 7


@pytest.fixture
def cluster(cluster_factory: Callable[..., ClusterProcess]) -> ClusterProcess:
    return cluster_factory(overrides={"transaction.state.log.num.partitions": TXN_PARTITIONS})


def transactional(cluster: ClusterProcess, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    return producer


def write(producer: Producer, *values: bytes) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0


def wait_for_log_end(cluster: ClusterProcess, node: int, offset: int) -> None:
    """Until broker ``node``'s log of the partition ends at ``offset`` (its files: the
    LSO, all a read_committed watermark query would tell, stays at A's open data)."""
    deadline = time.monotonic() + 30
    while (batches := cluster.batches(node, TOPIC, 0))[-1:] == [] or (
        batches[-1].last_offset + 1 < offset
    ):
        assert time.monotonic() < deadline, f"{TOPIC}-0 never reached offset {offset}"
        time.sleep(0.1)


def txn_index_bytes(partition_dir: Path) -> bytes:
    """Every aborted-transaction entry of a replica, in segment order."""
    files = sorted(partition_dir.glob("*.txnindex"), key=lambda p: int(p.stem))
    return b"".join(f.read_bytes() for f in files)


def read_committed(bootstrap: str) -> list[bytes]:
    """Every record a read_committed consumer gets up to the partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-follower-check",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([CTopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 60
        while consumer.position([CTopicPartition(TOPIC, 0)])[0].offset < END_OFFSET:
            assert time.monotonic() < deadline, f"read_committed stopped at {values}"
            values += [m.value() for m in consumer.consume(10, 0.2) if m.error() is None]
    finally:
        consumer.close()
    return values


def test_a_follower_catches_up_on_interleaved_aborts_and_hides_them(
    cluster: ClusterProcess,
) -> None:
    cluster.create_topic(TOPIC, 1, replication_factor=2, config={"min.insync.replicas": "1"})
    state = cluster.partition_state(TOPIC, 0)
    assert state is not None
    leader = state.leader
    (follower,) = (n for n in state.isr if n != leader)

    cluster.pause(follower)
    cluster.wait_until_isr(TOPIC, 0, [leader], timeout=60)
    a = transactional(cluster, "interleaved-a")
    b = transactional(cluster, "interleaved-b")
    write(a, b"a-aborted")
    write(b, b"b-aborted-0", b"b-aborted-1")
    b.abort_transaction(60)
    wait_for_log_end(cluster, leader, 4)  # B's marker is in before A's
    a.abort_transaction(60)
    write(a, b"a-committed")
    a.commit_transaction(60)
    wait_for_log_end(cluster, leader, END_OFFSET)

    cluster.resume(follower)
    cluster.wait_until_isr(TOPIC, 0, [leader, follower], timeout=60)
    cluster.assert_replicas_identical_below_hw(TOPIC, 0)
    leader_index = txn_index_bytes(cluster.partition_dir(leader, TOPIC, 0))
    assert len(leader_index) == 2 * 34  # Kafka's 34-byte entries: B's abort, then A's
    assert txn_index_bytes(cluster.partition_dir(follower, TOPIC, 0)) == leader_index

    # The follower leads: read_committed gets the committed record alone.
    cluster.terminate(leader)
    assert cluster.wait_for_leader(TOPIC, 0, exclude=[leader]).leader == follower
    assert read_committed(cluster.bootstrap([follower])) == [b"a-committed"]
