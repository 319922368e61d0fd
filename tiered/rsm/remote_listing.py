"""One partition's remote segments, from the object store alone (no broker, no metadata
topic): what an operator's ``tiercel remote-segments`` prints and what a reader with no
broker plans from.

Objects are grouped by segment id (`object_layout`'s keys). A segment whose manifest is
there is complete: its state is Kafka's ``COPY_SEGMENT_FINISHED`` and the manifest says
the rest. One without is an upload in progress, cut short, or a deletion under way
(the manifest goes first): ``COPY_SEGMENT_STARTED``, with only the suffixes of the
objects found. Without a topic id, every topic id under the topic's name is listed: a
deleted and recreated topic has a new id, and its old objects may still be there.

Blocking; any thread (the store's contract).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.object_layout import (
    MANIFEST_SUFFIX,
    SegmentManifest,
    decode_manifest,
    parse_object_key,
    partition_prefix,
)
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
)

__all__ = [
    "RemoteSegmentListing",
    "list_remote_segments",
    "topic_ids",
]

_UUID_CHARS: Final = 22


@dataclass(frozen=True, slots=True)
class RemoteSegmentListing:
    """One segment upload found in the store. ``manifest`` is None for an incomplete one;
    ``manifest_error`` says why a manifest that is there could not be read."""

    topic_partition: TopicPartition
    topic_id: str
    start_offset: int
    segment_id: str
    suffixes: frozenset[str]
    manifest: SegmentManifest | None
    manifest_error: str | None = None

    @property
    def state(self) -> RemoteLogSegmentState:
        """As far as a listing can tell the states apart: a manifest marks a finished
        copy, data objects without one a copy started (or cut short)."""
        if self.manifest is not None:
            return RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        return RemoteLogSegmentState.COPY_SEGMENT_STARTED


def topic_ids(store: ObjectStore, topic: str) -> list[str]:
    """The topic ids with objects under ``topic``'s name, sorted."""
    found = []
    for folder in store.list_folders(f"{topic}-"):
        name = folder.rstrip("/")
        # Not another topic whose name only starts with this one's ("orders-eu").
        if len(name) == len(topic) + 1 + _UUID_CHARS:
            found.append(name[-_UUID_CHARS:])
    return sorted(found)


def list_remote_segments(
    store: ObjectStore, topic_partition: TopicPartition, topic_id: str | None = None
) -> list[RemoteSegmentListing]:
    """Every segment upload of ``topic_partition`` (of ``topic_id`` only, when given),
    by topic id, start offset and segment id."""
    ids = [topic_id] if topic_id is not None else topic_ids(store, topic_partition.topic)
    return [segment for one_id in ids for segment in _segments(store, topic_partition, one_id)]


def _segments(
    store: ObjectStore, topic_partition: TopicPartition, topic_id: str
) -> Iterator[RemoteSegmentListing]:
    # Each upload's objects: their keys by suffix.
    uploads: defaultdict[tuple[int, str], dict[str, str]] = defaultdict(dict)
    for key in store.list(partition_prefix(topic_id, topic_partition)):
        parsed = parse_object_key(key)
        if parsed is not None and parsed.topic_partition == topic_partition:
            uploads[parsed.start_offset, parsed.segment_id][parsed.suffix] = key
    for (start_offset, segment_id), keys in sorted(uploads.items()):
        manifest, error = None, None
        if MANIFEST_SUFFIX in keys:
            try:
                manifest = decode_manifest(store.get(keys[MANIFEST_SUFFIX]))
            except RemoteResourceNotFoundError:
                del keys[MANIFEST_SUFFIX]  # deleted since the listing: the segment is going
            except ValueError as e:
                error = str(e)
        yield RemoteSegmentListing(
            topic_partition, topic_id, start_offset, segment_id, frozenset(keys), manifest, error
        )
