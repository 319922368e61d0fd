"""A RemoteStorageManager over any `ObjectStore`: what every object-store tier shares.

Which objects a segment has, the order they are written in (the manifest last, so that
its presence marks a complete upload) and removed in (the manifest first, so that no
reader finds a manifest naming missing objects), and which key each goes under
(`object_layout`). The stores differ only in how an object is put, read and removed:
`LocalTieredStorage` over a directory, `S3RemoteStorageManager` over a bucket.

Blocking; any thread, if the store is thread-safe (both are): the RemoteLogManager's
copier, reader and expiration pools call it.
"""

from __future__ import annotations

from typing import Final

from tiercel.tiered.rsm.object_layout import (
    LOG_SUFFIX,
    MANIFEST_SUFFIX,
    encode_manifest,
    object_key,
)
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
)

__all__ = ["ALL_SUFFIXES", "ObjectStoreRemoteStorageManager", "segment_files"]

# Every object a segment may have, the manifest first: deletion removes it first.
ALL_SUFFIXES: Final = (MANIFEST_SUFFIX, LOG_SUFFIX, *(t.value for t in IndexType))


def segment_files(data: LogSegmentData) -> dict[str, str]:
    """The files of ``data`` to copy, by object suffix: the log, its offset and time
    indexes, and the transaction index and producer snapshot when there are any (the
    leader-epoch entries come as bytes, not a file)."""
    files = {
        LOG_SUFFIX: data.log_segment,
        IndexType.OFFSET.value: data.offset_index,
        IndexType.TIMESTAMP.value: data.time_index,
        IndexType.TRANSACTION.value: data.transaction_index,
        IndexType.PRODUCER_SNAPSHOT.value: data.producer_snapshot_index,
    }
    return {suffix: path for suffix, path in files.items() if path is not None}


class ObjectStoreRemoteStorageManager:
    """Kafka's RemoteStorageManager over ``store``, at the keys of `object_layout`.

    Invariant: a segment's manifest exists only while every object it names does.
    Thread-safe if ``store`` is."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        files = segment_files(data)
        epochs = IndexType.LEADER_EPOCH.value
        self.store.put_all(
            {object_key(metadata, suffix): path for suffix, path in files.items()},
            {object_key(metadata, epochs): data.leader_epoch_index},
        )
        # Last: the manifest's presence says every object above is in place.
        manifest = encode_manifest(metadata, frozenset([*files, epochs]))
        self.store.put_bytes(object_key(metadata, MANIFEST_SUFFIX), manifest)

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"bad range [{start_position}, {end_position}]")
        return self.store.get_range(object_key(metadata, LOG_SUFFIX), start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return self.store.get(object_key(metadata, index_type.value))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        manifest, *objects = (object_key(metadata, suffix) for suffix in ALL_SUFFIXES)
        # The manifest's removal is durable before any object goes.
        self.store.delete([manifest])
        self.store.delete(objects)

    def close(self) -> None:
        self.store.close()
