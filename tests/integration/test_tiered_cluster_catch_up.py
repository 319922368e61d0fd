"""Followers catching up through the remote tier in a three-broker cluster tiering to S3
(KIP-405's follower scenarios 1 and 2): a replica added by reassignment to a partition
whose leader has already trimmed its local log, and a follower stopped (SIGSTOP) while
the leader produced past its local retention. Each fetches below the leader's local
start, gets OFFSET_MOVED_TO_TIERED_STORAGE, rebuilds its leader-epoch cache and producer
state from the remote segment before the leader's local start (Kafka's
ReplicaFetcherTierStateMachine / buildRemoteLogAuxState), starts its log there and joins
the ISR with the leader's epoch lineage and log start offset. Leadership then moves to
it: a consumer from offset 0 still reads every acknowledged value exactly once, and the
new leader continues the copies where the tier ends, re-uploading nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from support.cluster import ClusterProcess, read_offset_checkpoint
from support.moto_server import S3Bucket
from support.remote_lineage import bucket_upload_starts, bucket_uploads
from support.sequence_producer import (
    ProducerTally,
    SequenceProducer,
    read_partition,
    verify_sequence,
)
from support.tiered_cluster import (
    PRODUCER_CONFIG,
    assert_remote_lineage,
    create_led_by,
    local_bases,
    tiering_overrides,
    wait_for,
    wait_until_tiered_to_active_segment,
)
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class

ALTER_PARTITION_REASSIGNMENTS: Final = 45
# Checkpoints written often enough to compare the files within a test.
CHECKPOINTS: Final = {"log.flush.start.offset.checkpoint.interval.ms": 500}


def request(bootstrap: str, api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    with WireClient(bootstrap) as client:
        return client.request(build_entity(request_class(api_key, version), fields, True))


def start_cluster(
    cluster_factory: Callable[..., ClusterProcess], bucket: S3Bucket
) -> ClusterProcess:
    return cluster_factory(overrides={**tiering_overrides(bucket), **CHECKPOINTS})


def produce_past_local_retention(
    cluster: ClusterProcess, bucket: S3Bucket, topic: str, leader: int, uploads: int = 6
) -> ProducerTally:
    """Acknowledged values until the leader has rolled ``uploads`` + 2 segments (local
    retention keeps about two), then, with the producer stopped, until ``uploads``
    segments are remote and the leader's local log starts above 0. Producing stops on
    the segment count, not on the uploads: copies lag more the busier the machine, and
    a producer waiting for them would write a tier that grows with the load."""
    producer = SequenceProducer(cluster.bootstrap(), topic, **PRODUCER_CONFIG).start()
    try:
        wait_for(
            lambda: (
                len(
                    bucket_upload_starts(bucket, topic, 0)
                    | set(local_bases(cluster, leader, topic)[:-1])
                )
                >= uploads + 2
            ),
            120,
            f"{uploads + 2} segments of {topic} rolled on broker {leader}",
        )
    finally:
        tally = producer.stop()
    assert tally.fatal is None
    wait_for(
        lambda: (
            len(bucket_upload_starts(bucket, topic, 0)) >= uploads
            and local_bases(cluster, leader, topic)[0] > 0
        ),
        120,
        f"{uploads} uploads of {topic} and a local trim",
    )
    return tally


def log_start_checkpoint(cluster: ClusterProcess, node: int, topic: str) -> int | None:
    path = cluster.brokers[node].log_dir / "log-start-offset-checkpoint"
    return read_offset_checkpoint(path).get((topic, 0)) if path.exists() else None


def assert_caught_up_through_the_tier(
    cluster: ClusterProcess, topic: str, leader: int, follower: int, since: int
) -> None:
    """``follower`` rebuilt its state from the tier (its log says so, after ``since``
    bytes), starts its local log no lower than the leader's, and holds the leader's
    epoch lineage, log start offset and bytes."""
    log = cluster.brokers[follower].log_text()[since:]
    assert f"event=follower_built_remote_log_aux_state partition={topic}-0" in log
    assert local_bases(cluster, follower, topic)[0] >= local_bases(cluster, leader, topic)[0]
    cluster.assert_replicas_identical_below_hw(topic, 0, nodes=[leader, follower])
    leader_epochs = cluster.assert_epoch_checkpoints_identical(topic, 0, [leader, follower])
    assert leader_epochs and leader_epochs[0][1] == 0, leader_epochs
    wait_for(
        lambda: (
            log_start_checkpoint(cluster, follower, topic)
            == log_start_checkpoint(cluster, leader, topic)
            == 0
        ),
        30,
        f"log-start-offset-checkpoint of {topic}-0 on {leader} and {follower}",
    )


def assert_new_leader_continues(
    cluster: ClusterProcess, bucket: S3Bucket, topic: str, new_leader: int, tally: ProducerTally
) -> None:
    """Every value ``tally`` acknowledged read once from 0 through the new leader; then
    more values through it: one remote lineage, each segment uploaded once, those before
    the move untouched, and every value of both producers read once."""
    moved_at = cluster.high_watermark(topic, 0)
    verify_sequence(read_partition(cluster.bootstrap(), topic, 0, moved_at), tally)
    before = {m.start_offset: m.remote_log_segment_id for m in bucket_uploads(bucket, topic, 0)}
    more = produce_past_local_retention(cluster, bucket, topic, new_leader, len(before) + 4)
    wait_until_tiered_to_active_segment(cluster, bucket, topic, new_leader)
    assert_remote_lineage(cluster, bucket, topic)
    after = {m.start_offset: m.remote_log_segment_id for m in bucket_uploads(bucket, topic, 0)}
    assert {start: after.get(start) for start in before} == before, "re-uploaded"
    high_watermark = cluster.high_watermark(topic, 0)
    records = read_partition(cluster.bootstrap(), topic, 0, high_watermark)
    assert [offset for offset, _ in records] == list(range(high_watermark))
    # The second producer numbers its values from 0 too, from the move's offset on.
    verify_sequence(records[:moved_at], tally)
    verify_sequence(records[moved_at:], more)


def test_a_replica_added_by_reassignment_builds_its_state_from_the_tier(
    cluster_factory: Callable[..., ClusterProcess], s3_bucket: S3Bucket
) -> None:
    cluster = start_cluster(cluster_factory, s3_bucket)
    topic = "reassigned"
    create_led_by(cluster, topic, [1, 2])
    tally = produce_past_local_retention(cluster, s3_bucket, topic, leader=1)
    wait_until_tiered_to_active_segment(cluster, s3_bucket, topic, 1)
    since = len(cluster.brokers[3].log_text())
    controller = cluster.wait_for_controller()
    moved = {"partition_index": 0, "replicas": [3, 1, 2]}
    response = request(
        cluster.brokers[controller].bootstrap,
        ALTER_PARTITION_REASSIGNMENTS,
        0,
        {"topics": [{"name": topic, "partitions": [moved]}]},
    )
    assert response.error_code == 0
    assert [p.error_code for t in response.responses for p in t.partitions] == [0]
    cluster.wait_until_isr(topic, 0, [1, 2, 3], timeout=60)
    assert_caught_up_through_the_tier(cluster, topic, leader=1, follower=3, since=since)
    # The new replica is the preferred leader now.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    elected = admin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition(topic, 0)])
    assert elected.result(30)[CTopicPartition(topic, 0)] is None
    assert cluster.wait_for_leader(topic, 0, exclude=[1, 2]).leader == 3
    assert_new_leader_continues(cluster, s3_bucket, topic, 3, tally)


def test_a_follower_stopped_past_local_retention_catches_up_from_the_tier(
    cluster_factory: Callable[..., ClusterProcess], s3_bucket: S3Bucket
) -> None:
    cluster = start_cluster(cluster_factory, s3_bucket)
    topic = "paused"
    create_led_by(cluster, topic, [1, 2, 3])
    since = len(cluster.brokers[2].log_text())
    cluster.pause(2)
    try:
        tally = produce_past_local_retention(cluster, s3_bucket, topic, leader=1)
        wait_until_tiered_to_active_segment(cluster, s3_bucket, topic, 1)
    finally:
        cluster.resume(2)
    cluster.wait_until_isr(topic, 0, [1, 2, 3], timeout=60)
    assert_caught_up_through_the_tier(cluster, topic, leader=1, follower=2, since=since)
    # A controlled shutdown of the leader hands leadership to the next replica in the
    # assignment that is in the ISR: the one that caught up.
    cluster.terminate(1)
    assert cluster.wait_for_leader(topic, 0, exclude=[1]).leader == 2
    assert_new_leader_continues(cluster, s3_bucket, topic, 2, tally)
