"""The remote tier of a partition as an operator sees it from outside the brokers: the
complete uploads in the object store (a manifest per segment, tiered/rsm/object_layout)
and the segment states in ``__remote_log_metadata`` (read with a plain consumer and
Kafka's record schemas, tiered/rlmm/remote_log_metadata_serde), and the invariant a
leader's copies keep: the finished segments of a partition chain without gap or overlap
(KIP-405, RemoteLogManager's copy from the highest remote offset of the lineage).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CTopicPartition

from support.moto_server import S3Bucket
from tiercel.storage.checkpoint_file import kafka_str_to_uuid
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_serde import deserialize
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import REMOTE_LOG_METADATA_TOPIC_NAME
from tiercel.tiered.rsm.object_layout import (
    MANIFEST_SUFFIX,
    ObjectKey,
    decode_manifest,
    parse_object_key,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def bucket_keys(bucket: S3Bucket, prefix: str = "") -> list[str]:
    client = bucket.client()
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket.name, Prefix=prefix)
        return [entry["Key"] for page in pages for entry in page.get("Contents", [])]
    finally:
        client.close()


def bucket_uploads(bucket: S3Bucket, topic: str, partition: int) -> list[RemoteLogSegmentMetadata]:
    """Every complete upload (a segment with its manifest) of ``topic``-``partition`` in
    the bucket, by start offset."""
    client = bucket.client()
    found = []
    try:
        for key in bucket_keys(bucket):
            parts = key.split("/")
            if (
                len(parts) >= 3
                and parts[-3].startswith(f"{topic}-")
                and len(parts[-3]) == len(topic) + 23
                and parts[-2] == str(partition)
                and key.endswith(f".{MANIFEST_SUFFIX}")
            ):
                try:
                    body = client.get_object(Bucket=bucket.name, Key=key)["Body"].read()
                except client.exceptions.NoSuchKey:
                    continue  # deleted since the listing
                found.append(decode_manifest(body).metadata)
    finally:
        client.close()
    return sorted(found, key=lambda m: m.start_offset)


def bucket_upload_starts(bucket: S3Bucket, topic: str, partition: int) -> set[int]:
    """The start offsets of the complete uploads of ``topic``-``partition``, from the
    keys of their manifests alone (one listing, no object read)."""
    return {
        parsed.start_offset
        for parsed in map(_parse_key, bucket_keys(bucket))
        if parsed is not None
        and parsed.topic_partition == TopicPartition(topic, partition)
        and parsed.suffix == MANIFEST_SUFFIX
    }


def _parse_key(key: str) -> ObjectKey | None:
    """A bucket key taken apart, under the brokers' prefix or none."""
    return parse_object_key(key.split("/", 1)[1] if key.count("/") == 3 else key)


def bucket_segment_ids(bucket: S3Bucket, topic: str, partition: int) -> set[uuid.UUID]:
    """The segment ids any object of ``topic``-``partition`` in the bucket belongs to,
    complete uploads or not (keys under one prefix directory, object_layout's keys
    below it)."""
    found = set()
    for key in bucket_keys(bucket):
        parsed = _parse_key(key)
        if parsed is not None and parsed.topic_partition == TopicPartition(topic, partition):
            found.add(kafka_str_to_uuid(parsed.segment_id))
    return found


def remote_log_metadata(
    bootstrap: str, topic: str, partition: int, timeout: float = 30.0
) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
    """The segments of ``topic``-``partition`` by segment id, each in its latest state,
    folded from every record of ``__remote_log_metadata`` up to its end offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiercel-remote-lineage-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
    try:
        metadata = consumer.list_topics(REMOTE_LOG_METADATA_TOPIC_NAME, timeout=timeout)
        partitions = sorted(metadata.topics[REMOTE_LOG_METADATA_TOPIC_NAME].partitions)
        assert partitions, "__remote_log_metadata has no partitions"
        ends = {}
        for p in partitions:
            _, high = consumer.get_watermark_offsets(
                CTopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, p), timeout=timeout, cached=False
            )
            ends[p] = high
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([CTopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, p, 0) for p in pending])
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"__remote_log_metadata unread: {pending}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, str(error)
                continue
            p, offset = message.partition(), message.offset()
            if offset >= ends[p] - 1:
                pending.discard(p)
            value = message.value()
            if offset >= ends[p] or value is None:
                continue
            event = deserialize(value)
            if isinstance(event, RemoteLogSegmentMetadata):
                tp = event.remote_log_segment_id.topic_partition
                if (tp.topic, tp.partition) == (topic, partition):
                    segments[event.remote_log_segment_id.id] = event
            elif isinstance(event, RemoteLogSegmentMetadataUpdate):
                known = segments.get(event.remote_log_segment_id.id)
                if known is not None:
                    segments[event.remote_log_segment_id.id] = known.create_with_updates(event)
    finally:
        consumer.close()
    return segments


def assert_chained(segments: Sequence[RemoteLogSegmentMetadata], start: int = 0) -> int:
    """``segments`` (by start offset) begin at ``start`` and each begins where the previous
    one ended, their leader epochs never going back; returns the offset after the last."""
    ordered = sorted(segments, key=lambda m: m.start_offset)
    spans = [(m.start_offset, m.end_offset) for m in ordered]
    expected = start
    previous_epoch = -1
    for m in ordered:
        assert m.start_offset == expected, f"gap or overlap at {expected}: {spans}"
        epochs = sorted(m.segment_leader_epochs.items())
        assert epochs and epochs[0][0] >= previous_epoch, f"epochs go back at {m}: {spans}"
        previous_epoch = epochs[-1][0]
        expected = m.end_offset + 1
    return expected


def uploads_per_start(segments: Sequence[RemoteLogSegmentMetadata]) -> Counter[int]:
    return Counter(m.start_offset for m in segments)
