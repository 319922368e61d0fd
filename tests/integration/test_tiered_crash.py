"""SIGKILL of a broker in the middle of an upload to S3 (moto's server, behind a proxy
that holds the upload's last request, its manifest, so every other object of the segment
is in the bucket when the broker dies), then a restart.

Afterwards the metadata manager's view (``__remote_log_metadata`` read with a real client
and decoded with Kafka's serde) has no COPY_SEGMENT_FINISHED segment whose objects are
missing from the bucket; the upload cut short (COPY_SEGMENT_STARTED, no manifest) went
through the DELETE states and its objects are gone; the segment was uploaded again,
completely; and a consumer from offset 0 reads every acknowledged record once.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.broker import BrokerProcess
from support.clients import Outgoing, create_topic, produce, wait_until
from support.moto_server import MotoServer, create_bucket
from support.stalling_proxy import StallingProxy
from support.tiered_s3 import (
    assert_contiguous,
    bucket_segments,
    complete_uploads,
    local_segment_bases,
    metadata_records,
    s3_broker,
    s3_broker_overrides,
)
from support.wire import WireClient
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.tiered.rlmm.remote_log_metadata_serde import RemoteLogMetadata
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, MANIFEST_SUFFIX
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

TOPIC: Final = "crashed"
TIERED: Final = {
    "remote.storage.enable": "true",
    "segment.bytes": "2048",
    "local.retention.bytes": "1",
    "file.delete.delay.ms": "300",
}
BUCKET: Final = "tier"
MANIFEST_PUT: Final = re.compile(rb"^PUT \S+\." + re.escape(MANIFEST_SUFFIX.encode()), re.M)


def value(i: int) -> bytes:
    return b"%05d:" % i + b"c" * 90


@pytest.fixture
def store(moto_server_factory: Callable[[], MotoServer]) -> MotoServer:
    server = moto_server_factory()
    create_bucket(server.endpoint_url, BUCKET)
    return server


@pytest.fixture
def proxy(store: MotoServer) -> Iterator[StallingProxy]:
    proxy = StallingProxy(store.port)
    yield proxy
    proxy.close()


@pytest.fixture
def broker(proxy: StallingProxy, tmp_path: Path) -> Iterator[BrokerProcess]:
    # A long read timeout: the held upload hangs until the kill.
    overrides = s3_broker_overrides(
        proxy.endpoint_url, BUCKET, **{"rsm.config.s3.read.timeout.ms": 60_000}
    )
    broker = s3_broker(tmp_path / "broker", overrides)
    try:
        yield broker.start()
    finally:
        broker.kill()


def produce_range(broker: BrokerProcess, first: int, count: int) -> None:
    records = [Outgoing(0, value(i), None, (), None) for i in range(first, first + count)]
    delivered = produce(
        "confluent", broker.bootstrap, TOPIC, records, {"batch.num.messages": 2, "linger.ms": 2}
    )
    assert [d.offset for d in delivered] == list(range(first, first + count))


def segment_states(
    records: Sequence[RemoteLogMetadata],
) -> dict[uuid.UUID, tuple[RemoteLogSegmentMetadata, RemoteLogSegmentState]]:
    """Each segment of the metadata topic with the state its last record gave it."""
    states: dict[uuid.UUID, tuple[RemoteLogSegmentMetadata, RemoteLogSegmentState]] = {}
    for record in records:
        if isinstance(record, RemoteLogSegmentMetadata):
            states[record.remote_log_segment_id.id] = (record, record.state)
        elif isinstance(record, RemoteLogSegmentMetadataUpdate):
            metadata, _ = states[record.remote_log_segment_id.id]
            states[record.remote_log_segment_id.id] = (metadata, record.state)
    return states


def state_of(broker: BrokerProcess, segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentState:
    return segment_states(metadata_records(broker.bootstrap))[segment.remote_log_segment_id.id][1]


def started_not_finished(broker: BrokerProcess) -> list[RemoteLogSegmentMetadata]:
    return [
        m
        for m, state in segment_states(metadata_records(broker.bootstrap)).values()
        if state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
    ]


def uploads(store: MotoServer) -> dict[int, int]:
    return complete_uploads(bucket_segments(store.endpoint_url, BUCKET, TOPIC))


def all_rolled_remote(broker: BrokerProcess, store: MotoServer) -> bool:
    found = uploads(store)
    return bool(found) and max(found.values()) == local_segment_bases(broker, TOPIC)[-1] - 1


def read_all(broker: BrokerProcess, count: int, timeout: float = 60) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "crash",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + timeout
        settle = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
            if settle is None and len(got) >= count:
                settle = time.monotonic() + 1
    finally:
        consumer.close()
    return got


def fetch_from_0() -> FetchRequest:
    """A consumer's Fetch v12 of offset 0, answered at once."""
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=0)),
        min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName(TOPIC), partitions=(
            FetchPartition(partition=i32(0), current_leader_epoch=i32(-1),
                           fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                           log_start_offset=i64(-1), partition_max_bytes=i32(1 << 16)),
        )),),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


