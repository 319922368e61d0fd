"""Where a remote segment's objects live, and its metadata object (the manifest).

The layout is a public contract: a reader with no broker (the Spark reader) plans a scan
from a listing alone. Keys are relative to the store's root (a directory, or an S3
bucket and prefix)::

    <topic>-<topic id>/<partition>/<start offset, 20 digits>-<segment id>.<suffix>

The topic id and segment id are Kafka Uuid strings (22 characters of URL-safe base64), so
a topic name is everything before the last 23 characters of the first component. The
suffixes are ``log`` (the segment's record batches, as on local disk), ``index``,
``timeindex``, ``txnindex`` (only when the segment has aborted transactions),
``snapshot`` (the producer snapshot at the segment's end, the next segment's base
offset, when there is one), ``leader-epoch-checkpoint`` (the epoch entries up to the
segment's end, in the checkpoint file's format, as Kafka uploads them), and
``manifest.json``, written last: its presence marks a complete upload, and it carries
what a reader needs to plan (offsets, the leader-epoch map, sizes, timestamps and which
objects exist). Two uploads of the same offsets (after a leader change) have different
segment ids and never share objects; a reader chooses between them by leader epoch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

__all__ = [
    "LOG_SUFFIX",
    "MANIFEST_SUFFIX",
    "ObjectKey",
    "SegmentManifest",
    "decode_manifest",
    "encode_manifest",
    "object_key",
    "parse_object_key",
    "partition_prefix",
]

LOG_SUFFIX: Final = "log"
MANIFEST_SUFFIX: Final = "manifest.json"
MANIFEST_VERSION: Final = 1
_OFFSET_DIGITS: Final = 20
_UUID_CHARS: Final = 22  # a Kafka Uuid string


def partition_prefix(topic_id: str, topic_partition: TopicPartition) -> str:
    """``<topic>-<topic id>/<partition>/``: every object of one partition."""
    return f"{topic_partition.topic}-{topic_id}/{topic_partition.partition}/"


def object_key(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    """The key of one object of ``metadata``'s segment (``suffix``: `LOG_SUFFIX`,
    `MANIFEST_SUFFIX` or an `IndexType` value)."""
    segment_id = metadata.remote_log_segment_id
    prefix = partition_prefix(uuid_to_kafka_str(segment_id.topic_id), segment_id.topic_partition)
    start = f"{metadata.start_offset:0{_OFFSET_DIGITS}d}"
    return f"{prefix}{start}-{uuid_to_kafka_str(segment_id.id)}.{suffix}"


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """A key of the layout, taken apart."""

    topic_partition: TopicPartition
    topic_id: str
    start_offset: int
    segment_id: str
    suffix: str


def parse_object_key(key: str) -> ObjectKey | None:
    """``key`` taken apart, or None if it is not a segment object of the layout."""
    parts = key.split("/")
    if len(parts) != 3:
        return None
    topic_and_id, partition, name = parts
    start, dash, rest = name.partition("-")
    segment_id, suffix = rest[:_UUID_CHARS], rest[_UUID_CHARS + 1 :]
    topic, topic_id = topic_and_id[: -_UUID_CHARS - 1], topic_and_id[-_UUID_CHARS:]
    if (
        not dash
        or len(start) != _OFFSET_DIGITS
        or not start.isdigit()
        or not partition.isdigit()
        or rest[_UUID_CHARS : _UUID_CHARS + 1] != "."
        or not suffix
        or not topic
        or topic_and_id[-_UUID_CHARS - 1] != "-"
    ):
        return None
    try:
        kafka_str_to_uuid(segment_id)
        kafka_str_to_uuid(topic_id)
    except ValueError:
        return None
    return ObjectKey(
        TopicPartition(topic, int(partition)), topic_id, int(start), segment_id, suffix
    )


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """A decoded manifest: the segment's metadata and the suffixes of its objects."""

    metadata: RemoteLogSegmentMetadata
    objects: frozenset[str]

    def has(self, index_type: IndexType) -> bool:
        return index_type.value in self.objects


def encode_manifest(metadata: RemoteLogSegmentMetadata, objects: frozenset[str]) -> bytes:
    """The manifest of a segment whose objects (by suffix) are ``objects``."""
    segment_id = metadata.remote_log_segment_id
    document: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "topic": segment_id.topic_partition.topic,
        "topic_id": uuid_to_kafka_str(segment_id.topic_id),
        "partition": segment_id.topic_partition.partition,
        "segment_id": uuid_to_kafka_str(segment_id.id),
        "start_offset": metadata.start_offset,
        "end_offset": metadata.end_offset,
        "max_timestamp_ms": metadata.max_timestamp_ms,
        "segment_size_in_bytes": metadata.segment_size_in_bytes,
        # Pairs, not an object: JSON object keys are strings, epochs are numbers.
        "segment_leader_epochs": sorted(metadata.segment_leader_epochs.items()),
        "broker_id": metadata.broker_id,
        "event_timestamp_ms": metadata.event_timestamp_ms,
        "objects": sorted(objects),
    }
    return json.dumps(document, indent=1).encode()


def decode_manifest(data: bytes) -> SegmentManifest:
    """The manifest in ``data``; ValueError if it is not one this version can read."""
    try:
        document = json.loads(data)
        if not isinstance(document, Mapping) or document.get("version") != MANIFEST_VERSION:
            raise ValueError(f"not a version {MANIFEST_VERSION} segment manifest")
        segment_id = RemoteLogSegmentId(
            kafka_str_to_uuid(document["topic_id"]),
            TopicPartition(str(document["topic"]), int(document["partition"])),
            kafka_str_to_uuid(document["segment_id"]),
        )
        metadata = RemoteLogSegmentMetadata(
            segment_id,
            int(document["start_offset"]),
            int(document["end_offset"]),
            int(document["max_timestamp_ms"]),
            int(document["broker_id"]),
            int(document["event_timestamp_ms"]),
            int(document["segment_size_in_bytes"]),
            {int(epoch): int(start) for epoch, start in document["segment_leader_epochs"]},
            # A manifest exists only once every object is written: the copy is complete.
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        )
        objects = frozenset(str(suffix) for suffix in document["objects"])
    except (KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a segment manifest: {e!r}") from e
    return SegmentManifest(metadata, objects)
