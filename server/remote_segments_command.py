"""``tiercel remote-segments``: one partition's remote segments, listed from the object
store alone (a local tier directory or an S3 bucket), no broker needed.

One line per segment upload, or a JSON array with ``--json``::

    orders-<topic id>/3 start=1200 end=1299 epochs=3:1200,5:1240 size=4096
        max_timestamp=1700000000000 segment=<segment id> state=COPY_SEGMENT_FINISHED

An upload without its manifest (cut short, or a deletion under way) shows ``-`` for what
only the manifest knows, ``state=COPY_SEGMENT_STARTED`` and the objects found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tiercel.protocol.errors import InvalidTopicError
from tiercel.server.admin_manager import validate_topic_name
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_listing import RemoteSegmentListing, list_remote_segments
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError

__all__ = ["add_remote_segments_arguments", "run_remote_segments"]


def _topic(text: str) -> str:
    try:
        validate_topic_name(text)  # nor does a name like "../x" lead out of the tier
    except InvalidTopicError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _partition(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a partition number: {text!r}")
    return int(text)


def _topic_id(text: str) -> str:
    try:
        return uuid_to_kafka_str(kafka_str_to_uuid(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a Kafka topic id: {text!r}") from None


def add_remote_segments_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verb's arguments on its parser."""
    parser.description = "List one partition's remote segments from the object store alone."
    parser.add_argument("--topic", required=True, type=_topic)
    parser.add_argument("--partition", required=True, type=_partition)
    parser.add_argument(
        "--topic-id",
        type=_topic_id,
        help="only this topic id (default: every one found); --topic-id=ID if ID begins with -",
    )
    store = parser.add_mutually_exclusive_group(required=True)
    store.add_argument("--dir", help="the local tier's directory (rsm.config.dir)")
    store.add_argument("--s3-bucket", help="the S3 bucket (rsm.config.s3.bucket)")
    parser.add_argument("--s3-prefix", default="", help="the key prefix in the bucket")
    parser.add_argument("--s3-endpoint-url", help="an S3-compatible endpoint")
    parser.add_argument("--s3-region", help="the bucket's region")
    parser.add_argument(
        "--s3-path-style-access", action="store_true", help="the bucket in the URL's path"
    )
    parser.add_argument("--json", action="store_true", help="a JSON array, one object a segment")


def _store(args: argparse.Namespace) -> ObjectStore:
    if args.dir is not None:
        return LocalDirectoryStore(args.dir)
    # Imported here: boto3 takes a while to import, and the broker's start needs none of it.
    from tiercel.tiered.rsm.s3_config import S3Config
    from tiercel.tiered.rsm.s3_remote_storage import S3ObjectStore

    return S3ObjectStore(
        S3Config(
            args.s3_bucket,
            prefix=args.s3_prefix,
            region=args.s3_region,
            endpoint_url=args.s3_endpoint_url,
            path_style_access=args.s3_path_style_access,
        )
    )


def run_remote_segments(args: argparse.Namespace) -> int:
    if args.dir is not None and not os.path.isdir(args.dir):
        print(f"tiercel remote-segments: no directory {args.dir}", file=sys.stderr)
        return 1
    topic_partition = TopicPartition(args.topic, args.partition)
    try:
        store = _store(args)
        try:
            segments = list_remote_segments(store, topic_partition, args.topic_id)
        finally:
            store.close()
    except (RemoteStorageError, ValueError) as e:
        print(f"tiercel remote-segments: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([_as_json(segment) for segment in segments], indent=1))
    else:
        for segment in segments:
            print(_as_line(segment))
    return 0


def _as_json(segment: RemoteSegmentListing) -> dict[str, object]:
    document: dict[str, object] = {
        "topic": segment.topic_partition.topic,
        "partition": segment.topic_partition.partition,
        "topic_id": segment.topic_id,
        "segment_id": segment.segment_id,
        "start_offset": segment.start_offset,
        "end_offset": None,
        "segment_leader_epochs": None,
        "segment_size_in_bytes": None,
        "max_timestamp_ms": None,
        "state": segment.state.name,
        "objects": sorted(segment.suffixes),
    }
    if segment.manifest is not None:
        metadata = segment.manifest.metadata
        document.update(
            end_offset=metadata.end_offset,
            segment_leader_epochs=sorted(metadata.segment_leader_epochs.items()),
            segment_size_in_bytes=metadata.segment_size_in_bytes,
            max_timestamp_ms=metadata.max_timestamp_ms,
        )
    if segment.manifest_error is not None:
        document["manifest_error"] = segment.manifest_error
    return document


def _as_line(segment: RemoteSegmentListing) -> str:
    document = _as_json(segment)
    epochs = document["segment_leader_epochs"]
    fields = [
        f"{segment.topic_partition.topic}-{segment.topic_id}/{segment.topic_partition.partition}",
        f"start={segment.start_offset}",
        f"end={_or_dash(document['end_offset'])}",
        "epochs=" + (",".join(f"{e}:{o}" for e, o in epochs) if isinstance(epochs, list) else "-"),
        f"size={_or_dash(document['segment_size_in_bytes'])}",
        f"max_timestamp={_or_dash(document['max_timestamp_ms'])}",
        f"segment={segment.segment_id}",
        f"state={segment.state.name}",
    ]
    if segment.manifest is None:
        fields.append("objects=" + ",".join(sorted(segment.suffixes)))
    if segment.manifest_error is not None:
        fields.append(f"manifest_error={segment.manifest_error!r}")
    return " ".join(fields)


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
