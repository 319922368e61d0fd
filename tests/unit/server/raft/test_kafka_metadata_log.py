"""KafkaMetadataLog on disk: Kafka's directory layout, recovery on open, snapshot files
(frozen, partial, deleted) and retention of old snapshots by size and time."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from raft_support import MockTime, batch, eventually
from test_replicated_log import SMALL, values, write_snapshot

from tiercel.server.raft.kafka_metadata_log import METADATA_TOPIC_ID, KafkaMetadataLog
from tiercel.server.raft.metadata_log_config import MetadataLogConfig
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.replicated_log import Isolation
from tiercel.storage.checkpoint_file import PartitionMetadataFile
from tiercel.storage.log_values import LogOffsetMetadata
from tiercel.storage.scheduler import Scheduler


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()


async def open_log(
    directory: Path,
    scheduler: Scheduler,
    config: MetadataLogConfig = SMALL,
    time: MockTime | None = None,
) -> KafkaMetadataLog:
    return await KafkaMetadataLog.open(str(directory), time or MockTime(), scheduler, config)


async def test_the_partition_directory_is_kafkas(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    log = await open_log(directory, scheduler)
    log.append_as_leader(batch(0, 1, b"a"), 1)
    log.append_as_leader(batch(1, 2, b"b"), 2)
    log.update_high_watermark(LogOffsetMetadata(2))
    await log.flush(False)
    await write_snapshot(log, OffsetAndEpoch(2, 2))
    await log.close()
    names = sorted(os.listdir(directory))
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    assert "00000000000000000002-0000000002.checkpoint" in names
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n2 1\n"
    assert PartitionMetadataFile(str(directory / "partition.metadata")).read() == METADATA_TOPIC_ID
    mode = os.stat(directory / "00000000000000000002-0000000002.checkpoint").st_mode
    assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # frozen: read-only


async def test_flushed_data_survives_a_crash_and_a_torn_tail_goes(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    log = await open_log(directory, scheduler)
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    log.append_as_leader(batch(2, 3, b"c"), 3)
    await log.flush(False)
    segment = directory / "00000000000000000000.log"
    with open(segment, "ab") as f:  # half a batch, as a crash mid-write leaves it
        f.write(batch(3, 3, b"torn")[:30])
    # No close: the next open is a recovery (Kafka never trusts a clean shutdown here).
    reopened = await open_log(directory, scheduler)
    assert reopened.end_offset.message_offset == 3
    assert reopened.last_fetched_epoch == 3
    assert reopened.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert [v.decode() for v in values(reopened, 0, Isolation.UNCOMMITTED)] == ["a", "b", "c"]
    await reopened.close()
    log.log.local_log.close()


async def test_open_keeps_frozen_snapshots_and_drops_the_rest(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    log = await open_log(directory, scheduler)
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    log.update_high_watermark(LogOffsetMetadata(2))
    await write_snapshot(log, OffsetAndEpoch(2, 1))
    partial = log.create_new_snapshot_unchecked(OffsetAndEpoch(9, 1))
    assert partial is not None
    partial.append(b"half a download")
    await log.close()
    (directory / "00000000000000000001-0000000001.checkpoint.deleted").write_bytes(b"x")
    reopened = await open_log(directory, scheduler)
    assert reopened.latest_snapshot_id() == OffsetAndEpoch(2, 1)
    names = [n for n in os.listdir(directory) if ".checkpoint" in n]
    assert names == ["00000000000000000002-0000000001.checkpoint"]
    await reopened.close()


async def test_a_snapshot_past_the_log_end_empties_the_log_on_open(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    # A follower that crashed after downloading a snapshot, before truncating its log.
    directory = tmp_path / "__cluster_metadata-0"
    log = await open_log(directory, scheduler)
    log.append_as_leader(batch(0, 1, b"a"), 1)
    raw = log.create_new_snapshot_unchecked(OffsetAndEpoch(50, 3))
    assert raw is not None
    raw.append(b"leader's snapshot")
    await raw.freeze()
    await log.close()
    reopened = await open_log(directory, scheduler)
    assert (reopened.start_offset, reopened.end_offset.message_offset) == (50, 50)
    assert reopened.last_fetched_epoch == 3
    await reopened.close()


async def fill_with_snapshots(log: KafkaMetadataLog, time: MockTime) -> None:
    """Ten one-record batches, a snapshot after every second one, 1 s apart."""
    for offset in range(10):
        log.append_as_leader(batch(offset, 1, b"x" * 200), 1)
        log.update_high_watermark(LogOffsetMetadata(offset + 1))
        if offset % 2 == 1:
            await write_snapshot(log, OffsetAndEpoch(offset + 1, 1))
            time.now += 1000


async def test_retention_by_size_keeps_the_latest_snapshot(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    time = MockTime()
    config = MetadataLogConfig(
        log_segment_bytes=600,
        log_segment_min_bytes=64,
        retention_max_bytes=1,
        file_delete_delay_ms=0,
    )
    log = await open_log(tmp_path / "__cluster_metadata-0", scheduler, config, time)
    await fill_with_snapshots(log, time)
    segments_before = len(log.log.segments)
    assert log.maybe_clean()
    assert log.earliest_snapshot_id() == log.latest_snapshot_id() == OffsetAndEpoch(10, 1)
    assert log.start_offset == 10 and len(log.log.segments) < segments_before
    assert not log.maybe_clean()

    def snapshot_files() -> list[str]:
        return [n for n in os.listdir(tmp_path / "__cluster_metadata-0") if ".checkpoint" in n]

    # Renamed .checkpoint.deleted at once, removed after file.delete.delay.ms (0 here).
    await eventually(lambda: snapshot_files() == ["00000000000000000010-0000000001.checkpoint"])
    await log.close()


async def test_retention_by_time(tmp_path: Path, scheduler: Scheduler) -> None:
    time = MockTime()
    config = MetadataLogConfig(
        log_segment_bytes=600,
        log_segment_min_bytes=64,
        retention_max_bytes=-1,
        retention_millis=60_000,
        file_delete_delay_ms=0,
    )
    log = await open_log(tmp_path / "__cluster_metadata-0", scheduler, config, time)
    await fill_with_snapshots(log, time)
    assert not log.maybe_clean()  # every snapshot says it contains data up to time 1234
    time.now = 1234 + 60_001
    assert log.maybe_clean()
    assert log.earliest_snapshot_id() == OffsetAndEpoch(10, 1) and log.start_offset == 10
    await log.close()
