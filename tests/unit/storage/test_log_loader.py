"""load_partition_dir: clean and unclean loads, torn tails, index rebuilds, epochs,
leftovers; the log end offset always comes from the segments (Kafka's LogLoader)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from log_support import (
    BASE_TS,
    brute_force_positions,
    log_records,
    open_log,
    partition_dir,
    produce,
    segment_records,
    small_config,
)

from tiercel.storage.checkpoint_file import LeaderEpochCheckpointFile, PartitionMetadataFile
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.log_loader import LoadedLog, load_partition_dir, parse_partition_dir_name
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

CONFIG = small_config()


async def written_dir(tmp_path: Path, scheduler: Scheduler, batches: int = 30) -> str:
    """A partition dir of several segments, closed cleanly: batch i holds offsets 2i, 2i+1
    with timestamps BASE_TS + offset and leader epoch i // 10."""
    directory = partition_dir(tmp_path)
    log = open_log(directory, CONFIG, scheduler)
    for i in range(batches):
        produce(
            log,
            [b"%04d" % (2 * i) * 8, b"%04d" % (2 * i + 1) * 8],
            [BASE_TS + 2 * i, BASE_TS + 2 * i + 1],
            epoch=i // 10,
        )
    await log.close()
    return directory


def load(
    directory: str,
    recovery_point: int = 0,
    log_start: int = 0,
    clean: bool = False,
    config: object = CONFIG,
) -> LoadedLog:
    return load_partition_dir(directory, config, recovery_point, log_start, clean)  # type: ignore[arg-type]


def close(loaded: LoadedLog) -> None:
    for segment in loaded.segments:
        segment.close()


def log_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


def offsets_of(loaded: LoadedLog) -> list[int]:
    return [r.offset for s in loaded.segments for r in segment_records(s)]


def last_batch(path: str) -> tuple[int, int]:
    """(position, size) of the last batch of a segment file."""
    segment = LogSegment(
        os.path.dirname(path), int(os.path.basename(path)[:20]), 100, 1 << 20, file_exists=True
    )
    *_, batch = segment.batches_from(0)
    segment.close()
    return batch.position, batch.size


def assert_indexes_match_a_scan(loaded: LoadedLog, require_entries: bool = True) -> None:
    for segment in loaded.segments:
        positions = brute_force_positions(segment)
        assert segment.offset_index.entries > 0 or not require_entries
        for i in range(segment.offset_index.entries):
            entry = segment.offset_index.entry(i)
            assert positions[entry.offset] == entry.position
        for i in range(segment.time_index.entries):
            entry = segment.time_index.entry(i)
            assert entry.offset in positions
            assert entry.timestamp == BASE_TS + entry.offset
        for offset in range(segment.base_offset, segment.next_offset()):
            batch = segment.translate_offset(offset)
            assert batch is not None and batch.header.base_offset == offset - offset % 2


# -- clean and unclean loads ------------------------------------------------------------


