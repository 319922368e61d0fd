"""DeleteRecords in a three-broker cluster: the answer waits until every live replica
has moved its log start offset (Kafka's DelayedDeleteRecords), so records deleted once
stay deleted when the leader fails right after the answer."""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from support.cluster import ClusterProcess

TOPIC = "purged"


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in range(count):
        producer.produce(TOPIC, str(value).encode(), partition=0)
    assert producer.flush(30) == 0


def _read_from_the_beginning(bootstrap: str, count: int) -> list[int]:
    """The values of the first ``count`` records the partition serves from its start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "purged-reader"})
    values: list[int] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        while len(values) < count:
            message = consumer.poll(30)
            assert message is not None, f"read {values} only"
            assert message.error() is None, message.error()
            values.append(int(message.value()))
    finally:
        consumer.close()
    return values


def test_deleted_records_stay_deleted_after_the_leader_fails(cluster: ClusterProcess) -> None:
    cluster.create_topic(TOPIC)
    _produce(cluster.bootstrap(), 10)
    leader = cluster.leader_of(TOPIC, 0)
    follower = next(n for n in cluster.brokers if n != leader)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap([leader])})
    admin.list_topics(timeout=10)  # connected before the pause: the request is quick
    request = [TopicPartition(TOPIC, 0, 6)]

    # A follower that cannot follow (stopped, still registered) holds the answer back
    # until the request's timeout: Kafka answers REQUEST_TIMED_OUT.
    cluster.pause(follower)
    try:
        future = admin.delete_records(request, operation_timeout=1.0, request_timeout=10)
        try:
            future[TopicPartition(TOPIC, 0)].result(10)
            raise AssertionError("DeleteRecords was answered before a follower followed")
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.REQUEST_TIMED_OUT, e
    finally:
        cluster.resume(follower)

    # Asked again, the answer comes once every replica starts at offset 6.
    deleted = admin.delete_records(request, operation_timeout=30, request_timeout=40)
    assert deleted[TopicPartition(TOPIC, 0)].result(40).low_watermark == 6

    cluster.kill(leader)
    cluster.wait_for_leader(TOPIC, 0, exclude=[leader])
    live = [n for n in cluster.brokers if n != leader]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(live)})
    tp = TopicPartition(TOPIC, 0)
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset == 6
    assert _read_from_the_beginning(cluster.bootstrap(live), 4) == [6, 7, 8, 9]
