"""LogManager: log dirs and meta.properties, loading partitions, offset checkpoints, the
clean-shutdown marker, creating and deleting logs, retention and flush passes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from log_support import BASE_TS, log_records, produce, small_config

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage import local_log as log_module
from tiercel.storage.checkpoint_file import OffsetCheckpointFile, PartitionMetadataFile
from tiercel.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from tiercel.storage.meta_properties import MetaProperties
from tiercel.storage.offset_map import OffsetMap
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

CONFIG = small_config()
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


def broker(dirs: list[Path], node_id: int = 1, **settings: object) -> BrokerConfig:
    return BrokerConfig({"log.dirs": [str(d) for d in dirs], "node.id": node_id, **settings})


def copy_if_present(src: str, dst: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(src, dst)


def manager(
    dirs: list[Path],
    scheduler: Scheduler,
    node_id: int = 1,
    config_for: Callable[[str], LogConfig] = lambda topic: CONFIG,
    **settings: object,
) -> LogManager:
    return LogManager(broker(dirs, node_id, **settings), scheduler, config_for)


def fill(log: object, batches: int) -> None:
    for i in range(batches):
        produce(log, [b"%03d" % i * 10, b"x"], [BASE_TS + i, BASE_TS + i])  # type: ignore[arg-type]


def checkpoint(path: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(path).read()


# -- start-up ----------------------------------------------------------------------------


async def test_startup_creates_dirs_and_meta_properties(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs, scheduler, node_id=7)
    cluster_id = await lm.startup(None)
    assert len(cluster_id) == 22
    directory_ids = set()
    for d in dirs:
        meta = MetaProperties.read(str(d))
        assert meta is not None and (meta.cluster_id, meta.node_id) == (cluster_id, 7)
        assert meta.directory_id is not None and meta.directory_id.int >= 100
        directory_ids.add(meta.directory_id)
        text = (d / "meta.properties").read_text()
        assert "node.id=7\n" in text and "version=1\n" in text
        assert f"cluster.id={cluster_id}\n" in text
    assert len(directory_ids) == len(dirs)
    assert lm.log_dirs == [str(d) for d in dirs]
    await lm.shutdown()
    # the same dirs keep their cluster id
    again = manager(dirs, scheduler, node_id=7)
    assert await again.startup(None) == cluster_id
    await again.shutdown()


async def test_startup_uses_the_given_cluster_id(tmp_path: Path, scheduler: Scheduler) -> None:
    lm = manager([tmp_path / "a"], scheduler)
    assert await lm.startup("AAAAAAAAAAAAAAAAAAAAAA") == "AAAAAAAAAAAAAAAAAAAAAA"
    await lm.shutdown()
    other = manager([tmp_path / "a"], scheduler)
    with pytest.raises(KafkaStorageError, match=r"cluster\.id"):
        await other.startup("BBBBBBBBBBBBBBBBBBBBBB")


async def test_startup_takes_a_kraft_nodes_formatted_dirs_as_read(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    # A KRaft node read and verified its meta.properties once (KafkaRaftServer's
    # initializeLogDirs): the LogManager neither reads nor writes them again, so these
    # dirs, formatted only in what it is handed, stay without the file.
    dirs = [tmp_path / "a", tmp_path / "b"]
    formatted = {str(d): MetaProperties("AAAAAAAAAAAAAAAAAAAAAA", 1, uuid.uuid4()) for d in dirs}
    for d in dirs:
        d.mkdir()
    lm = manager(dirs, scheduler)
    assert await lm.startup("AAAAAAAAAAAAAAAAAAAAAA", formatted) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert not any((d / "meta.properties").exists() for d in dirs)
    await lm.shutdown()
    # A dir missing from them, or another cluster's, is a bug of the caller's.
    for handed, cluster_id in (
        ({str(dirs[0]): formatted[str(dirs[0])]}, None),
        (formatted, "B" * 22),
    ):
        with pytest.raises(KafkaStorageError, match="not all formatted"):
            await manager(dirs, scheduler).startup(cluster_id, handed)


async def test_startup_refuses_another_nodes_log_dir(tmp_path: Path, scheduler: Scheduler) -> None:
    lm = manager([tmp_path / "a"], scheduler, node_id=1)
    await lm.startup(None)
    await lm.shutdown()
    other = manager([tmp_path / "a"], scheduler, node_id=2)
    with pytest.raises(KafkaStorageError, match=r"node\.id"):
        await other.startup(None)


async def test_marker_removed_at_startup_and_written_at_shutdown(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs, scheduler)
    await lm.startup(None)
    assert not lm.had_clean_shutdown  # fresh dirs carry no marker
    await lm.shutdown()
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    lm = manager(dirs, scheduler)
    await lm.startup(None)
    assert lm.had_clean_shutdown
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    await lm.shutdown()
    (dirs[1] / CLEAN_SHUTDOWN_FILE).unlink()  # one dir did not stop cleanly
    lm = manager(dirs, scheduler)
    await lm.startup(None)
    assert not lm.had_clean_shutdown
    await lm.shutdown()


# -- logs --------------------------------------------------------------------------------


async def test_get_or_create_log_spreads_over_dirs(tmp_path: Path, scheduler: Scheduler) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs, scheduler)
    await lm.startup(None)
    topic_id = uuid.uuid4()
    first = lm.get_or_create_log(TP0, CONFIG, topic_id)
    second = lm.get_or_create_log(TP1, CONFIG, topic_id)
    assert lm.get_or_create_log(TP0, CONFIG, topic_id) is first
    assert lm.get_log(TP0) is first
    assert lm.get_log(TopicPartition("orders", 9)) is None
    assert {os.path.dirname(first.dir), os.path.dirname(second.dir)} == {str(d) for d in dirs}
    assert os.path.basename(first.dir) == "orders-0"
    assert sorted(os.listdir(first.dir))[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    assert first.log_end_offset == 0 and first.topic_id == topic_id
    await scheduler.drain()
    assert PartitionMetadataFile(os.path.join(first.dir, "partition.metadata")).read() == topic_id
    await lm.shutdown()


async def test_shutdown_writes_checkpoints_and_startup_loads_them(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    root = tmp_path / "a"
    lm = manager([root], scheduler)
    await lm.startup(None)
    log0 = lm.get_or_create_log(TP0, CONFIG, uuid.uuid4())
    log1 = lm.get_or_create_log(TP1, CONFIG, None)
    fill(log0, 30)
    fill(log1, 3)
    log0.update_high_watermark(50)
    log0.maybe_increment_log_start_offset(20)
    log1.update_high_watermark(4)
    await lm.shutdown()
    assert checkpoint(root / "recovery-point-offset-checkpoint") == {TP0: 60, TP1: 6}
    assert checkpoint(root / "replication-offset-checkpoint") == {TP0: 50, TP1: 4}
    assert checkpoint(root / "log-start-offset-checkpoint") == {TP0: 20, TP1: 0}
    assert (root / CLEAN_SHUTDOWN_FILE).exists()

    lm = manager([root], scheduler)
    await lm.startup(None)
    assert set(lm.logs) == {TP0, TP1}
    loaded = lm.get_log(TP0)
    assert loaded is not None and loaded.topic_id == log0.topic_id
    assert (loaded.log_end_offset, loaded.high_watermark) == (60, 50)
    assert (loaded.log_start_offset, loaded.recovery_point) == (20, 60)
    assert [r.offset for r in log_records(loaded)] == list(range(60))
    assert lm.get_log(TP1).high_watermark == 4  # type: ignore[union-attr]
    await lm.shutdown()


async def test_unclean_startup_recovers_from_the_recovery_point(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    root = tmp_path / "a"
    lm = manager([root], scheduler)
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, CONFIG, None)
    fill(log, 30)
    log.update_high_watermark(60)
    await lm.shutdown()
    (root / CLEAN_SHUTDOWN_FILE).unlink()
    active = max(p for p in (root / "orders-0").iterdir() if p.suffix == ".log")
    with open(active, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x10\x00" + b"torn")
    lm = manager([root], scheduler)
    await lm.startup(None)
    assert not lm.had_clean_shutdown
    loaded = lm.get_log(TP0)
    assert loaded is not None
    assert loaded.log_end_offset == 60
    assert loaded.active_segment.size == os.path.getsize(active)
    assert [r.offset for r in log_records(loaded)] == list(range(60))
    await lm.shutdown()


async def test_delete_log_renames_then_removes_the_dir(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "a"
    lm = manager([root], scheduler)
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, CONFIG, None)
    fill(log, 5)
    original = log.dir
    seen: list[str] = []

    real_rmtree = shutil.rmtree

    def rmtree(path: str, ignore_errors: bool = False) -> None:
        # by the time the removal runs, the name is already free
        assert not os.path.exists(original)
        assert os.path.isdir(path)
        seen.append(path)
        real_rmtree(path, ignore_errors)

    monkeypatch.setattr(log_module.shutil, "rmtree", rmtree)
    lm.delete_log(TP0, "test")
    assert not os.path.exists(original)  # renamed at once
    await scheduler.drain()  # removed in the background
    assert len(seen) == 1
    assert os.path.dirname(seen[0]) == str(root)
    assert os.path.basename(seen[0]).startswith("orders-0.")
    assert seen[0].endswith("-delete")
    assert not os.path.exists(seen[0])
    assert lm.get_log(TP0) is None
    assert log.deleted
    lm.delete_log(TP0, "test")  # deleting twice is harmless
    # the partition can be created again, empty
    again = lm.get_or_create_log(TP0, CONFIG, None)
    assert again.log_end_offset == 0
    await lm.shutdown()


async def test_startup_removes_dirs_left_for_deletion(tmp_path: Path, scheduler: Scheduler) -> None:
    root = tmp_path / "a"
    lm = manager([root], scheduler)
    await lm.startup(None)
    await lm.shutdown()
    leftover = root / f"orders-0.{uuid.uuid4().hex}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"old")
    lm = manager([root], scheduler)
    await lm.startup(None)
    await scheduler.drain()
    assert not leftover.exists()
    assert lm.logs == {}
    await lm.shutdown()


async def test_cleanup_logs_and_flush_dirty_logs(tmp_path: Path, scheduler: Scheduler) -> None:
    configs = {"old": small_config(retention_ms=1000), "kept": small_config(flush_ms=0)}
    lm = manager([tmp_path / "a"], scheduler, config_for=configs.__getitem__)
    await lm.startup(None)
    old = lm.get_or_create_log(TopicPartition("old", 0), configs["old"], None)
    kept = lm.get_or_create_log(TopicPartition("kept", 0), configs["kept"], None)
    fill(old, 30)
    fill(kept, 30)
    old.update_high_watermark(60)
    kept.update_high_watermark(60)
    segments = len(old.segments)
    assert lm.cleanup_logs() == segments
    assert old.log_start_offset == 60 and len(kept.segments) == segments
    await scheduler.drain()
    recovery = kept.recovery_point
    fill(kept, 1)
    await lm.flush_dirty_logs()
    assert kept.recovery_point == 62 > recovery
    kept.update_config(configs["old"])
    assert kept.config is configs["old"]
    # the active segment holds offsets above the high watermark (60 < 62): it stays
    assert lm.cleanup_logs() == segments - 1
    kept.update_high_watermark(62)
    assert lm.cleanup_logs() == 1
    assert kept.log_start_offset == kept.log_end_offset == 62
    await lm.shutdown()


async def test_periodic_retention_and_checkpoints(tmp_path: Path, scheduler: Scheduler) -> None:
    root = tmp_path / "a"
    expiring = small_config(retention_ms=1000)
    lm = manager(
        [root],
        scheduler,
        config_for=lambda topic: expiring,
        **{
            "log.retention.check.interval.ms": 20,
            "log.flush.offset.checkpoint.interval.ms": 20,
            "log.flush.start.offset.checkpoint.interval.ms": 20,
            "replica.high.watermark.checkpoint.interval.ms": 20,
        },
    )
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, expiring, None)
    fill(log, 30)
    log.update_high_watermark(60)
    await log.flush()
    names = [
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
        "log-start-offset-checkpoint",
    ]

    def written() -> list[dict[TopicPartition, int]]:
        return [checkpoint(root / name) for name in names if (root / name).exists()]

    for _ in range(200):  # no shutdown: only the periodic tasks can do this
        await asyncio.sleep(0.01)
        if written() == [{TP0: 60}] * 3:
            break
    assert [s.base_offset for s in log.segments] == [60]
    assert log.log_start_offset == 60
    assert written() == [{TP0: 60}] * 3
    assert not (root / CLEAN_SHUTDOWN_FILE).exists()
    await lm.shutdown()


# -- truncation --------------------------------------------------------------------------


async def test_a_truncation_checkpoints_the_recovery_point_at_once(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's LogManager.truncateTo writes the log dir's recovery points at once: a
    crash before the next periodic checkpoint must not leave the old, higher recovery
    point, or recovery skips the segment rewritten since the truncation."""
    root = tmp_path / "a"
    lm = manager([root], scheduler)
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, CONFIG, None)
    fill(log, 30)
    log.update_high_watermark(60)
    await log.flush()
    await lm.checkpoint_recovery_points()
    assert checkpoint(root / "recovery-point-offset-checkpoint") == {TP0: 60}
    second = log.segments[1].base_offset
    cut = second + 2
    # A follower diverging from its new leader truncates, then re-replicates across a roll.
    assert log.truncate_to(cut)
    fill(log, 10)
    rewritten = log.segments[1]
    assert rewritten.base_offset == second and len(log.segments) > 2
    valid_size = rewritten.size
    for _ in range(100):
        if checkpoint(root / "recovery-point-offset-checkpoint") != {TP0: 60}:
            break
        await asyncio.sleep(0.01)
    # The crash: the next start gets what is on disk now, with no periodic checkpoint.
    # The executor may be deleting the truncated segments and renaming checkpoint and
    # snapshot files meanwhile: a file gone before it is copied was gone at the crash.
    crashed = tmp_path / "crashed"
    shutil.copytree(root, crashed, copy_function=copy_if_present)
    await lm.shutdown()
    assert checkpoint(crashed / "recovery-point-offset-checkpoint")[TP0] <= cut
    # The rewritten segment's unsynced tail was torn by the crash ...
    with open(crashed / "orders-0" / os.path.basename(rewritten.log_path), "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x10\x00" + b"torn")
    lm = manager([crashed], scheduler)
    await lm.startup(None)
    loaded = lm.get_log(TP0)
    assert loaded is not None
    # ... and recovery, starting at or below the truncation point, cut it off.
    assert loaded.segments[1].size == valid_size
    assert [r.offset for r in log_records(loaded)] == list(range(loaded.log_end_offset))
    await lm.shutdown()


