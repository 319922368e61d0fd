"""Three combined KRaft nodes from config/kraft/, driven by librdkafka end to end.

The quorum elects an active controller; a topic created through one broker with three replicas
gets a leader per partition and a full ISR; 1000 records produced with acks=all through
one broker are read back, in order and complete, through another broker's bootstrap
only; every replica then holds the same batches below the high watermark and the same
leader-epoch-checkpoint. A clean stop of all three checkpoints the same high watermark
everywhere, and the replica comparison the fault tests rely on does notice a replica
whose bytes differ.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Message, Producer

from support.clients import consume
from support.cluster import ClusterProcess

RECORDS = 1000
PARTITIONS = 3


def _produce(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def on_delivery(err: object, msg: Message) -> None:
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        if err is not None:
            errors.append(str(err))
        else:
            assert partition is not None and offset is not None and value is not None
            acked[partition].append((offset, value))

    for i in range(RECORDS):
        producer.produce(
            topic, value=b"record-%04d" % i, partition=i % PARTITIONS, on_delivery=on_delivery
        )
        producer.poll(0)
        if errors:
            break
    assert producer.flush(30) == 0, "librdkafka did not deliver everything in time"
    assert not errors, errors[:5]
    # Offsets per partition run 0..n-1 in produce order.
    for partition, records in acked.items():
        assert [offset for offset, _ in records] == list(range(len(records))), partition
    return {p: [value for _, value in records] for p, records in acked.items()}


def _consume(bootstrap: str, topic: str, expected: dict[int, list[bytes]]) -> None:
    total = sum(len(v) for v in expected.values())
    consumed = consume("confluent", bootstrap, topic, total, range(PARTITIONS), timeout=30)
    got = {p: [r.value for r in records] for p, records in consumed.by_partition().items()}
    assert got == expected


def test_three_brokers_replicate_and_serve_from_any_bootstrap(cluster: ClusterProcess) -> None:
    controller = cluster.wait_for_controller()
    assert controller in cluster.brokers
    cluster.create_topic("smoke", PARTITIONS, replication_factor=3)
    for partition, replicas in cluster.assignment("smoke").items():
        assert sorted(replicas) == [1, 2, 3], (partition, replicas)
    leaders = {cluster.leader_of("smoke", p) for p in range(PARTITIONS)}
    # Leaders are spread over the brokers, as Kafka's assignment does.
    assert len(leaders) == PARTITIONS

    produced = _produce(cluster.bootstrap([1]), "smoke")
    assert sum(len(v) for v in produced.values()) == RECORDS
    _consume(cluster.bootstrap([2]), "smoke", produced)

    for partition in range(PARTITIONS):
        hw = cluster.assert_replicas_identical_below_hw("smoke", partition)
        assert hw == len(produced[partition])
        cluster.wait_until_isr("smoke", partition, [1, 2, 3])
        assert cluster.assert_epoch_checkpoints_identical("smoke", partition) == [(0, 0)]

    # Followers learn the HW from the leader and checkpoint it; a clean stop of the whole
    # cluster keeps it.
    for partition in range(PARTITIONS):
        cluster.wait_until_high_watermark_checkpointed("smoke", partition, len(produced[partition]))
    for node in (3, 2, 1):
        assert cluster.terminate(node) == 0, cluster.brokers[node].tail()
    for partition in range(PARTITIONS):
        for node in (1, 2, 3):
            checkpointed = cluster.checkpointed_high_watermark(node, "smoke", partition)
            assert checkpointed == len(produced[partition]), (node, partition, checkpointed)

    # The replica comparison notices one flipped byte in one replica below the HW (the
    # replicas named: with every node stopped, no broker can tell the assignment).
    segment = cluster.partition_dir(3, "smoke", 0) / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(data)
    with pytest.raises(AssertionError, match="differs between brokers"):
        cluster.assert_replicas_identical_below_hw(
            "smoke", 0, len(produced[0]), nodes=[1, 2, 3], timeout=1
        )
