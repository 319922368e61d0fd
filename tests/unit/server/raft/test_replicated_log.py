"""The ReplicatedLog contract, held by KafkaMetadataLog (Tiercel's UnifiedLog on disk) and
by the tests' MockLog alike: leader and follower appends, epochs and their end offsets,
fetch validation (valid, diverging, snapshot), truncation, snapshots and the log start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from mock_raft_log import MockLog
from raft_support import MockTime, batch

from tiercel.server.raft.errors import UnexpectedBaseOffsetError
from tiercel.server.raft.kafka_metadata_log import KafkaMetadataLog
from tiercel.server.raft.metadata_log_config import MetadataLogConfig
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch, ValidOffsetAndEpoch
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_iterator import iter_decoded_batches
from tiercel.server.raft.records_snapshot import RecordsSnapshotReader, RecordsSnapshotWriter
from tiercel.server.raft.replicated_log import (
    Isolation,
    ReplicatedLog,
    truncate_to_end_offset,
    validate_offset_and_epoch,
)
from tiercel.storage.log_values import LogOffsetMetadata
from tiercel.storage.scheduler import Scheduler

Kind = ValidOffsetAndEpoch.Kind
SMALL = MetadataLogConfig(log_segment_bytes=1024, log_segment_min_bytes=64, file_delete_delay_ms=0)


def values(log: ReplicatedLog, start: int, isolation: Isolation) -> list[bytes]:
    records = log.read(start, isolation).records
    return [v for b in iter_decoded_batches(records, IdentitySerde()) for v in b.records]


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()


OpenLog = Callable[[], Coroutine[Any, Any, ReplicatedLog]]


@pytest.fixture(params=["kafka", "mock"])
async def open_log(
    request: pytest.FixtureRequest, tmp_path: Path, scheduler: Scheduler
) -> AsyncIterator[OpenLog]:
    opened: list[ReplicatedLog] = []
    mock = MockLog()

    async def open_() -> ReplicatedLog:
        if request.param == "mock":
            log: ReplicatedLog = mock
        else:
            directory = str(tmp_path / "__cluster_metadata-0")
            log = await KafkaMetadataLog.open(directory, MockTime(), scheduler, SMALL)
        opened.append(log)
        return log

    yield open_
    for log in opened:
        if isinstance(log, KafkaMetadataLog) and not log.log.deleted:
            await log.close()


def fill(log: ReplicatedLog) -> None:
    """Epoch 1 at 0-2, epoch 3 at 3-5, epoch 5 at 6-7 (three batches of 1, 2 records)."""
    log.append_as_leader(batch(0, 1, b"a", b"b", b"c"), 1)
    log.append_as_leader(batch(3, 3, b"d"), 3)
    log.append_as_leader(batch(4, 3, b"e", b"f"), 3)
    log.append_as_leader(batch(6, 5, b"g", b"h"), 5)


async def test_empty_log(open_log: OpenLog) -> None:
    log = await open_log()
    assert (log.start_offset, log.end_offset.message_offset, log.last_fetched_epoch) == (0, 0, 0)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert validate_offset_and_epoch(log, 0, 0).kind is Kind.VALID
    assert log.latest_snapshot_id() is None


async def test_appends_reads_and_epochs(open_log: OpenLog) -> None:
    log = await open_log()
    fill(log)
    assert log.end_offset.message_offset == 8 and log.last_fetched_epoch == 5
    with pytest.raises(UnexpectedBaseOffsetError):
        log.append_as_leader(batch(3, 5), 5)
    assert [v.decode() for v in values(log, 0, Isolation.UNCOMMITTED)] == list("abcdefgh")
    assert values(log, 0, Isolation.COMMITTED) == []
    log.update_high_watermark(LogOffsetMetadata(4))
    # Whole batches up to the high watermark: the one holding offset 3 ends at it.
    assert [v.decode() for v in values(log, 1, Isolation.COMMITTED)] == ["a", "b", "c", "d"]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(3, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(3, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(6, 3)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(8, 5)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(8, 5)
    log.initialize_leader_epoch(7)
    assert log.last_fetched_epoch == 7 and log.end_offset_for_epoch(5) == OffsetAndEpoch(8, 5)


async def test_fetch_validation(open_log: OpenLog) -> None:
    log = await open_log()
    fill(log)
    assert validate_offset_and_epoch(log, 6, 3).kind is Kind.VALID
    assert validate_offset_and_epoch(log, 8, 5).kind is Kind.VALID
    # A follower ahead in epoch 3, or on an epoch this log never had, diverges.
    assert validate_offset_and_epoch(log, 7, 3) == ValidOffsetAndEpoch.diverging(
        OffsetAndEpoch(6, 3)
    )
    assert validate_offset_and_epoch(log, 5, 2) == ValidOffsetAndEpoch.diverging(
        OffsetAndEpoch(3, 1)
    )
    assert validate_offset_and_epoch(log, 9, 5) == ValidOffsetAndEpoch.diverging(
        OffsetAndEpoch(8, 5)
    )


@pytest.mark.parametrize(
    ("leader_end", "truncated_to"),
    [
        # Kafka's truncateToEndOffset: the leader's epoch end when this log has the epoch
        (OffsetAndEpoch(5, 3), 5),
        (OffsetAndEpoch(7, 3), 6),  # never past this log's own end of the epoch
        # else the end of this log's largest epoch below it
        (OffsetAndEpoch(5, 2), 3),
        (OffsetAndEpoch(2, 0), 2),
    ],
)
async def test_truncate_to_end_offset(
    open_log: OpenLog, leader_end: OffsetAndEpoch, truncated_to: int
) -> None:
    log = await open_log()
    fill(log)
    assert truncate_to_end_offset(log, leader_end) == truncated_to
    assert log.end_offset.message_offset <= truncated_to


async def test_truncation_below_the_high_watermark_is_refused(open_log: OpenLog) -> None:
    log = await open_log()
    fill(log)
    log.update_high_watermark(LogOffsetMetadata(6))
    with pytest.raises(ValueError, match="below"):
        log.truncate_to(4)
    log.truncate_to(6)
    assert (log.end_offset.message_offset, log.last_fetched_epoch) == (6, 3)
    log.append_as_follower(batch(6, 4, b"x"))
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(7, 4)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(7, 4)


async def write_snapshot(log: ReplicatedLog, snapshot_id: OffsetAndEpoch) -> None:
    raw = log.create_new_snapshot(snapshot_id)
    assert raw is not None
    writer = RecordsSnapshotWriter(raw, 1234, 1024, MockTime(), IdentitySerde())
    writer.append([b"state-" + str(snapshot_id.offset).encode()])
    await writer.freeze()


async def test_snapshots_and_the_log_start(open_log: OpenLog) -> None:
    log = await open_log()
    fill(log)
    log.update_high_watermark(LogOffsetMetadata(6))
    with pytest.raises(ValueError, match="high-watermark"):
        log.create_new_snapshot(OffsetAndEpoch(8, 5))
    with pytest.raises(ValueError, match="not valid"):
        log.create_new_snapshot(OffsetAndEpoch(6, 1))
    with pytest.raises(ValueError, match="batch aligned"):
        log.create_new_snapshot(OffsetAndEpoch(5, 3))
    await write_snapshot(log, OffsetAndEpoch(3, 1))
    await write_snapshot(log, OffsetAndEpoch(6, 3))
    assert log.create_new_snapshot(OffsetAndEpoch(6, 3)) is None  # exists
    assert log.latest_snapshot_id() == OffsetAndEpoch(6, 3)
    assert log.earliest_snapshot_id() == OffsetAndEpoch(3, 1)
    reader = log.latest_snapshot()
    assert reader is not None
    snapshot = RecordsSnapshotReader(reader, IdentitySerde())
    assert snapshot.last_contained_log_timestamp == 1234
    assert [list(b.records) for b in snapshot] == [[], [b"state-6"], []]

    assert log.delete_before_snapshot(OffsetAndEpoch(6, 3))
    assert log.start_offset == 6 and log.earliest_snapshot_id() == OffsetAndEpoch(6, 3)
    assert log.read_snapshot(OffsetAndEpoch(3, 1)) is None
    assert log.create_new_snapshot(OffsetAndEpoch(3, 1)) is None  # below the log start
    # A fetch below the log start, or on an epoch older than the snapshot's, gets it.
    assert validate_offset_and_epoch(log, 2, 1) == ValidOffsetAndEpoch.snapshot(
        OffsetAndEpoch(6, 3)
    )
    assert validate_offset_and_epoch(log, 6, 1).kind is Kind.SNAPSHOT
    assert validate_offset_and_epoch(log, 6, 3).kind is Kind.VALID
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(6, 3)


async def test_a_downloaded_snapshot_past_the_end_empties_the_log(open_log: OpenLog) -> None:
    log = await open_log()
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    raw = log.create_new_snapshot_unchecked(OffsetAndEpoch(20, 4))
    assert raw is not None
    raw.append(b"opaque bytes from the leader")
    await raw.freeze()
    assert log.truncate_to_latest_snapshot()
    assert (log.start_offset, log.end_offset.message_offset, log.last_fetched_epoch) == (20, 20, 4)
    assert log.high_watermark.message_offset == 20
    log.append_as_follower(batch(20, 4, b"c"))
    assert [v.decode() for v in values(log, 20, Isolation.UNCOMMITTED)] == ["c"]