async def test_a_truncation_moves_the_cleaner_checkpoint_back(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's LogCleanerManager.maybeTruncateCheckpoint, called by LogManager.truncateTo:
    the first dirty offset goes back to the new active segment's base offset."""
    compacted = small_config(cleanup_policy=("compact",))
    lm = manager([tmp_path / "a"], scheduler, config_for=lambda topic: compacted)
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, compacted, None)
    fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    assert await lm.cleaner.clean_filthiest_log(OffsetMap(1 << 20))
    assert lm.cleaner.checkpoints[TP0] == 60
    log.truncate_to(21)
    assert lm.cleaner.checkpoints[TP0] == log.active_segment.base_offset <= 21
    await lm.shutdown()


async def test_log_start_offset_checkpoint_reloads_both_start_offsets(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """``log-start-offset-checkpoint`` holds the log start offset; without a remote tier
    the local log start offset is reloaded equal to it."""
    root = tmp_path / "a"
    lm = manager([root], scheduler)
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, CONFIG, None)
    fill(log, 30)
    log.update_high_watermark(60)
    start = log.segments[1].base_offset + 2  # DeleteRecords, inside the second segment
    log.maybe_increment_log_start_offset(start)
    assert lm.cleanup_logs() == 1
    await lm.checkpoint_log_start_offsets()
    assert checkpoint(root / "log-start-offset-checkpoint") == {TP0: start}
    await lm.shutdown()
    lm = manager([root], scheduler)
    await lm.startup(None)
    loaded = lm.get_log(TP0)
    assert loaded is not None
    assert loaded.log_start_offset == loaded.local_log_start_offset == start
    assert loaded.segments[0].base_offset < start
    await lm.shutdown()


