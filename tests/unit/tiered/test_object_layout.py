"""The remote object layout: keys a reader can take apart, and the manifest."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.object_layout import (
    MANIFEST_SUFFIX,
    decode_manifest,
    encode_manifest,
    object_key,
    parse_object_key,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def metadata(topic: str = "orders-eu", start: int = 1200) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TOPIC_ID, TopicPartition(topic, 7), uuid.uuid4()),
        start_offset=start,
        end_offset=start + 99,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=2,
        event_timestamp_ms=1_700_000_001_000,
        segment_size_in_bytes=4096,
        segment_leader_epochs={3: start, 5: start + 40},
    )


def test_keys_name_topic_topic_id_partition_offset_and_segment() -> None:
    m = metadata()
    segment_id = uuid_to_kafka_str(m.remote_log_segment_id.id)
    assert object_key(m, "log") == (
        f"orders-eu-{uuid_to_kafka_str(TOPIC_ID)}/7/00000000000000001200-{segment_id}.log"
    )


@pytest.mark.parametrize("topic", ["t", "orders-eu", "a.b_c-d", "-x-"])
@pytest.mark.parametrize("suffix", ["log", MANIFEST_SUFFIX, *(t.value for t in IndexType)])
def test_every_key_parses_back(topic: str, suffix: str) -> None:
    m = metadata(topic)
    parsed = parse_object_key(object_key(m, suffix))
    assert parsed is not None
    assert (parsed.topic_partition, parsed.start_offset, parsed.suffix) == (
        TopicPartition(topic, 7),
        1200,
        suffix,
    )
    assert parsed.topic_id == uuid_to_kafka_str(TOPIC_ID)
    assert parsed.segment_id == uuid_to_kafka_str(m.remote_log_segment_id.id)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "x/0/00000000000000001200-abc.log",
        f"orders-{uuid_to_kafka_str(TOPIC_ID)}/7/1200-{uuid_to_kafka_str(TOPIC_ID)}.log",
        f"orders-{uuid_to_kafka_str(TOPIC_ID)}/p/00000000000000001200-"
        f"{uuid_to_kafka_str(TOPIC_ID)}.log",
        f"orders-{uuid_to_kafka_str(TOPIC_ID)}/7/00000000000000001200-"
        f"{uuid_to_kafka_str(TOPIC_ID)}",
        f"{uuid_to_kafka_str(TOPIC_ID)}/7/00000000000000001200-{uuid_to_kafka_str(TOPIC_ID)}.log",
        "a/b/c/d",
    ],
)
def test_other_keys_are_not_segment_objects(key: str) -> None:
    assert parse_object_key(key) is None


def test_the_manifest_round_trips() -> None:
    m = metadata()
    objects = frozenset({"log", "index", "timeindex", "leader-epoch-checkpoint"})
    manifest = decode_manifest(encode_manifest(m, objects))
    assert manifest.metadata == dataclasses.replace(
        m, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    )
    assert manifest.objects == objects
    assert manifest.has(IndexType.OFFSET) and not manifest.has(IndexType.TRANSACTION)


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b"{}", b'{"version": 2}', b"\xff", b'{"version": 1, "topic": "t"}'],
)
def test_anything_else_is_not_a_manifest(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_manifest(data)


def test_metadata_needs_ordered_offsets_and_an_epoch() -> None:
    segment_id = RemoteLogSegmentId.generate(TOPIC_ID, TopicPartition("t", 0))
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadata(segment_id, 10, 9, 0, 1, 0, 0, {0: 10})
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadata(segment_id, 0, 9, 0, 1, 0, 0, {})
