"""Tiered storage (KIP-405) in a three-broker cluster of real processes on ZooKeeper,
every broker tiering to one S3 bucket (moto's server) with the same RSM configuration.

An idempotent acks=all producer streams numbered values (each value is its record's
unique key for the checks) while the partition leader is SIGKILLed in the middle of its
copies. Afterwards a consumer from offset 0 reads every acknowledged value exactly once,
across the remote tier and the local logs; and the remote lineage, as the bucket's
manifests and as ``__remote_log_metadata`` record it, chains without gap or overlap:
what the old leader left half-uploaded is deleted by the new leader's expiration task
(Kafka's RLMExpirationTask), and the new leader continues from the highest remote offset
of its lineage (Kafka's RLMCopyTask.copyLogSegmentsToRemote).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.cluster import ClusterProcess
from support.moto_server import REGION, S3Bucket
from support.remote_lineage import (
    FINISHED,
    assert_chained,
    bucket_uploads,
    remote_log_metadata,
    uploads_per_start,
)
from support.sequence_producer import SequenceProducer, read_partition, verify_sequence
from tiercel.storage.checkpoint_file import kafka_str_to_uuid
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import REMOTE_LOG_METADATA_TOPIC_NAME
from tiercel.tiered.rlmm.remote_log_metadata_topic_partitioner import (
    RemoteLogMetadataTopicPartitioner,
)
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentState

TOPIC_CONFIG: Final = {
    "remote.storage.enable": "true",
    "min.insync.replicas": "2",
    "segment.bytes": "8192",
    # About two rolled segments stay on local disk: reads from 0 cross into the tier.
    "local.retention.bytes": "16384",
    "file.delete.delay.ms": "300",
}
METADATA_PARTITIONS: Final = 3
# A batch must fit in a segment (else RECORD_LIST_TOO_LARGE, as in Kafka).
PRODUCER_CONFIG: Final = {"batch.size": 2048}


def tiering_overrides(bucket: S3Bucket) -> dict[str, object]:
    """Every broker tiers to the same bucket and prefix, as a real cluster does."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.s3.bucket": bucket.name,
        "rsm.config.s3.prefix": "tiercel",
        "rsm.config.s3.region": REGION,
        "rsm.config.s3.endpoint.url": bucket.endpoint_url,
        "remote.log.manager.task.interval.ms": 200,
        "log.retention.check.interval.ms": 200,
        "rlmm.config.remote.log.metadata.topic.num.partitions": METADATA_PARTITIONS,
    }


@pytest.fixture
def tiering_cluster(
    cluster_factory: Callable[..., ClusterProcess], s3_bucket: S3Bucket
) -> ClusterProcess:
    return cluster_factory(overrides=tiering_overrides(s3_bucket))