async def test_deletions_due_after_shutdown_are_dropped_and_finished_at_the_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A segment deleted by retention keeps its `.deleted` files for file.delete.delay.ms.
    A shutdown inside that delay drops the pending removal, as Kafka's
    KafkaScheduler.shutdown drops delayed tasks, and the next start removes the files
    (LogLoader). Before, the timer fired on the stopped executor and logged
    ``background_task_failed``: "cannot schedule new futures after shutdown"."""
    root = tmp_path / "a"
    delayed = small_config(retention_ms=1000, file_delete_delay_ms=50)
    scheduler = Scheduler(asyncio.get_running_loop(), 2)
    lm = manager([root], scheduler, config_for=lambda topic: delayed)
    await lm.startup(None)
    log = lm.get_or_create_log(TP0, delayed, None)
    fill(log, 30)
    log.update_high_watermark(60)
    assert lm.cleanup_logs() > 0
    await lm.shutdown()
    scheduler.shutdown()
    await asyncio.sleep(0.2)  # past the delay: the dropped timer must not fire
    assert not [r for r in caplog.records if "background_task_failed" in r.getMessage()]
    assert any(p.name.endswith(".deleted") for p in (root / "orders-0").iterdir())

    restarted = Scheduler(asyncio.get_running_loop(), 2)
    lm = manager([root], restarted, config_for=lambda topic: delayed)
    await lm.startup(None)
    assert not any(p.name.endswith(".deleted") for p in (root / "orders-0").iterdir())
    assert lm.get_log(TP0).log_start_offset == 60  # type: ignore[union-attr]
    await lm.shutdown()
    restarted.shutdown()
