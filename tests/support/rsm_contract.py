"""The RemoteStorageManager contract, as tests every implementation must pass.

A test module subclasses `RemoteStorageManagerContract` (pytest collects the subclass,
named ``Test...``) and supplies an ``rsm`` fixture: an `ObjectStoreRemoteStorageManager`
over a fresh, empty store. The tests look behind it through ``rsm.store``: the objects
it writes, the manifest last, ranges and indexes read back, idempotent copy and delete.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.object_layout import (
    MANIFEST_SUFFIX,
    decode_manifest,
    object_key,
    parse_object_key,
)
from tiercel.tiered.rsm.object_store_rsm import ObjectStoreRemoteStorageManager
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

TOPIC_ID = uuid.uuid4()
EPOCHS = b"0\n1\n3 1200\n"


def metadata(start: int = 1200, topic: str = "orders") -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(TOPIC_ID, TopicPartition(topic, 3)),
        start_offset=start,
        end_offset=start + 99,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=1_700_000_001_000,
        segment_size_in_bytes=1000,
        segment_leader_epochs={3: start},
    )


def segment_files(
    directory: Path, *, transactions: bool = False, log: bytes = bytes(range(250)) * 4
) -> LogSegmentData:
    """A rolled segment's files: distinct bytes in each, so a mix-up shows."""
    directory.mkdir(exist_ok=True)
    files = {"log": log, "index": b"I" * 80, "timeindex": b"T" * 120, "snapshot": b"S" * 30}
    if transactions:
        files["txnindex"] = b"X" * 40
    for suffix, content in files.items():
        (directory / f"00000000000000001200.{suffix}").write_bytes(content)

    def path(suffix: str) -> str | None:
        return str(directory / f"00000000000000001200.{suffix}") if suffix in files else None

    return LogSegmentData(
        str(directory / "00000000000000001200.log"),
        str(directory / "00000000000000001200.index"),
        str(directory / "00000000000000001200.timeindex"),
        path("txnindex"),
        path("snapshot"),
        EPOCHS,
    )


def stored(rsm: ObjectStoreRemoteStorageManager) -> dict[str, bytes]:
    """Every object in the store, by key."""
    return {key: rsm.store.get(key) for key in rsm.store.list("")}


