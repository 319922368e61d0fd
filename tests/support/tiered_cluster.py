"""A three-broker cluster tiering to one S3 bucket (moto) for the tiered cluster tests:
the brokers' and topics' settings, topics placed on chosen brokers, and waits and checks
on the remote tier as seen from outside the brokers (support.remote_lineage)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Final

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.cluster import ClusterProcess
from support.moto_server import REGION, S3Bucket
from support.remote_lineage import (
    FINISHED,
    assert_chained,
    bucket_segment_ids,
    bucket_uploads,
    remote_log_metadata,
    uploads_per_start,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

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


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
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

    wait_for(reached, timeout, f"{topic}: uploads up to broker {leader}'s active segment")


def assert_remote_lineage(
    cluster: ClusterProcess, bucket: S3Bucket, topic: str, cut_short_by: Collection[int] = ()
) -> None:
    """Eventually (the leader's expiration task runs every task interval): every segment
    of ``__remote_log_metadata`` that is not deleted is COPY_SEGMENT_FINISHED, the bucket
    holds the objects of exactly those (complete uploads), and they chain from 0 without
    gap or overlap, one upload per start offset.

    But for the uploads the brokers ``cut_short_by`` (killed or stopped mid-copy) left
    COPY_SEGMENT_STARTED: another broker never deletes those (Kafka leaves them to
    retention, since their broker may still be finishing them), so their records and
    whatever objects they wrote may stay; they are not part of the lineage."""
    deleted = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
    started = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    state: dict[str, object] = {}

    def settled() -> bool:
        live = {
            segment_id: m
            for segment_id, m in remote_log_metadata(cluster.bootstrap(), topic, 0).items()
            if m.state != deleted
        }
        finished = {i for i, m in live.items() if m.state == FINISHED}
        dangling = {
            i for i, m in live.items() if m.state == started and m.broker_id in cut_short_by
        }
        uploads = {m.remote_log_segment_id.id: m for m in bucket_uploads(bucket, topic, 0)}
        # Objects of uploads never completed (no manifest) are deleted with them.
        objects = bucket_segment_ids(bucket, topic, 0)
        state.update(
            live=live,
            uploads={i: m for i, m in uploads.items() if i in finished},
            stray=objects - set(uploads) - dangling,
        )
        return (
            set(live) == finished | dangling
            and finished <= set(uploads) <= finished | dangling
            and finished <= objects <= finished | dangling
        )

    try:
        wait_for(settled, 60, "")
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
            f"(and the objects of segments {state['stray']} without a manifest) did not settle"
        ) from None
    uploads = list(state["uploads"].values())  # type: ignore[attr-defined]
    lineage = [m for m in uploads if not superseded(m, uploads, cut_short_by)]
    assert_chained(lineage)
    assert set(uploads_per_start(lineage).values()) == {1}


def superseded(
    upload: RemoteLogSegmentMetadata,
    uploads: Sequence[RemoteLogSegmentMetadata],
    cut_short_by: Collection[int],
) -> bool:
    """Whether ``upload`` is a cut-short broker's whose offsets the other brokers'
    finished uploads all hold: its COPY_SEGMENT_FINISHED reached the new leader only
    after that leader had found its range uncopied and uploaded it too (the write was in
    flight when its broker died). Kafka keeps such a duplicate too (its
    RemoteLogLeaderEpochState serves the newer upload and leaves the older unreferenced
    until retention); every other upload must chain."""
    if upload.broker_id not in cut_short_by:
        return False
    covered = upload.start_offset
    for other in sorted(uploads, key=lambda m: m.start_offset):
        if (
            other.broker_id not in cut_short_by
            and other.start_offset <= covered <= other.end_offset
        ):
            covered = other.end_offset + 1
    return covered > upload.end_offset


def known_brokers(cluster: ClusterProcess, node: int) -> list[int]:
    """The brokers ``node``'s Metadata response names."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap([node])})
    return sorted(admin.list_topics(timeout=10).brokers)


def create_led_by(cluster: ClusterProcess, topic: str, replicas: list[int]) -> None:
    """``topic`` with one partition on ``replicas``, the first its preferred leader."""
    for node in cluster.running():
        # Every broker knows every other (the assignment names them all).
        wait_for(lambda n=node: len(known_brokers(cluster, n)) == 3, 30, f"{node}'s brokers")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = NewTopic(topic, 1, replica_assignment=[replicas], config=TOPIC_CONFIG)
    admin.create_topics([new], operation_timeout=30)[topic].result(30)
    wait_for(lambda: cluster.partition_state(topic, 0) is not None, 30, f"{topic} created")
    cluster.wait_until_isr(topic, 0, replicas)
    assert cluster.leader_of(topic, 0) == replicas[0]