def _wait(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s: {what}"
        time.sleep(0.2)


def local_bases(cluster: ClusterProcess, node: int, topic: str) -> list[int]:
    directory = cluster.partition_dir(node, topic, 0)
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def wait_until_tiered_to_active_segment(
    cluster: ClusterProcess, bucket: S3Bucket, topic: str, leader: int, timeout: float = 90.0
) -> None:
    """Until the bucket's complete uploads chain from 0 up to the leader's active
    segment (every rolled segment below the high watermark copied)."""

    def reached() -> bool:
        uploads = bucket_uploads(bucket, topic, 0)
        ends = {m.end_offset for m in uploads}
        return bool(uploads) and local_bases(cluster, leader, topic)[-1] - 1 in ends

    _wait(reached, timeout, f"{topic}: uploads up to broker {leader}'s active segment")


def assert_remote_lineage(cluster: ClusterProcess, bucket: S3Bucket, topic: str) -> None:
    """Eventually (the new leader's expiration task runs every task interval): every
    segment of ``__remote_log_metadata`` that is not deleted is COPY_SEGMENT_FINISHED,
    the bucket's complete uploads are exactly those, and they chain from 0 without gap
    or overlap, one upload per start offset."""
    deleted = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
    state: dict[str, object] = {}

    def settled() -> bool:
        live = {
            segment_id: m
            for segment_id, m in remote_log_metadata(cluster.bootstrap(), topic, 0).items()
            if m.state != deleted
        }
        uploads = {m.remote_log_segment_id.id: m for m in bucket_uploads(bucket, topic, 0)}
        state.update(live=live, uploads=uploads)
        return all(m.state == FINISHED for m in live.values()) and set(live) == set(uploads)

    try:
        _wait(settled, 60, "")
    except AssertionError:
        live_spans = sorted(
            (m.start_offset, m.end_offset, m.state.name, m.broker_id)
            for m in state["live"].values()  # type: ignore[attr-defined]
        )
        upload_spans = sorted(
            (m.start_offset, m.end_offset, m.broker_id)
            for m in state["uploads"].values()  # type: ignore[attr-defined]
        )
        raise AssertionError(
            f"{topic}: remote metadata {live_spans} and bucket uploads {upload_spans} "
            "did not settle"
        ) from None
    uploads = list(state["uploads"].values())  # type: ignore[attr-defined]
    assert_chained(uploads)
    assert set(uploads_per_start(uploads).values()) == {1}


@pytest.mark.parametrize("restart_old_leader", [False, True], ids=["gone", "restarted"])
def test_leader_sigkill_during_copies_loses_nothing_and_leaves_one_lineage(
    tiering_cluster: ClusterProcess, s3_bucket: S3Bucket, restart_old_leader: bool
) -> None:
    cluster = tiering_cluster
    topic = "tiered-kill"
    cluster.create_topic(topic, config=TOPIC_CONFIG)
    old_leader = cluster.leader_of(topic, 0)
    producer = SequenceProducer(cluster.bootstrap(), topic, **PRODUCER_CONFIG).start()
    try:
        # Copies under way: several segments already up, more rolling every moment.
        _wait(lambda: len(bucket_uploads(s3_bucket, topic, 0)) >= 3, 90, "first uploads")
        producer.wait_for_acks(500)
        cluster.kill(old_leader)
        new_leader = cluster.wait_for_leader(topic, 0, exclude=[old_leader]).leader
        # The producer goes on through the failover, and the new leader tiers.
        producer.wait_for_acks(3000, timeout=120)
        if restart_old_leader:
            cluster.start_broker(old_leader)
            cluster.wait_until_isr(topic, 0, [1, 2, 3], timeout=60)
        producer.wait_for_acks(1000, timeout=120)
    finally:
        tally = producer.stop()
    assert tally.fatal is None
    new_leader = cluster.leader_of(topic, 0)
    wait_until_tiered_to_active_segment(cluster, s3_bucket, topic, new_leader)
    assert local_bases(cluster, new_leader, topic)[0] > 0, "nothing trimmed locally"
    high_watermark = cluster.high_watermark(topic, 0)
    records = read_partition(cluster.bootstrap(), topic, 0, high_watermark)
    assert [offset for offset, _ in records] == list(range(high_watermark))
    verify_sequence(records, tally)
    assert_remote_lineage(cluster, s3_bucket, topic)


def create_led_by(cluster: ClusterProcess, topic: str, replicas: list[int]) -> None:
    """``topic`` with one partition on ``replicas``, the first its preferred leader."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = NewTopic(topic, 1, replica_assignment=[replicas], config=TOPIC_CONFIG)
    admin.create_topics([new], operation_timeout=30)[topic].result(30)
    _wait(lambda: cluster.partition_state(topic, 0) is not None, 30, f"{topic} created")
    cluster.wait_until_isr(topic, 0, replicas)
    assert cluster.leader_of(topic, 0) == replicas[0]


def metadata_partition_of(cluster: ClusterProcess, node: int, topic: str) -> int:
    """The ``__remote_log_metadata`` partition of ``topic``-0 (Kafka's
    RemoteLogMetadataTopicPartitioner over the topic id in partition.metadata)."""
    text = (cluster.partition_dir(node, topic, 0) / "partition.metadata").read_text()
    topic_id = kafka_str_to_uuid(text.split("topic_id:")[1].strip())
    partitioner = RemoteLogMetadataTopicPartitioner(METADATA_PARTITIONS)
    return partitioner.metadata_partition(TopicIdPartition(topic_id, TopicPartition(topic, 0)))


def test_remote_log_metadata_leader_sigkill_during_copies(
    tiering_cluster: ClusterProcess, s3_bucket: S3Bucket
) -> None:
    """The brokers create ``__remote_log_metadata`` at start-up, one broker after the
    other, with the configured replication factor (3); copies go on once the metadata
    partition's leader is killed, and that broker, restarted and then made the tiered
    partition's leader, serves the remote tier from the metadata it read back."""
    cluster = tiering_cluster
    metadata_topic = REMOTE_LOG_METADATA_TOPIC_NAME
    _wait(lambda: cluster.partition_state(metadata_topic, 0) is not None, 30, "RLMM topic")
    assignment = cluster.assignment(metadata_topic)
    assert len(assignment) == METADATA_PARTITIONS
    assert all(len(replicas) == 3 for replicas in assignment.values()), assignment
    # A tiered partition led by one broker, its metadata partition by the second of its
    # replicas. The metadata partition follows from the topic id, known only once the
    # topic exists: a third of the topics fit.
    for attempt in range(24):
        topic = f"rlmm-kill-{attempt}"
        user_leader = attempt % 3 + 1
        others = [n for n in (1, 2, 3) if n != user_leader]
        replicas = [user_leader, *(others if attempt % 2 else reversed(others))]
        create_led_by(cluster, topic, replicas)
        metadata_partition = metadata_partition_of(cluster, user_leader, topic)
        metadata_leader = cluster.wait_for_leader(metadata_topic, metadata_partition).leader
        if metadata_leader == replicas[1]:
            break
    else:
        raise AssertionError("no tiered partition's second replica leads its metadata")
    producer = SequenceProducer(cluster.bootstrap(), topic, **PRODUCER_CONFIG).start()
    try:
        _wait(lambda: len(bucket_uploads(s3_bucket, topic, 0)) >= 2, 90, "first uploads")
        cluster.kill(metadata_leader)
        cluster.wait_for_leader(metadata_topic, metadata_partition, exclude=[metadata_leader])
        copied = len(bucket_uploads(s3_bucket, topic, 0))
        _wait(lambda: len(bucket_uploads(s3_bucket, topic, 0)) >= copied + 3, 90, "copies")
        cluster.start_broker(metadata_leader)
        cluster.wait_until_isr(topic, 0, replicas, timeout=60)
        producer.wait_for_acks(500, timeout=120)
    finally:
        tally = producer.stop()
    assert tally.fatal is None
    # A controlled shutdown of the leader hands leadership to the next replica in the
    # assignment that is in the ISR: the restarted broker.
    cluster.terminate(user_leader)
    new_leader = cluster.wait_for_leader(topic, 0, exclude=[user_leader]).leader
    assert new_leader == metadata_leader
    wait_until_tiered_to_active_segment(cluster, s3_bucket, topic, new_leader)
    assert local_bases(cluster, new_leader, topic)[0] > 0, "nothing trimmed locally"
    high_watermark = cluster.high_watermark(topic, 0)
    records = read_partition(cluster.bootstrap(), topic, 0, high_watermark)
    assert [offset for offset, _ in records] == list(range(high_watermark))
    verify_sequence(records, tally)
    assert_remote_lineage(cluster, s3_bucket, topic)