class RemoteStorageManagerContract:
    def test_a_copy_writes_every_object_and_a_manifest(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        m = metadata()
        rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment"))
        suffixes = {"log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint"}
        objects = stored(rsm)
        assert set(objects) == {object_key(m, s) for s in [*suffixes, MANIFEST_SUFFIX]}
        assert all(parse_object_key(key) is not None for key in objects)
        manifest = decode_manifest(objects[object_key(m, MANIFEST_SUFFIX)])
        finished = dataclasses.replace(m, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        assert (manifest.metadata, manifest.objects) == (finished, frozenset(suffixes))

    def test_ranges_and_indexes_read_back(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        m = metadata()
        data = segment_files(tmp_path / "segment", transactions=True)
        rsm.copy_log_segment_data(m, data)
        log = Path(data.log_segment).read_bytes()
        assert rsm.fetch_log_segment(m, 0, None) == log
        assert rsm.fetch_log_segment(m, 10, 19) == log[10:20]  # the end position is inclusive
        assert rsm.fetch_log_segment(m, 7, 7) == log[7:8]
        assert rsm.fetch_log_segment(m, 990, None) == log[990:]
        assert rsm.fetch_log_segment(m, 990, 5000) == log[990:]
        assert rsm.fetch_log_segment(m, len(log), None) == b""
        assert rsm.fetch_index(m, IndexType.OFFSET) == b"I" * 80
        assert rsm.fetch_index(m, IndexType.TIMESTAMP) == b"T" * 120
        assert rsm.fetch_index(m, IndexType.TRANSACTION) == b"X" * 40
        assert rsm.fetch_index(m, IndexType.PRODUCER_SNAPSHOT) == b"S" * 30
        assert rsm.fetch_index(m, IndexType.LEADER_EPOCH) == EPOCHS
        with pytest.raises(ValueError):
            rsm.fetch_log_segment(m, 20, 19)

    def test_a_missing_transaction_index_is_not_found(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        m = metadata()
        rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment"))
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(m, IndexType.TRANSACTION)

    def test_a_copy_again_changes_nothing(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        m = metadata()
        data = segment_files(tmp_path / "segment")
        rsm.copy_log_segment_data(m, data)
        before = stored(rsm)
        rsm.copy_log_segment_data(m, data)
        assert stored(rsm) == before

    def test_a_failed_copy_leaves_no_manifest(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        m = metadata()
        data = segment_files(tmp_path / "segment")
        os.remove(data.time_index)  # the segment went away under the copy
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(m, data)
        assert object_key(m, MANIFEST_SUFFIX) not in stored(rsm)

    def test_delete_removes_everything_and_may_be_repeated(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        kept, deleted = metadata(0), metadata(1200)
        rsm.copy_log_segment_data(kept, segment_files(tmp_path / "kept"))
        rsm.copy_log_segment_data(deleted, segment_files(tmp_path / "deleted", transactions=True))
        rsm.delete_log_segment_data(deleted)
        rsm.delete_log_segment_data(deleted)
        rsm.delete_log_segment_data(metadata(5000))  # never copied
        parsed = [parse_object_key(key) for key in stored(rsm)]
        assert {p.start_offset if p else None for p in parsed} == {0}
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(deleted, 0, None)
        assert rsm.fetch_log_segment(kept, 0, 9) == bytes(range(10))

    def test_two_uploads_of_the_same_offsets_share_no_object(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        first, second = metadata(), metadata()  # a new leader uploads the same offsets again
        rsm.copy_log_segment_data(first, segment_files(tmp_path / "segment"))
        rsm.copy_log_segment_data(second, segment_files(tmp_path / "segment"))
        rsm.delete_log_segment_data(first)
        assert rsm.fetch_index(second, IndexType.OFFSET) == b"I" * 80

    def test_listing_a_prefix_finds_only_its_keys(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        orders, orders_eu = metadata(topic="orders"), metadata(topic="orders-eu")
        rsm.copy_log_segment_data(orders, segment_files(tmp_path / "a"))
        rsm.copy_log_segment_data(orders_eu, segment_files(tmp_path / "b"))
        parsed = [parse_object_key(key) for key in rsm.store.list("")]
        assert {p.topic_partition.topic for p in parsed if p} == {"orders", "orders-eu"}
        assert set(rsm.store.list("orders-eu")) == {
            k for k in rsm.store.list("") if k.startswith("orders-eu")
        }
        assert len(set(rsm.store.list("orders-eu"))) == 6
        assert set(rsm.store.list(object_key(orders, ""))) == {
            object_key(orders, suffix)
            for suffix in ["log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint"]
        } | {object_key(orders, MANIFEST_SUFFIX)}
        assert list(rsm.store.list("nothing-here/")) == []

    def test_listing_folders(self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path) -> None:
        orders, orders_eu = metadata(topic="orders"), metadata(topic="orders-eu")
        rsm.copy_log_segment_data(orders, segment_files(tmp_path / "a"))
        rsm.copy_log_segment_data(orders_eu, segment_files(tmp_path / "b"))
        topic_id = uuid_to_kafka_str(TOPIC_ID)
        assert sorted(rsm.store.list_folders("")) == sorted(
            [f"orders-eu-{topic_id}/", f"orders-{topic_id}/"]
        )
        assert list(rsm.store.list_folders("orders-e")) == [f"orders-eu-{topic_id}/"]
        assert list(rsm.store.list_folders(f"orders-{topic_id}/")) == [f"orders-{topic_id}/3/"]
        assert list(rsm.store.list_folders(f"orders-{topic_id}/3/")) == []
        assert list(rsm.store.list_folders("nothing-here/")) == []

    def test_threads_share_one_manager(
        self, rsm: ObjectStoreRemoteStorageManager, tmp_path: Path
    ) -> None:
        # The RemoteLogManager's copier and reader pools call one manager from many threads.
        segments = [metadata(start) for start in range(0, 800, 100)]
        data = segment_files(tmp_path / "segment")

        def copy_and_read(m: RemoteLogSegmentMetadata) -> bytes:
            rsm.copy_log_segment_data(m, data)
            return rsm.fetch_log_segment(m, 5, 14) + rsm.fetch_index(m, IndexType.OFFSET)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(copy_and_read, segments))
        assert results == [bytes(range(5, 15)) + b"I" * 80] * len(segments)
        assert len(stored(rsm)) == 6 * len(segments)
