"""TopicBasedRemoteLogMetadataManager over an in-process __remote_log_metadata: the
manager's own serde, partitioner, consumer task and snapshots run for real; only the
topic is a list (support.in_process_metadata_topic)."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from support.in_process_metadata_topic import InProcessMetadataTopic
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rlmm.remote_log_metadata_serde import deserialize, serialize
from tiercel.tiered.rlmm.remote_log_metadata_snapshot_file import (
    MetadataPartitionSnapshot,
    PartitionView,
    read_snapshots,
    snapshot_path,
    write_snapshot,
)
from tiercel.tiered.rlmm.remote_log_metadata_topic_partitioner import (
    RemoteLogMetadataTopicPartitioner,
)
from tiercel.tiered.rlmm.remote_log_segment_metadata_snapshot import (
    RemoteLogSegmentMetadataSnapshot,
)
from tiercel.tiered.rlmm.topic_based_remote_log_metadata_manager import (
    TopicBasedRemoteLogMetadataManager,
)
from tiercel.tiered.rlmm.topic_based_rlmm_config import TopicBasedRemoteLogMetadataManagerConfig
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

PARTITIONS = 3
CONFIG = TopicBasedRemoteLogMetadataManagerConfig(
    topic_num_partitions=PARTITIONS,
    consume_wait_ms=5_000,
    fetch_max_wait_ms=50,
    retry_backoff_ms=10,
    retry_backoff_max_ms=40,
    snapshot_interval_ms=3_600_000,
)
TOPIC_ID = uuid.UUID("8f0a3b6e-2c41-4d7e-9a55-0b1c2d3e4f60")
PARTITIONER = RemoteLogMetadataTopicPartitioner(PARTITIONS)


def _tp(partition: int, topic_id: uuid.UUID = TOPIC_ID) -> TopicIdPartition:
    return TopicIdPartition(topic_id, TopicPartition("orders", partition))


def _same_metadata_partition_pair() -> tuple[TopicIdPartition, TopicIdPartition]:
    first = _tp(0)
    for n in range(1, 100):
        if PARTITIONER.metadata_partition(_tp(n)) == PARTITIONER.metadata_partition(first):
            return first, _tp(n)
    raise AssertionError("no two partitions share a metadata partition")


TP, TP_SAME_METADATA = _same_metadata_partition_pair()
MP = PARTITIONER.metadata_partition(TP)


def _segment(
    tp: TopicIdPartition, start: int, end: int, epoch: int = 0
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp.topic_id, tp.topic_partition, uuid.uuid4()),
        start,
        end,
        max_timestamp_ms=end,
        broker_id=1,
        event_timestamp_ms=start,
        segment_size_in_bytes=end - start + 1,
        segment_leader_epochs={epoch: start},
    )


def _finished(segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        segment.remote_log_segment_id, 5, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
    )


async def _eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


ManagerFactory = Callable[..., TopicBasedRemoteLogMetadataManager]


@pytest.fixture
def topic() -> InProcessMetadataTopic:
    return InProcessMetadataTopic(PARTITIONS)


@pytest.fixture
async def new_manager(topic: InProcessMetadataTopic) -> AsyncIterator[ManagerFactory]:
    managers: list[TopicBasedRemoteLogMetadataManager] = []

    def make(
        name: str = "broker-1",
        snapshot_dir: str | None = None,
        config: TopicBasedRemoteLogMetadataManagerConfig = CONFIG,
    ) -> TopicBasedRemoteLogMetadataManager:
        manager = TopicBasedRemoteLogMetadataManager(topic.client(name), config, snapshot_dir)
        manager.start()
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        await manager.close()


async def _leader(
    new_manager: ManagerFactory, *partitions: TopicIdPartition, **kw: Any
) -> TopicBasedRemoteLogMetadataManager:
    manager = new_manager(**kw)
    manager.on_partition_leadership_changes(set(partitions), set())
    await _eventually(lambda: all(manager.is_ready(p) for p in partitions))
    return manager


async def test_a_write_returns_once_produced_and_applied(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    manager = await _leader(new_manager, TP)
    segment = _segment(TP, 0, 99)

    await manager.add_remote_log_segment_metadata(segment)

    # Kafka's bytes in the metadata partition the partitioner names, and already applied.
    assert topic.logs[MP] == [(0, serialize(segment))]
    assert manager.read_offset(MP) == 0
    assert manager.list_remote_log_segments(TP) == [segment]
    assert manager.remote_log_segment_metadata(TP, 0, 50) is None  # not finished yet

    await manager.update_remote_log_segment_metadata(_finished(segment))

    found = manager.remote_log_segment_metadata(TP, 0, 50)
    assert found is not None and found.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert manager.highest_offset_for_epoch(TP, 0) == 99
    assert manager.remote_log_size(TP, 0) == 100
    assert isinstance(deserialize(topic.logs[MP][1][1]), RemoteLogSegmentMetadataUpdate)


async def test_invalid_writes_are_refused_before_producing(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    manager = await _leader(new_manager, TP)
    segment = _segment(TP, 0, 9)
    with pytest.raises(RemoteResourceNotFoundError):
        await manager.update_remote_log_segment_metadata(_finished(segment))
    await manager.add_remote_log_segment_metadata(segment)
    await manager.update_remote_log_segment_metadata(_finished(segment))
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        await manager.add_remote_log_segment_metadata(
            segment.create_with_updates(_finished(segment))
        )
    with pytest.raises(ValueError, match="cannot go from"):
        await manager.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                segment.remote_log_segment_id, 9, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 1
            )
        )
    assert len(topic.logs[MP]) == 2
    # A write for a partition this broker does not follow is refused too.
    with pytest.raises(RemoteStorageError, match="not followed here"):
        await manager.add_remote_log_segment_metadata(_segment(_tp(0, uuid.uuid4()), 0, 9))


async def test_a_follower_sees_the_leaders_writes(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    leader = await _leader(new_manager, TP, name="broker-1")
    follower = new_manager(name="broker-2")
    follower.on_partition_leadership_changes(set(), {TP})
    await _eventually(lambda: follower.is_ready(TP))

    segment = _segment(TP, 0, 99)
    await leader.add_remote_log_segment_metadata(segment)
    await leader.update_remote_log_segment_metadata(_finished(segment))

    await _eventually(lambda: follower.remote_log_segment_metadata(TP, 0, 0) is not None)
    assert follower.list_remote_log_segments(TP) == leader.list_remote_log_segments(TP)
    # The follower, now leader, continues the segment's life.
    delete = RemoteLogSegmentMetadataUpdate(
        segment.remote_log_segment_id, 9, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 2
    )
    await follower.update_remote_log_segment_metadata(delete)
    await _eventually(
        lambda: (
            leader.list_remote_log_segments(TP)[0].state
            == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
        )
    )


async def test_ready_once_the_metadata_partition_is_read_to_its_high_watermark(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    segments = [_segment(TP, i * 10, i * 10 + 9) for i in range(20)]
    writer = await _leader(new_manager, TP, name="writer")
    for segment in segments:
        await writer.add_remote_log_segment_metadata(segment)
        await writer.update_remote_log_segment_metadata(_finished(segment))
    await writer.close()
    # A long backoff before the first fetch: the view cannot be ready before then.
    topic.failing_fetches = 1
    slow = TopicBasedRemoteLogMetadataManagerConfig(
        topic_num_partitions=PARTITIONS, retry_backoff_ms=300, retry_backoff_max_ms=300
    )
    reader = new_manager(name="reader", config=slow)
    reader.on_partition_leadership_changes(set(), {TP})
    await asyncio.sleep(0.1)
    assert not reader.is_ready(TP)
    assert reader.list_remote_log_segments(TP) == []  # loaded, empty, not ready

    await _eventually(lambda: reader.is_ready(TP))

    assert len(reader.list_remote_log_segments(TP)) == 20
    assert reader.highest_offset_for_epoch(TP, 0) == 199


async def test_a_new_partition_on_a_metadata_partition_already_read_reads_it_again(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    writer = await _leader(new_manager, TP, TP_SAME_METADATA, name="writer")
    first, second = _segment(TP, 0, 9), _segment(TP_SAME_METADATA, 0, 9)
    await writer.add_remote_log_segment_metadata(first)
    await writer.add_remote_log_segment_metadata(second)
    await writer.update_remote_log_segment_metadata(_finished(first))

    reader = await _leader(new_manager, TP, name="reader")
    assert (
        reader.list_remote_log_segments(TP)[0].state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    )
    with pytest.raises(RemoteResourceNotFoundError):
        reader.list_remote_log_segments(TP_SAME_METADATA)  # not followed: skipped

    reader.on_partition_leadership_changes({TP_SAME_METADATA}, set())
    await _eventually(lambda: reader.is_ready(TP_SAME_METADATA))

    # Read from the start again for the newcomer; TP's records are not applied twice.
    assert reader.list_remote_log_segments(TP_SAME_METADATA) == [second]
    assert reader.list_remote_log_segments(TP) == writer.list_remote_log_segments(TP)
    asked = [offset for name, mp, offset in topic.fetches if name == "reader" and mp == MP]
    assert asked.count(0) == 2  # at the first assignment and at the second


async def test_stopping_a_partition_drops_its_view(new_manager: ManagerFactory) -> None:
    manager = await _leader(new_manager, TP)
    await manager.add_remote_log_segment_metadata(_segment(TP, 0, 9))
    manager.on_stop_partitions({TP})
    assert not manager.is_ready(TP)
    with pytest.raises(RemoteResourceNotFoundError):
        manager.list_remote_log_segments(TP)


async def test_partition_delete_states(new_manager: ManagerFactory) -> None:
    manager = await _leader(new_manager, TP)

    def delete(state: RemotePartitionDeleteState) -> RemotePartitionDeleteMetadata:
        return RemotePartitionDeleteMetadata(TP, state, 1, 1)

    await manager.put_remote_partition_delete_metadata(
        delete(RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
    )
    with pytest.raises(ValueError, match="cannot go from"):
        await manager.put_remote_partition_delete_metadata(
            delete(RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        )
    await manager.put_remote_partition_delete_metadata(
        delete(RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
    )
    await manager.put_remote_partition_delete_metadata(
        delete(RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
    )
    assert manager.list_remote_log_segments(TP) == []


async def test_partition_delete_markers_read_back_leave_the_partition_tierable(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    """A topic whose remote storage earlier Tiercel versions turned off has its segments'
    deletions and the partition delete markers in the metadata topic; tiered again under
    the same id, it reads them back at assignment. Before, DELETE_PARTITION_FINISHED
    dropped the partition's view, and every lookup and new copy of it failed for good
    with RemoteResourceNotFoundError."""
    topic.created = True
    old = _segment(TP, 0, 9)
    P, S = RemotePartitionDeleteState, RemoteLogSegmentState
    for record in (
        old,
        _finished(old),
        RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_MARKED, 6, 1),
        RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_STARTED, 7, 1),
        RemoteLogSegmentMetadataUpdate(old.remote_log_segment_id, 8, S.DELETE_SEGMENT_STARTED, 1),
        RemoteLogSegmentMetadataUpdate(old.remote_log_segment_id, 9, S.DELETE_SEGMENT_FINISHED, 1),
        RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_FINISHED, 10, 1),
    ):
        topic.append(MP, serialize(record))
    manager = await _leader(new_manager, TP)
    assert manager.list_remote_log_segments(TP) == []
    assert manager.highest_offset_for_epoch(TP, 0) is None
    new = _segment(TP, 10, 19)
    await manager.add_remote_log_segment_metadata(new)
    await manager.update_remote_log_segment_metadata(_finished(new))
    assert manager.highest_offset_for_epoch(TP, 0) == 19


async def test_a_poison_record_is_skipped(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    topic.created = True
    good = _segment(TP, 0, 9)
    topic.append(MP, b"\x01\x00\x00garbage")
    topic.append(MP, serialize(_finished(good)))  # an update of an unknown segment
    topic.append(MP, serialize(good))

    with caplog.at_level(logging.ERROR, logger="tiercel.rlmm"):
        manager = await _leader(new_manager, TP)

    assert manager.list_remote_log_segments(TP) == [good]
    assert caplog.text.count("rlmm_record_skipped") == 2
    # And the task carries on with later records.
    later = _segment(TP, 10, 19)
    await manager.add_remote_log_segment_metadata(later)
    assert len(manager.list_remote_log_segments(TP)) == 2


async def test_fetch_failures_are_retried(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    topic.failing_fetches = 3
    manager = await _leader(new_manager, TP)
    await manager.add_remote_log_segment_metadata(_segment(TP, 0, 9))
    assert topic.failing_fetches == 0


async def test_a_write_not_acknowledged_in_time_raises(
    topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    quick = TopicBasedRemoteLogMetadataManagerConfig(
        topic_num_partitions=PARTITIONS, consume_wait_ms=200, fetch_max_wait_ms=50
    )
    manager = await _leader(new_manager, TP, config=quick)
    topic.produce_hangs = True
    with pytest.raises(RemoteStorageError, match="within 200 ms"):
        await manager.add_remote_log_segment_metadata(_segment(TP, 0, 9))


async def test_restart_from_the_snapshot_reads_only_the_tail(
    tmp_path: os.PathLike[str], topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    snapshots = os.fspath(tmp_path)
    first = await _leader(new_manager, TP, name="before", snapshot_dir=snapshots)
    segments = [_segment(TP, i * 10, i * 10 + 9) for i in range(5)]
    for segment in segments:
        await first.add_remote_log_segment_metadata(segment)
        await first.update_remote_log_segment_metadata(_finished(segment))
    await first.close()
    assert os.path.exists(snapshot_path(snapshots, MP))
    tail = topic.end_offset(MP)
    # Another broker writes while this one is down.
    other = await _leader(new_manager, TP, name="other")
    extra = _segment(TP, 50, 59)
    await other.add_remote_log_segment_metadata(extra)

    restarted = await _leader(new_manager, TP, name="after", snapshot_dir=snapshots)

    asked = [offset for name, mp, offset in topic.fetches if name == "after" and mp == MP]
    assert asked[0] == tail
    listed = restarted.list_remote_log_segments(TP)
    assert listed == other.list_remote_log_segments(TP)
    assert len(listed) == 6
    assert restarted.highest_offset_for_epoch(TP, 0) == 49


async def test_a_corrupt_snapshot_is_ignored(
    tmp_path: os.PathLike[str],
    topic: InProcessMetadataTopic,
    new_manager: ManagerFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    snapshots = os.fspath(tmp_path)
    first = await _leader(new_manager, TP, name="before", snapshot_dir=snapshots)
    segment = _segment(TP, 0, 9)
    await first.add_remote_log_segment_metadata(segment)
    await first.close()
    path = snapshot_path(snapshots, MP)
    with open(path, "r+b") as file:
        file.seek(20)
        byte = file.read(1)
        file.seek(20)
        file.write(bytes([byte[0] ^ 0xFF]))

    with caplog.at_level(logging.WARNING, logger="tiercel.rlmm"):
        restarted = await _leader(new_manager, TP, name="after", snapshot_dir=snapshots)

    assert "rlmm_snapshot_ignored" in caplog.text
    asked = [offset for name, mp, offset in topic.fetches if name == "after" and mp == MP]
    assert asked[0] == 0
    assert restarted.list_remote_log_segments(TP) == [segment]


async def test_a_snapshot_without_the_partition_reads_from_the_start(
    tmp_path: os.PathLike[str], topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    snapshots = os.fspath(tmp_path)
    writer = await _leader(new_manager, TP, TP_SAME_METADATA, name="writer")
    other_segment = _segment(TP_SAME_METADATA, 0, 9)
    await writer.add_remote_log_segment_metadata(other_segment)
    first = await _leader(new_manager, TP, name="before", snapshot_dir=snapshots)
    await writer.add_remote_log_segment_metadata(_segment(TP, 0, 9))
    await _eventually(lambda: first.read_offset(MP) == 1)
    await first.close()

    restarted = await _leader(new_manager, TP_SAME_METADATA, name="after", snapshot_dir=snapshots)

    assert restarted.list_remote_log_segments(TP_SAME_METADATA) == [other_segment]


async def test_a_snapshot_view_that_does_not_rebuild_is_read_again(
    tmp_path: os.PathLike[str], topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    snapshots = os.fspath(tmp_path)
    writer = await _leader(new_manager, TP, name="writer")
    segment = _segment(TP, 0, 9)
    await writer.add_remote_log_segment_metadata(segment)
    # Intact bytes, impossible content: a segment without leader epochs.
    broken = RemoteLogSegmentMetadataSnapshot(uuid.uuid4(), 0, 9, 9, 1, 0, 10, {})
    write_snapshot(snapshots, MetadataPartitionSnapshot(MP, 0, {TP: PartitionView([broken])}))

    restarted = await _leader(new_manager, TP, name="after", snapshot_dir=snapshots)

    asked = [offset for name, mp, offset in topic.fetches if name == "after" and mp == MP]
    assert asked[0] == 0
    assert restarted.list_remote_log_segments(TP) == [segment]


async def test_snapshots_are_written_periodically(
    tmp_path: os.PathLike[str], topic: InProcessMetadataTopic, new_manager: ManagerFactory
) -> None:
    snapshots = os.fspath(tmp_path)
    often = TopicBasedRemoteLogMetadataManagerConfig(
        topic_num_partitions=PARTITIONS, fetch_max_wait_ms=50, snapshot_interval_ms=20
    )
    manager = await _leader(new_manager, TP, snapshot_dir=snapshots, config=often)
    await manager.add_remote_log_segment_metadata(_segment(TP, 0, 9))
    await manager.add_remote_log_segment_metadata(_segment(TP, 10, 19))

    def consumed() -> int | None:
        found = read_snapshots(snapshots).get(MP)
        return None if found is None else found.consumed_offset

    await _eventually(lambda: consumed() == 1)
    assert len(read_snapshots(snapshots)[MP].partitions[TP].segments) == 2