async def test_clean_load_keeps_everything(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    files = sorted(os.listdir(directory))
    loaded = load(directory, recovery_point=60, clean=True)
    assert loaded.topic_partition == TopicPartition("t", 0)
    assert offsets_of(loaded) == list(range(60))
    assert loaded.segments[-1].next_offset() == 60
    assert loaded.recovery_point == 60
    assert loaded.recovered_bytes_truncated == 0
    assert loaded.leader_epoch_cache.entries == (
        EpochEntry(0, 0),
        EpochEntry(1, 20),
        EpochEntry(2, 40),
    )
    assert_indexes_match_a_scan(loaded)
    assert sorted(os.listdir(directory)) == files
    close(loaded)


async def test_clean_shutdown_skips_the_scan(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    path = os.path.join(directory, log_files(directory)[-1])
    position, size = last_batch(path)
    with open(path, "r+b") as f:  # a bit flip a clean load cannot notice: no CRC checks
        f.seek(position + size - 1)
        byte = f.read(1)
        f.seek(position + size - 1)
        f.write(bytes([byte[0] ^ 0x01]))
    loaded = load(directory, recovery_point=0, clean=True)
    assert loaded.recovered_bytes_truncated == 0
    assert loaded.segments[-1].next_offset() == 60
    assert loaded.recovery_point == 60  # a clean log is flushed to its end
    close(loaded)
    loaded = load(directory, recovery_point=0, clean=False)
    assert loaded.recovered_bytes_truncated == size
    assert loaded.segments[-1].next_offset() == 58
    close(loaded)


async def test_unclean_load_without_damage_rebuilds_the_same(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    directory = await written_dir(tmp_path, scheduler)
    indexes = {
        n: Path(directory, n).read_bytes() for n in os.listdir(directory) if n.endswith("index")
    }
    loaded = load(directory, recovery_point=0, clean=False)
    assert loaded.recovered_bytes_truncated == 0
    assert offsets_of(loaded) == list(range(60))
    assert loaded.recovery_point == 0
    close(loaded)
    assert {n: Path(directory, n).read_bytes() for n in indexes} == indexes


@pytest.mark.parametrize("damage", ["torn", "garbage", "crc", "length"])
async def test_unclean_load_truncates_a_damaged_tail(
    tmp_path: Path, scheduler: Scheduler, damage: str
) -> None:
    directory = await written_dir(tmp_path, scheduler)
    path = os.path.join(directory, log_files(directory)[-1])
    position, size = last_batch(path)
    file_size = os.path.getsize(path)
    if damage == "torn":
        os.truncate(path, position + size // 2)
        expected_cut, expected_end = size // 2, 58
    elif damage == "garbage":
        with open(path, "ab") as f:
            f.write(os.urandom(10) + b"\x00\x00\x00\x50" + os.urandom(200))
        expected_cut, expected_end = 214, 60
    elif damage == "crc":
        with open(path, "r+b") as f:
            f.seek(position + 30)  # the base timestamp, under the CRC
            f.write(b"\xff")
        expected_cut, expected_end = size, 58
    else:
        with open(path, "r+b") as f:  # a batch length running past the end of the file
            f.seek(position + 8)
            f.write((size + 100).to_bytes(4, "big"))
        expected_cut, expected_end = size, 58
    loaded = load(directory, recovery_point=0, clean=False)
    assert loaded.recovered_bytes_truncated == expected_cut
    assert loaded.segments[-1].next_offset() == expected_end
    assert os.path.getsize(path) == (file_size - size if expected_end == 58 else file_size)
    assert offsets_of(loaded) == list(range(expected_end))
    assert all(e.start_offset < expected_end for e in loaded.leader_epoch_cache.entries)
    close(loaded)


async def test_corruption_deletes_every_later_segment(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    names = log_files(directory)
    assert len(names) >= 4
    second = os.path.join(directory, names[1])
    position, size = last_batch(second)
    with open(second, "r+b") as f:
        f.seek(position + size - 2)
        f.write(b"\x00\x01")
    corrupt_base = int(names[1][:20])
    loaded = load(directory, recovery_point=0, clean=False)
    assert [s.base_offset for s in loaded.segments] == [0, corrupt_base]
    end = loaded.segments[-1].next_offset()
    assert offsets_of(loaded) == list(range(end))
    assert log_files(directory) == names[:2]
    assert not any(n.endswith(".deleted") for n in os.listdir(directory))
    assert all(e.start_offset < end for e in loaded.leader_epoch_cache.entries)
    close(loaded)


async def test_segments_below_the_recovery_point_are_not_scanned(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    directory = await written_dir(tmp_path, scheduler)
    names = log_files(directory)
    first = os.path.join(directory, names[0])
    position, size = last_batch(first)
    with open(first, "r+b") as f:
        f.seek(position + size - 1)
        f.write(b"\xee")
    third_base = int(names[2][:20])
    # flushed up to the start of the third segment: only segments from there are checked
    loaded = load(directory, recovery_point=third_base, clean=False)
    assert loaded.recovered_bytes_truncated == 0
    assert loaded.segments[-1].next_offset() == 60
    assert loaded.recovery_point == third_base
    close(loaded)
    loaded = load(directory, recovery_point=int(names[1][:20]) - 1, clean=False)
    assert loaded.recovered_bytes_truncated == size
    assert [s.base_offset for s in loaded.segments] == [0]
    close(loaded)


async def test_log_end_offset_comes_from_the_segments(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    loaded = load(directory, recovery_point=1000, log_start=500, clean=True)
    assert loaded.segments[-1].next_offset() == 60
    assert loaded.recovery_point == 60
    assert loaded.log_start_offset == 60  # never beyond the end
    close(loaded)
    loaded = load(directory, recovery_point=1000, log_start=25, clean=False)
    assert loaded.log_start_offset == 25
    assert loaded.recovery_point == 60
    close(loaded)


async def test_log_opened_from_a_crash_continues_at_the_recovered_end(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    directory = await written_dir(tmp_path, scheduler)
    path = os.path.join(directory, log_files(directory)[-1])
    position, _ = last_batch(path)
    os.truncate(path, position + 7)
    log = open_log(directory, CONFIG, scheduler, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == 58
    info = produce(log, [b"after"], epoch=4)
    assert info.first_offset == 58
    assert [r.offset for r in log_records(log)] == list(range(59))
    await log.close()


# -- indexes ------------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("how", ["deleted", "garbage", "emptied"])
async def test_missing_or_corrupt_indexes_are_rebuilt(
    tmp_path: Path, scheduler: Scheduler, clean: bool, how: str
) -> None:
    directory = await written_dir(tmp_path, scheduler)
    originals = {
        n: Path(directory, n).read_bytes() for n in os.listdir(directory) if n.endswith("index")
    }
    for name in originals:
        path = os.path.join(directory, name)
        if how == "deleted":
            os.remove(path)
        elif how == "garbage":
            Path(path).write_bytes(b"\xff\xff\xff\xfe\x00\x00\x00\x01\x00\x00\x00")
        else:
            Path(path).write_bytes(b"")
    loaded = load(directory, recovery_point=60, clean=clean)
    assert loaded.recovered_bytes_truncated == 0
    # An empty index file is a valid (if useless) index, as in Kafka: it is kept, and
    # lookups scan the log from the start of the segment.
    assert_indexes_match_a_scan(loaded, require_entries=how != "emptied")
    for segment in loaded.segments:
        found = next(segment.batches_by_timestamp(BASE_TS + segment.base_offset + 3, 0), None)
        assert found is not None and found.header.base_offset == segment.base_offset + 2
    close(loaded)
    if how != "emptied":
        assert {n: Path(directory, n).read_bytes() for n in originals} == originals


async def test_out_of_order_index_is_rebuilt(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    name = "00000000000000000000.index"
    data = Path(directory, name).read_bytes()
    Path(directory, name).write_bytes(data[8:16] + data[:8] + data[16:])
    loaded = load(directory, recovery_point=60, clean=True)
    assert_indexes_match_a_scan(loaded)
    close(loaded)
    assert Path(directory, name).read_bytes() == data


# -- leader epochs -------------------------------------------------------------------------


async def test_epoch_cache_rebuilt_from_batches_when_the_checkpoint_lost_entries(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    directory = await written_dir(tmp_path, scheduler)
    checkpoint = LeaderEpochCheckpointFile(os.path.join(directory, "leader-epoch-checkpoint"))
    checkpoint.write([EpochEntry(0, 0)])
    loaded = load(directory, recovery_point=0, clean=False)
    assert loaded.leader_epoch_cache.entries == (
        EpochEntry(0, 0),
        EpochEntry(1, 20),
        EpochEntry(2, 40),
    )
    assert checkpoint.read() == list(loaded.leader_epoch_cache.entries)  # flushed
    close(loaded)
    os.remove(checkpoint.path)
    loaded = load(directory, recovery_point=0, clean=False)
    assert loaded.leader_epoch_cache.entries == (
        EpochEntry(0, 0),
        EpochEntry(1, 20),
        EpochEntry(2, 40),
    )
    close(loaded)


async def test_epoch_cache_trimmed_to_the_log(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    checkpoint = LeaderEpochCheckpointFile(os.path.join(directory, "leader-epoch-checkpoint"))
    checkpoint.write([EpochEntry(0, 0), EpochEntry(1, 20), EpochEntry(2, 40), EpochEntry(7, 60)])
    loaded = load(directory, recovery_point=60, log_start=25, clean=True)
    assert loaded.leader_epoch_cache.entries == (EpochEntry(1, 25), EpochEntry(2, 40))
    assert checkpoint.read() == [EpochEntry(1, 25), EpochEntry(2, 40)]
    close(loaded)


# -- leftovers and names ------------------------------------------------------------------


async def test_leftovers_are_removed(tmp_path: Path, scheduler: Scheduler) -> None:
    directory = await written_dir(tmp_path, scheduler)
    before = set(os.listdir(directory))
    leftovers = [
        "00000000000000000100.log.deleted",
        "00000000000000000100.index.deleted",
        "00000000000000000100.timeindex.deleted",
        "00000000000000000000.log.cleaned",
        "00000000000000000000.index.cleaned",
        "00000000000000000200.index",
        "00000000000000000200.timeindex",
        "leader-epoch-checkpoint.tmp",
        "partition.metadata.tmp",
    ]
    for name in leftovers:
        Path(directory, name).write_bytes(b"stale")
    loaded = load(directory, recovery_point=60, clean=True)
    assert set(os.listdir(directory)) == before
    assert loaded.segments[0].base_offset == 0
    assert loaded.segments[-1].next_offset() == 60
    close(loaded)


def test_empty_dir_starts_at_the_log_start_offset(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path, "my-topic", 7)
    loaded = load(directory, recovery_point=5, log_start=42, clean=False)
    assert loaded.topic_partition == TopicPartition("my-topic", 7)
    assert [s.base_offset for s in loaded.segments] == [42]
    assert loaded.log_start_offset == 42
    assert loaded.recovery_point == 5
    assert loaded.topic_id is None
    assert "00000000000000000042.log" in os.listdir(directory)
    close(loaded)


def test_topic_id_is_read_from_partition_metadata(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path)
    topic_id = uuid.uuid4()
    PartitionMetadataFile(os.path.join(directory, "partition.metadata")).write(topic_id)
    loaded = load(directory)
    assert loaded.topic_id == topic_id
    close(loaded)


def test_partition_dir_names(tmp_path: Path) -> None:
    assert parse_partition_dir_name("orders-3") == TopicPartition("orders", 3)
    assert parse_partition_dir_name("my-topic-with-dashes-12") == TopicPartition(
        "my-topic-with-dashes", 12
    )
    for name in [
        "orders",
        "orders-",
        "-3",
        "orders-x",
        "orders-3.abc-delete",
        "meta.properties",
        "recovery-point-offset-checkpoint",
    ]:
        assert parse_partition_dir_name(name) is None, name
    (tmp_path / "not_a_partition").mkdir()
    with pytest.raises(ValueError):
        load_partition_dir(str(tmp_path / "not_a_partition"), CONFIG, 0, 0, True)
