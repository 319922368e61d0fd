"""Tiered storage (KIP-405) in a three-node KRaft cluster of real processes,
every broker tiering to one S3 bucket (moto's server) with the same RSM configuration.

An idempotent acks=all producer streams numbered values (each value is its record's
unique key for the checks) while the partition leader is SIGKILLed in the middle of its
copies. Afterwards a consumer from offset 0 reads every acknowledged value exactly once,
across the remote tier and the local logs; and the remote lineage, as the bucket's
manifests and as ``__remote_log_metadata`` record it, chains without gap or overlap,
and the new leader continues from the highest remote offset of its lineage (Kafka's
RLMCopyTask.copyLogSegmentsToRemote). What the old leader left half-uploaded stays
COPY_SEGMENT_STARTED outside the lineage: the new leader's expiration task leaves another
broker's unfinished upload to retention, as Kafka's RLMExpirationTask does.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from support.cluster import ClusterProcess
from support.moto_server import S3Bucket
from support.remote_lineage import bucket_uploads
from support.sequence_producer import SequenceProducer, read_partition, verify_sequence
from support.tiered_cluster import (
    METADATA_PARTITIONS,
    PRODUCER_CONFIG,
    TOPIC_CONFIG,
    assert_remote_lineage,
    create_led_by,
    local_bases,
    tiering_overrides,
    wait_for,
    wait_until_tiered_to_active_segment,
)
from tiercel.storage.checkpoint_file import kafka_str_to_uuid
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import REMOTE_LOG_METADATA_TOPIC_NAME
from tiercel.tiered.rlmm.remote_log_metadata_topic_partitioner import (
    RemoteLogMetadataTopicPartitioner,
)


@pytest.fixture
def tiering_cluster(
    cluster_factory: Callable[..., ClusterProcess], s3_bucket: S3Bucket
) -> ClusterProcess:
    return cluster_factory(overrides=tiering_overrides(s3_bucket))


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
        wait_for(lambda: len(bucket_uploads(s3_bucket, topic, 0)) >= 3, 90, "first uploads")
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
    assert_remote_lineage(cluster, s3_bucket, topic, cut_short_by=[old_leader])


def metadata_partition_of(cluster: ClusterProcess, node: int, topic: str) -> int:
    """The ``__remote_log_metadata`` partition of ``topic``-0 (Kafka's
    RemoteLogMetadataTopicPartitioner over the topic id in partition.metadata)."""
    path = cluster.partition_dir(node, topic, 0) / "partition.metadata"
    wait_for(lambda: "topic_id:" in (path.read_text() if path.exists() else ""), 30, str(path))
    text = path.read_text()
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
    wait_for(lambda: cluster.partition_state(metadata_topic, 0) is not None, 30, "RLMM topic")
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
        wait_for(lambda: len(bucket_uploads(s3_bucket, topic, 0)) >= 2, 90, "first uploads")
        cluster.kill(metadata_leader)
        cluster.wait_for_leader(metadata_topic, metadata_partition, exclude=[metadata_leader])
        copied = len(bucket_uploads(s3_bucket, topic, 0))
        wait_for(lambda: len(bucket_uploads(s3_bucket, topic, 0)) >= copied + 3, 90, "copies")
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
    # The old leader stopped (a controlled shutdown) during its copies: it abandons them.
    assert_remote_lineage(cluster, s3_bucket, topic, cut_short_by=[user_leader])
