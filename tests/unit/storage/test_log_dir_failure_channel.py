"""Log-dir failure (Kafka's LogDirFailureChannel): an I/O error takes the dir offline
once, later operations there are refused, and no recovery point moves past a failed
write or fsync; LogManager forgets an offline dir and its logs without writing there."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest
from log_support import open_log, partition_dir, produce, small_config

from tiercel.config.broker_config import BrokerConfig
from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage.checkpoint_file import OffsetCheckpointFile
from tiercel.storage.log_dir_failure_channel import LogDirFailureChannel
from tiercel.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

CONFIG = small_config(segment_bytes=1 << 20)
A0, B0, A1 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def eio(*_: object) -> int:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


async def two_dir_manager(tmp_path: Path, scheduler: Scheduler) -> LogManager:
    """Dirs a and b; t-0 and t-2 in a, t-1 in b (new logs go to the emptiest dir)."""
    config = BrokerConfig({"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")], "node.id": 1})
    lm = LogManager(config, scheduler, lambda _: CONFIG)
    await lm.startup(None)
    for tp in (A0, B0, A1):
        lm.get_or_create_log(tp, CONFIG, None)
    assert [os.path.basename(lm.logs[tp].parent_dir) for tp in (A0, B0, A1)] == ["a", "b", "a"]
    return lm


async def test_the_channel_reports_each_dir_once_in_order_from_any_thread() -> None:
    channel = LogDirFailureChannel()
    error = OSError(errno.EIO, "EIO")
    assert channel.maybe_add_offline_log_dir("/a", "fsync failed", error)
    assert not channel.maybe_add_offline_log_dir("/a", "again", error)
    assert await channel.take_next_offline_log_dir() == "/a"
    waiting = asyncio.ensure_future(channel.take_next_offline_log_dir())
    await asyncio.sleep(0)
    thread = threading.Thread(target=channel.maybe_add_offline_log_dir, args=("/b", "x", error))
    thread.start()
    thread.join()
    assert await asyncio.wait_for(waiting, 5) == "/b"
    assert channel.has_offline_log_dir("/a") and channel.has_offline_log_dir("/b")
    assert not channel.has_offline_log_dir("/c")


async def test_a_failed_fsync_takes_the_dir_offline_and_no_later_flush_moves_the_recovery_point(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = await two_dir_manager(tmp_path, scheduler)
    log, neighbour, other = lm.logs[A0], lm.logs[A1], lm.logs[B0]
    for each in (log, neighbour, other):
        produce(each, [b"a", b"b"])
        await each.flush()
        assert each.recovery_point == 2
        produce(each, [b"c", b"d"])
    await lm.checkpoint_recovery_points()
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", eio)
        with pytest.raises(KafkaStorageError):
            await log.flush()
    assert log.recovery_point == 2
    channel = lm.log_dir_failure_channel
    assert channel.has_offline_log_dir(str(tmp_path / "a"))
    # fsync works again (as Linux reports an error once, then drops the dirty pages): the
    # pages the failed fsync covered may be gone, so neither this log nor another in the
    # dir may claim them durable.
    for each in (log, neighbour):
        with pytest.raises(KafkaStorageError, match="already offline"):
            await each.flush()
        assert each.recovery_point == 2
    with pytest.raises(KafkaStorageError, match="already offline"):
        produce(log, [b"e"])
    await other.flush()
    assert other.recovery_point == 4
    assert await channel.take_next_offline_log_dir() == str(tmp_path / "a")

    assert sorted(lm.handle_log_dir_failure(str(tmp_path / "a"))) == [A0, A1]
    assert lm.log_dirs == [str(tmp_path / "b")] and list(lm.logs) == [B0]
    assert lm.offline_log_dirs == [str(tmp_path / "a")]
    before = (tmp_path / "a" / "recovery-point-offset-checkpoint").read_bytes()
    await lm.shutdown()
    # Nothing more was written in the offline dir: no checkpoint, no clean-shutdown
    # marker, so the next start recovers it from the recovery points it had.
    assert (tmp_path / "a" / "recovery-point-offset-checkpoint").read_bytes() == before
    assert OffsetCheckpointFile(tmp_path / "a" / "recovery-point-offset-checkpoint").read() == {
        A0: 2,
        A1: 2,
    }
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
    assert OffsetCheckpointFile(tmp_path / "b" / "recovery-point-offset-checkpoint").read() == {
        B0: 4
    }


async def test_a_failure_elsewhere_in_the_dir_during_a_flush_keeps_the_recovery_point(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = await two_dir_manager(tmp_path, scheduler)
    log = lm.logs[A0]
    produce(log, [b"a", b"b"])
    await log.flush_epoch_checkpoint()  # so that the flush below fsyncs only segments
    real_fsync = os.fsync

    def fsync_while_a_neighbour_fails(fd: int) -> None:
        lm.log_dir_failure_channel.maybe_add_offline_log_dir(
            str(tmp_path / "a"), "another log's fsync", OSError(errno.EIO, "EIO")
        )
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_while_a_neighbour_fails)
    await log.flush()  # this log's own fsyncs succeeded
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert log.recovery_point == 0
    lm.handle_log_dir_failure(str(tmp_path / "a"))
    await lm.shutdown()


async def test_a_failed_write_fails_the_append_and_refuses_the_next(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A log on its own (no LogManager) still remembers the failure.
    log = open_log(partition_dir(tmp_path / "d"), CONFIG, scheduler)
    produce(log, [b"a"])
    size = log.active_segment.size
    with monkeypatch.context() as patch:
        patch.setattr(os, "writev", eio)
        with pytest.raises(KafkaStorageError):
            produce(log, [b"b"])
    assert (log.log_end_offset, log.active_segment.size) == (1, size)
    with pytest.raises(KafkaStorageError, match="already offline"):
        produce(log, [b"c"])
    with pytest.raises(KafkaStorageError, match="already offline"):
        await log.flush()
    assert log.recovery_point == 0


async def test_a_write_failing_because_the_log_was_deleted_is_not_a_dir_failure(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = await two_dir_manager(tmp_path, scheduler)
    log = lm.logs[A0]
    produce(log, [b"a"])
    await log.flush_epoch_checkpoint()
    lm.delete_log(A0, "test")

    def renamed_away(_: object) -> bool:
        # What a checkpoint write meets when the directory is renamed between its
        # write and its rename.
        error = FileNotFoundError(errno.ENOENT, "No such file or directory")
        raise KafkaStorageError("Error while writing checkpoint file") from error

    with monkeypatch.context() as patch:
        patch.setattr(type(log.leader_epoch_cache), "flush", renamed_away)
        with pytest.raises(KafkaStorageError):
            log._write_epoch_checkpoint()
    assert not lm.log_dir_failure_channel.has_offline_log_dir(str(tmp_path / "a"))
    await lm.shutdown()


async def test_failed_producer_snapshot_and_segment_deletion_take_the_dir_offline(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = await two_dir_manager(tmp_path, scheduler)
    snapshotting, deleting = lm.logs[A0], lm.logs[B0]
    produce(snapshotting, [b"a"])
    await snapshotting.flush_epoch_checkpoint()
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", eio)
        snapshotting.producer_state.take_snapshot()
        await scheduler.drain()
    assert lm.log_dir_failure_channel.has_offline_log_dir(str(tmp_path / "a"))

    produce(deleting, [b"a"])
    deleting.roll()
    deleting.update_high_watermark(1)
    deleting.maybe_increment_log_start_offset(1)
    await scheduler.drain()
    with monkeypatch.context() as patch:
        patch.setattr(os, "rename", eio)
        with pytest.raises(KafkaStorageError):
            deleting.delete_old_segments()  # below the log start offset: segment 0 goes
    assert lm.log_dir_failure_channel.has_offline_log_dir(str(tmp_path / "b"))
    for path in (str(tmp_path / "a"), str(tmp_path / "b")):
        lm.handle_log_dir_failure(path)
    await lm.shutdown()


async def test_a_dir_failing_at_shutdown_gets_no_checkpoint_and_no_clean_marker(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = await two_dir_manager(tmp_path, scheduler)
    for tp in (A0, B0):
        produce(lm.logs[tp], [b"a", b"b"])
        await lm.logs[tp].flush_epoch_checkpoint()
    real_fsync = os.fsync
    failing = str(tmp_path / "a") + "/"

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(failing):
            eio()
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    await lm.shutdown()  # the close of t-0 and t-2 fails: dir a goes offline
    assert lm.offline_log_dirs == [str(tmp_path / "a")]
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    assert not (tmp_path / "a" / "recovery-point-offset-checkpoint").exists()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
    assert OffsetCheckpointFile(tmp_path / "b" / "recovery-point-offset-checkpoint").read() == {
        B0: 2
    }
