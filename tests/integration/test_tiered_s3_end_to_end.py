"""A broker tiering to S3 (moto's server) with ``remote.log.storage.manager.class.name=s3``
and a tiny ``local.retention.bytes``, end to end with real clients, then restarted.

librdkafka, kafka-python and aiokafka read the whole topic from offset 0 as it was
produced; ListOffsets earliest, EARLIEST_LOCAL (-4) and LATEST_TIERED (-5) agree with the
bucket's listing; ``tiercel remote-segments`` lists what the broker uploaded, with the
epochs and offsets of its ``__remote_log_metadata`` records. After a restart the broker
serves everything from offset 0 again without uploading anything a second time, and its
metadata manager starts from the snapshot it wrote at shutdown (only the tail of
``__remote_log_metadata`` is read).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import kafka
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, now_ms, produce, wait_until
from support.moto_server import REGION, create_bucket
from support.tiered_s3 import (
    AWS_ENV,
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    assert_contiguous,
    complete_uploads,
    local_segment_bases,
    log_events,
    metadata_records,
    s3_broker,
    s3_broker_overrides,
)
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_snapshot_file import (
    SNAPSHOT_DIR_NAME,
    read_snapshots,
)
from tiercel.tiered.rsm.remote_listing import list_remote_segments
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from tiercel.tiered.rsm.s3_config import S3Config
from tiercel.tiered.rsm.s3_remote_storage import S3ObjectStore

TOPIC: Final = "s3-e2e"
PREFIX: Final = "tiercel/e2e"
COUNT: Final = 300
BASE_TS: Final = now_ms() - 3_600_000
TIERCEL: Final = Path(sys.executable).with_name("tiercel")


def value(i: int) -> bytes:
    return b"%05d:" % i + b"e" * 90


class Tier:
    def __init__(self, endpoint_url: str, bucket: str) -> None:
        self.endpoint_url = endpoint_url
        self.bucket = bucket

    def listing(self) -> dict[int, int]:
        """start offset -> end offset of each complete upload; one each, or it fails."""
        store = S3ObjectStore(S3Config(self.bucket, PREFIX, REGION, self.endpoint_url))
        try:
            return complete_uploads(list_remote_segments(store, TopicPartition(TOPIC, 0)))
        finally:
            store.close()


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for key, setting in AWS_ENV.items():
            patch.setenv(key, setting)
        yield


@pytest.fixture(scope="module")
def tier(moto_s3_endpoint: str, aws_env: None) -> Tier:
    return Tier(moto_s3_endpoint, create_bucket(moto_s3_endpoint).name)


@pytest.fixture(scope="module")
def broker(tier: Tier, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = s3_broker_overrides(
        tier.endpoint_url, tier.bucket, **{"rsm.config.s3.prefix": PREFIX}
    )
    broker = s3_broker(tmp_path_factory.mktemp("s3_e2e"), overrides)
    try:
        broker.start()
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "2048",
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "300",
        }
        create_topic(broker.bootstrap, TOPIC, config=config)
        records = [Outgoing(0, value(i), b"k%d" % i, (), BASE_TS + i) for i in range(COUNT)]
        delivered = produce(
            "confluent", broker.bootstrap, TOPIC, records, {"batch.num.messages": 3}
        )
        assert [d.offset for d in delivered] == list(range(COUNT))
        assert wait_until(lambda: fully_tiered(broker, tier), 60)
        yield broker
    finally:
        broker.kill()


def fully_tiered(broker: BrokerProcess, tier: Tier) -> bool:
    """Every rolled segment is remote and local retention has removed the copies."""
    uploads = tier.listing()
    bases = local_segment_bases(broker, TOPIC)
    return bool(uploads) and max(uploads.values()) == bases[-1] - 1 and len(bases) == 1


def list_offset(broker: BrokerProcess, spec: int) -> int:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        return int(admin.list_partition_offsets({tp: spec})[tp].offset)
    finally:
        admin.close()


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_clients_read_the_whole_topic_from_offset_0(broker: BrokerProcess, client: str) -> None:
    consumed = consume(client, broker.bootstrap, TOPIC, COUNT, timeout=60)
    got = [(r.offset, r.key, r.value, r.timestamp) for r in consumed.records]
    assert got == [(i, b"k%d" % i, value(i), BASE_TS + i) for i in range(COUNT)]


def test_list_offsets_agree_with_the_bucket(broker: BrokerProcess, tier: Tier) -> None:
    uploads = tier.listing()
    assert_contiguous(uploads)
    assert list_offset(broker, kafka.OffsetSpec.EARLIEST) == min(uploads) == 0
    assert list_offset(broker, kafka.OffsetSpec.LATEST_TIERED) == max(uploads.values())
    assert list_offset(broker, kafka.OffsetSpec.EARLIEST_LOCAL) == max(uploads.values()) + 1


def test_the_cli_lists_what_the_broker_uploaded(broker: BrokerProcess, tier: Tier) -> None:
    listed = subprocess.run(
        [
            *(str(TIERCEL), "remote-segments", "--topic", TOPIC, "--partition", "0", "--json"),
            *("--s3-bucket", tier.bucket, "--s3-prefix", PREFIX),
            *("--s3-endpoint-url", tier.endpoint_url, "--s3-region", REGION),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert listed.returncode == 0, listed.stderr
    rows = {row["segment_id"]: row for row in json.loads(listed.stdout)}
    finished = finished_segments(broker)
    assert set(rows) == set(finished)
    for segment_id, metadata in finished.items():
        row = rows[segment_id]
        assert row["state"] == "COPY_SEGMENT_FINISHED"
        assert (row["start_offset"], row["end_offset"]) == (
            metadata.start_offset,
            metadata.end_offset,
        )
        assert row["segment_leader_epochs"] == [
            [e, o] for e, o in sorted(metadata.segment_leader_epochs.items())
        ]
        assert row["segment_size_in_bytes"] == metadata.segment_size_in_bytes


def finished_segments(broker: BrokerProcess) -> dict[str, RemoteLogSegmentMetadata]:
    """The COPY_SEGMENT_FINISHED segments of ``__remote_log_metadata``, by the segment id
    the object layout names them with."""
    segments: dict[str, RemoteLogSegmentMetadata] = {}
    states: dict[str, RemoteLogSegmentState] = {}
    for record in metadata_records(broker.bootstrap):
        if isinstance(record, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            segment_id = uuid_to_kafka_str(record.remote_log_segment_id.id)
            if isinstance(record, RemoteLogSegmentMetadata):
                segments[segment_id] = record
            states[segment_id] = record.state
    return {
        i: m
        for i, m in segments.items()
        if states[i] == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    }


def test_a_restarted_broker_serves_everything_and_uploads_nothing_again(
    broker: BrokerProcess, tier: Tier
) -> None:
    uploaded = set(finished_segments(broker))
    ends = metadata_end_offsets(broker)
    assert broker.stop() == 0
    snapshots = read_snapshots(str(broker.log_dir / SNAPSHOT_DIR_NAME))
    (ours,) = [
        s for s in snapshots.values() if any(p.topic_partition.topic == TOPIC for p in s.partitions)
    ]
    # Written at shutdown: nothing of the partition is left to re-read.
    assert ours.consumed_offset == ends[ours.metadata_partition] - 1

    broker.start()
    # The metadata manager started from the snapshot, and used it.
    assert wait_until(lambda: len(list(log_events(broker, "rlmm_initialized"))) == 2, 30)
    assert int(list(log_events(broker, "rlmm_initialized"))[-1].fields["snapshots"]) >= 1
    for ignored in ("rlmm_snapshot_ignored", "rlmm_snapshot_view_ignored"):
        assert list(log_events(broker, ignored)) == []
    consumed = consume("confluent", broker.bootstrap, TOPIC, COUNT, timeout=60)
    assert [(r.offset, r.value) for r in consumed.records] == [(i, value(i)) for i in range(COUNT)]
    # The copy continued where it was, and several rounds later every segment is still
    # the one upload it was.
    events = log_events(broker, "remote_copy_resumed")
    resumed = [e for e in events if e.fields["partition"] == f"{TOPIC}-0"]
    assert len(resumed) == 2
    assert int(resumed[-1].fields["copied_offset"]) == max(tier.listing().values())
    time.sleep(2)
    assert set(finished_segments(broker)) == uploaded
    assert len(tier.listing()) == len(uploaded)
    assert len(list(log_events(broker, "remote_segment_copied"))) == len(uploaded)


def metadata_end_offsets(broker: BrokerProcess) -> dict[int, int]:
    """The high watermark of each ``__remote_log_metadata`` partition."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(CTopicPartition(METADATA_TOPIC, p), timeout=10)[1]
            for p in range(METADATA_PARTITIONS)
        }
    finally:
        consumer.close()