def test_sigkill_mid_upload_leaves_no_dangling_metadata_and_uploads_again(
    broker: BrokerProcess, store: MotoServer, proxy: StallingProxy
) -> None:
    create_topic(broker.bootstrap, TOPIC, config=TIERED)
    produce_range(broker, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store), 30)

    proxy.stall = MANIFEST_PUT  # the next upload stops before its manifest
    produce_range(broker, 100, 50)
    assert proxy.stalled.wait(30)
    (orphan,) = started_not_finished(broker)
    orphan_id = uuid_to_kafka_str(orphan.remote_log_segment_id.id)
    (cut_short,) = [
        s for s in bucket_segments(store.endpoint_url, BUCKET, TOPIC) if s.segment_id == orphan_id
    ]
    assert cut_short.manifest is None and LOG_SUFFIX in cut_short.suffixes
    broker.kill()
    proxy.stall = None

    broker.start()
    # The orphan went through the DELETE states, its objects are gone, and its
    # segment was uploaded again.
    assert wait_until(lambda: all_rolled_remote(broker, store), 60)
    assert wait_until(
        lambda: state_of(broker, orphan) == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
        30,
    )
    listed = bucket_segments(store.endpoint_url, BUCKET, TOPIC)
    assert orphan_id not in {s.segment_id for s in listed}
    assert all(s.manifest is not None for s in listed), listed
    found = uploads(store)
    assert_contiguous(found)
    assert orphan.start_offset in found
    # Every FINISHED segment of the metadata points at a complete upload in the bucket.
    manifests = {s.segment_id: s for s in listed if MANIFEST_SUFFIX in s.suffixes}
    finished = [
        m
        for m, state in segment_states(metadata_records(broker.bootstrap)).values()
        if state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    ]
    assert len(finished) == len(found)
    for m in finished:
        listing = manifests[uuid_to_kafka_str(m.remote_log_segment_id.id)]
        assert listing.manifest is not None
        assert listing.start_offset == m.start_offset
        assert listing.manifest.metadata.end_offset == m.end_offset
    assert read_all(broker, 150) == [(i, value(i)) for i in range(150)]


def test_a_broker_restarts_while_the_store_is_paused(
    broker: BrokerProcess, store: MotoServer
) -> None:
    create_topic(broker.bootstrap, TOPIC, config=TIERED)
    produce_range(broker, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store), 30)
    assert wait_until(lambda: local_segment_bases(broker, TOPIC)[0] > 0, 30)
    local_start = local_segment_bases(broker, TOPIC)[0]
    assert broker.stop() == 0
    store.pause()
    try:
        broker.start()
        produce_range(broker, 100, 50)
        assert local_segment_bases(broker, TOPIC)[0] == local_start
    finally:
        store.resume()
    assert wait_until(lambda: all_rolled_remote(broker, store), 60)
    assert_contiguous(uploads(store))
    assert read_all(broker, 150) == [(i, value(i)) for i in range(150)]


def test_remote_reads_right_after_a_restart_are_never_out_of_range(
    broker: BrokerProcess, store: MotoServer
) -> None:
    create_topic(broker.bootstrap, TOPIC, config=TIERED)
    produce_range(broker, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store), 30)
    assert wait_until(lambda: local_segment_bases(broker, TOPIC)[0] > 0, 30)
    broker.kill()  # no metadata snapshot: the restart reads __remote_log_metadata again
    broker.start()
    errors: list[ErrorCode] = []
    deadline = time.monotonic() + 30
    with WireClient(broker.bootstrap, timeout=30) as client:
        while time.monotonic() < deadline:
            response = client.request(fetch_from_0())
            (answer,) = [p for t in response.responses for p in t.partitions]
            errors.append(answer.error_code)
            if answer.records:
                break
    # Before the metadata is read back, a retriable error (Kafka's
    # RemoteStorageNotReadyException), never "out of range": a consumer would reset.
    assert answer.records, errors
    assert ErrorCode.offset_out_of_range not in errors
    assert ErrorCode.unknown_server_error not in errors


def test_sigkill_after_the_manifest_before_finished_leaves_one_complete_upload(
    broker: BrokerProcess, store: MotoServer, proxy: StallingProxy
) -> None:
    create_topic(broker.bootstrap, TOPIC, config=TIERED)
    produce_range(broker, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store), 30)

    # The next upload completes in the store, but the broker never hears of its manifest.
    proxy.stall_replies = True
    proxy.stall = MANIFEST_PUT
    produce_range(broker, 100, 50)
    assert proxy.stalled.wait(30)
    (orphan,) = started_not_finished(broker)
    orphan_id = uuid_to_kafka_str(orphan.remote_log_segment_id.id)
    assert wait_until(
        lambda: any(
            s.segment_id == orphan_id and s.manifest is not None
            for s in bucket_segments(store.endpoint_url, BUCKET, TOPIC)
        ),
        10,
    )
    broker.kill()
    proxy.stall = None

    broker.start()
    assert wait_until(
        lambda: state_of(broker, orphan) == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 30
    )
    assert wait_until(lambda: all_rolled_remote(broker, store), 60)
    listed = bucket_segments(store.endpoint_url, BUCKET, TOPIC)
    assert orphan_id not in {s.segment_id for s in listed}
    assert_contiguous(uploads(store))  # one complete upload per segment
    assert read_all(broker, 150) == [(i, value(i)) for i in range(150)]
