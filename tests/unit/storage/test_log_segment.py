"""LogSegment: appends and sparse indexes, reads, roll rule, truncation, recovery."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from log_support import BASE_TS, brute_force_positions, decode_all, records, segment_records

from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import KafkaStorageError
from tiercel.protocol.record_batch import read_header
from tiercel.protocol.record_builder import build_record_batch
from tiercel.storage.checkpoint_file import LeaderEpochCheckpointFile
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.file_names import DELETED_FILE_SUFFIX
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_values import AppendBatch
from tiercel.storage.offset_index import OffsetPosition
from tiercel.storage.time_index import TimestampOffset
from tiercel.storage.topic_partition import TopicPartition

INTERVAL = 100


def append_batch(
    base_offset: int,
    count: int = 2,
    timestamp: int = BASE_TS,
    epoch: int = 0,
    value_size: int = 20,
    compression: CompressionType = CompressionType.NONE,
) -> AppendBatch:
    values = [bytes([65 + i % 26]) * value_size for i in range(count)]
    stamps = [timestamp - (count - 1 - i) for i in range(count)]  # the last is the max
    data = build_record_batch(
        records(values, stamps),
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        compression=compression,
    )
    return AppendBatch((data,), len(data), base_offset, base_offset + count - 1, timestamp, epoch)


def new_segment(
    path: Path, base: int = 0, interval: int = INTERVAL, max_index: int = 1 << 20
) -> LogSegment:
    return LogSegment(str(path), base, interval, max_index)


def fill(
    segment: LogSegment, batches: int, start: int | None = None, count: int = 2, ts_step: int = 1
) -> list[AppendBatch]:
    offset = segment.base_offset if start is None else start
    out = []
    for i in range(batches):
        batch = append_batch(offset, count, BASE_TS + i * ts_step)
        segment.append([batch])
        out.append(batch)
        offset = batch.last_offset + 1
    return out


def expected_offset_index(segment: LogSegment, interval: int) -> list[OffsetPosition]:
    """Kafka's rule replayed over a brute-force scan: a batch is indexed at its start
    once more than `interval` bytes were written since the previous entry."""
    entries = []
    since = 0
    for batch in segment.batches_from(0):
        if since > interval:
            entries.append(OffsetPosition(batch.header.last_offset, batch.position))
            since = 0
        since += batch.size
    return entries


def expected_time_index(segment: LogSegment, interval: int) -> list[TimestampOffset]:
    entries: list[TimestampOffset] = []
    since = 0
    max_ts, max_offset = -1, segment.base_offset
    for batch in segment.batches_from(0):
        if batch.header.max_timestamp > max_ts:
            max_ts, max_offset = batch.header.max_timestamp, batch.header.last_offset
        if since > interval:
            if not entries or max_ts > entries[-1].timestamp:
                entries.append(TimestampOffset(max_ts, max_offset))
            since = 0
        since += batch.size
    return entries


def offset_entries(segment: LogSegment) -> list[OffsetPosition]:
    return [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]


def time_entries(segment: LogSegment) -> list[TimestampOffset]:
    return [segment.time_index.entry(i) for i in range(segment.time_index.entries)]


# -- append and indexes ----------------------------------------------------------------


def test_files_are_named_after_the_base_offset(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 1234)
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000001234.index",
        "00000000000000001234.log",
        "00000000000000001234.timeindex",
    ]
    assert segment.size == 0
    assert segment.next_offset() == 1234
    segment.close()


def test_append_writes_the_batches_verbatim(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 10)
    batches = [append_batch(10, 3), append_batch(13, 1)]
    segment.append(batches)
    data = Path(segment.log_path).read_bytes()
    assert data == b"".join(bytes(c) for b in batches for c in b.chunks)
    assert segment.size == len(data)
    assert segment.next_offset() == 14
    assert [r.offset for r in segment_records(segment)] == [10, 11, 12, 13]
    segment.close()


def test_append_of_split_chunks_writes_them_in_order(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    whole = append_batch(0, 4)
    data = bytes(whole.chunks[0])
    split = AppendBatch(
        (data[:21], memoryview(data)[21:50], data[50:]), whole.size, 0, 3, whole.max_timestamp, 0
    )
    segment.append([split])
    assert Path(segment.log_path).read_bytes() == data
    segment.close()


@pytest.mark.parametrize("interval", [1, 100, 250, 10_000])
def test_indexes_are_sparse_per_index_interval_bytes(tmp_path: Path, interval: int) -> None:
    segment = new_segment(tmp_path, 0, interval)
    fill(segment, 40)
    assert offset_entries(segment) == expected_offset_index(segment, interval)
    assert time_entries(segment) == expected_time_index(segment, interval)
    positions = brute_force_positions(segment)
    for entry in offset_entries(segment):
        assert positions[entry.offset] == entry.position
    if interval >= segment.size:
        assert segment.offset_index.entries == 0
    segment.close()


def test_index_bytes_on_disk_are_the_entries(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 10)
    entries = offset_entries(segment)
    raw = Path(segment.offset_index.path).read_bytes()
    assert raw == b"".join(
        (e.offset - segment.base_offset).to_bytes(4, "big") + e.position.to_bytes(4, "big")
        for e in entries
    )
    assert len(Path(segment.time_index.path).read_bytes()) == 12 * segment.time_index.entries
    segment.close()


def test_time_index_tracks_the_largest_timestamp_not_the_latest(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 0, interval=1)
    for i, ts in enumerate([500, 900, 700, 800, 1000, 950]):
        segment.append([append_batch(i * 2, 2, BASE_TS + ts)])
    assert segment.max_timestamp_so_far == BASE_TS + 1000
    assert segment.offset_of_max_timestamp_so_far == 9
    stamps = [e.timestamp - BASE_TS for e in time_entries(segment)]
    assert stamps == sorted(set(stamps))
    assert time_entries(segment) == expected_time_index(segment, 1)
    segment.close()


# -- lookups and reads -------------------------------------------------------------------


def test_translate_offset_finds_the_batch_holding_any_offset(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 100)
    batches = fill(segment, 30, count=3)
    positions = {b.header.base_offset: b.position for b in segment.batches_from(0)}
    for batch in batches:
        for offset in range(batch.base_offset, batch.last_offset + 1):
            found = segment.translate_offset(offset)
            assert found is not None
            assert found.header.base_offset == batch.base_offset
            assert found.position == positions[batch.base_offset]
    assert segment.translate_offset(0).header.base_offset == 100  # type: ignore[union-attr]
    assert segment.translate_offset(batches[-1].last_offset + 1) is None
    segment.close()


def test_read_mid_batch_returns_the_whole_batch(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 5, count=4)
    result = segment.read(6, 10_000, segment.size, False)
    assert result is not None
    metadata, data = result
    first = segment.translate_offset(6)
    assert first is not None
    assert metadata.message_offset == 6
    assert metadata.relative_position_in_segment == first.position
    assert read_header(data, 0).base_offset == 4
    assert [r.offset for r in decode_all(data)] == list(range(4, 20))
    assert segment.read(20, 100, segment.size, True) is None
    segment.close()


def test_read_max_size_and_min_one_message(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 5, count=4)
    batch_size = segment.translate_offset(0).size  # type: ignore[union-attr]
    # Without min_one_message a first batch larger than max_size is not cut: no bytes
    # (Kafka's firstEntryIncomplete read, answered empty by ReplicaManager.readFromLog).
    for max_size in (10, batch_size - 1):
        _, none = segment.read(0, max_size, segment.size, False)  # type: ignore[misc]
        assert none == b"", max_size
    _, exact = segment.read(0, batch_size, segment.size, False)  # type: ignore[misc]
    assert len(exact) == batch_size
    _, whole = segment.read(0, 10, segment.size, True)  # type: ignore[misc]
    assert len(whole) == batch_size
    _, two = segment.read(0, 2 * batch_size, segment.size, True)  # type: ignore[misc]
    assert [r.offset for r in decode_all(two)] == list(range(8))
    _, bounded = segment.read(0, 10_000, batch_size + 5, True)  # type: ignore[misc]
    assert len(bounded) == batch_size + 5
    _, nothing = segment.read(4, 10_000, batch_size, True)  # type: ignore[misc]
    assert nothing == b""
    segment.close()


def test_find_batch_by_timestamp(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 0, interval=1)
    stamps = [10, 30, 20, 40, 40, 60]
    for i, ts in enumerate(stamps):
        segment.append([append_batch(i * 2, 2, BASE_TS + ts)])
    for target in range(0, 70, 5):
        expected = next((i for i, ts in enumerate(stamps) if ts >= target), None)
        found = next(segment.batches_by_timestamp(BASE_TS + target, 0), None)
        if expected is None:
            assert found is None
        else:
            assert found is not None and found.header.base_offset == 2 * expected, target
    # starting_offset skips earlier batches
    found = next(segment.batches_by_timestamp(BASE_TS + 10, 5), None)
    assert found is not None and found.header.base_offset == 4
    segment.close()


def test_largest_timestamp_falls_back_to_mtime(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    os.utime(segment.log_path, (1000, 1000))
    assert segment.largest_timestamp() == 1_000_000
    segment.append([append_batch(0, 1, BASE_TS + 5)])
    assert segment.largest_timestamp() == BASE_TS + 5
    segment.close()


# -- roll rule ---------------------------------------------------------------------------


def test_should_roll_on_bytes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 3)
    args = (BASE_TS, 10, 10**9, 1)  # max_timestamp, max_offset, roll_ms, now_ms
    assert not segment.should_roll(100, args[0], args[1], segment.size + 100, args[2], args[3])
    assert segment.should_roll(101, args[0], args[1], segment.size + 100, args[2], args[3])
    segment.close()


def test_should_roll_on_time_from_the_first_batch_timestamp(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    assert not segment.should_roll(10, BASE_TS + 10**9, 0, 10**9, 0, BASE_TS)  # empty
    segment.append([append_batch(0, 1, BASE_TS)])
    segment.append([append_batch(1, 1, BASE_TS + 50)])
    assert not segment.should_roll(10, BASE_TS + 100, 2, 10**9, 100, 0)
    assert segment.should_roll(10, BASE_TS + 101, 2, 10**9, 100, 0)
    segment.close()


def test_should_roll_on_wall_clock_without_timestamps(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    data = build_record_batch(records([b"x"], [-1]))
    segment.append([AppendBatch((data,), len(data), 0, 0, -1, 0)])
    created = segment.created_ms
    assert not segment.should_roll(10, -1, 1, 10**9, 100, created + 100)
    assert segment.should_roll(10, -1, 1, 10**9, 100, created + 101)
    segment.close()


def test_should_roll_on_full_index_or_offset_overflow(tmp_path: Path) -> None:
    # 48 bytes: 6 offset-index entries, 4 time-index entries of which the last is
    # kept for the roll, so the time index is full after 3 growing timestamps
    segment = new_segment(tmp_path, 0, interval=1, max_index=48)
    no_roll = (10, BASE_TS, 0, 10**9, 10**9, 0)
    fill(segment, 3)
    assert not segment.should_roll(*no_roll)
    segment.append([append_batch(6, 2, BASE_TS + 10)])
    assert segment.time_index.entries == 3
    assert segment.time_index.is_full
    assert segment.should_roll(*no_roll)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = new_segment(other_dir, 0)
    other.append([append_batch(0, 1)])
    assert not other.should_roll(10, BASE_TS, 2**31 - 1, 10**9, 10**9, 0)
    assert other.should_roll(10, BASE_TS, 2**31, 10**9, 10**9, 0)
    segment.close()
    other.close()


# -- truncation ----------------------------------------------------------------------


def test_truncate_mid_batch_removes_the_batch_and_index_entries(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 0, interval=INTERVAL)
    fill(segment, 20, count=3)
    cut = segment.translate_offset(31)
    assert cut is not None and cut.header.base_offset == 30
    expected_size = cut.position
    removed = segment.truncate_to(31)
    assert removed == 20 * cut.size - expected_size
    assert segment.size == expected_size == os.path.getsize(segment.log_path)
    assert segment.next_offset() == 30
    assert all(e.offset < 31 for e in offset_entries(segment))
    assert all(e.offset < 31 for e in time_entries(segment))
    assert offset_entries(segment) == expected_offset_index(segment, INTERVAL)
    assert time_entries(segment) == expected_time_index(segment, INTERVAL)
    assert len(Path(segment.offset_index.path).read_bytes()) == 8 * segment.offset_index.entries
    assert segment.max_timestamp_so_far == BASE_TS + 9
    assert segment.offset_of_max_timestamp_so_far == 29
    # appends continue where the segment now ends, and are indexed again
    segment.append([append_batch(30, 3, BASE_TS + 100)])
    assert segment.next_offset() == 33
    assert segment.max_timestamp_so_far == BASE_TS + 100
    segment.close()


def test_truncate_to_everything_resets_the_roll_clock(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 50)
    fill(segment, 5)
    assert segment.rolling_based_timestamp == BASE_TS
    size = segment.size
    assert segment.truncate_to(50) == size
    assert segment.size == 0 == os.path.getsize(segment.log_path)
    assert segment.rolling_based_timestamp is None
    assert segment.offset_index.entries == segment.time_index.entries == 0
    assert segment.max_timestamp_so_far == -1
    assert segment.truncate_to(50) == 0
    segment.close()


def test_truncate_beyond_the_end_removes_nothing(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 5)
    size = segment.size
    entries = offset_entries(segment)
    assert segment.truncate_to(10) == 0
    assert segment.size == size
    assert offset_entries(segment) == entries
    segment.close()


# -- recovery ------------------------------------------------------------------------


def epoch_cache(path: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(
        TopicPartition("t", 0), LeaderEpochCheckpointFile(path / "leader-epoch-checkpoint")
    )


def test_recover_rebuilds_identical_indexes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 30, ts_step=3)
    offsets, times = offset_entries(segment), time_entries(segment)
    max_ts = (segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far)
    segment.close()
    reopened = LogSegment(str(tmp_path), 0, INTERVAL, 1 << 20, file_exists=True)
    reopened.offset_index.truncate()
    assert reopened.recover(None) == 0
    assert offset_entries(reopened) == offsets
    assert time_entries(reopened) == times
    assert (reopened.max_timestamp_so_far, reopened.offset_of_max_timestamp_so_far) == max_ts
    reopened.close()


@pytest.mark.parametrize("damage", ["torn", "garbage", "crc", "magic"])
def test_recover_truncates_after_the_last_valid_batch(tmp_path: Path, damage: str) -> None:
    segment = new_segment(tmp_path)
    batches = fill(segment, 10)
    good = sum(b.size for b in batches[:9])
    segment.close()
    path = Path(segment.log_path)
    data = bytearray(path.read_bytes())
    if damage == "torn":
        data = data[: good + 30]
    elif damage == "garbage":
        data += b"\x00\x00\x00\x00\x00\x00\x00\x14\x00\x00\x00\x40" + b"\xab" * 100
        good = len(path.read_bytes())
    elif damage == "crc":
        data[-2] ^= 0x10
    else:
        data[good + 16] = 1
    path.write_bytes(bytes(data))
    reopened = LogSegment(str(tmp_path), 0, INTERVAL, 1 << 20, file_exists=True)
    assert reopened.recover(None) == len(data) - good
    assert reopened.size == good == path.stat().st_size
    assert reopened.next_offset() == (20 if damage == "garbage" else 18)
    assert all(e.position < good for e in offset_entries(reopened))
    reopened.close()


def test_recover_adds_epochs_newer_than_the_cache(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    for i, epoch in enumerate([0, 0, 2, 2, 5]):
        segment.append([append_batch(i * 2, 2, BASE_TS, epoch)])
    cache = epoch_cache(tmp_path)
    cache.assign(0, 0)
    cache.assign(2, 4)
    assert segment.recover(cache) == 0
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 4), EpochEntry(5, 8))
    (tmp_path / "fresh").mkdir()
    empty = epoch_cache(tmp_path / "fresh")
    segment.recover(empty)
    assert empty.entries == (EpochEntry(0, 0), EpochEntry(2, 4), EpochEntry(5, 8))
    segment.close()


def test_rename_to_deleted(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, 7)
    fill(segment, 3, start=7)
    paths = segment.rename_to_deleted()
    assert sorted(os.path.basename(p) for p in paths) == [
        "00000000000000000007.index.deleted",
        "00000000000000000007.log.deleted",
        "00000000000000000007.timeindex.deleted",
    ]
    assert all(p.endswith(DELETED_FILE_SUFFIX) and os.path.exists(p) for p in paths)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
    assert segment.closed


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=5),
            st.integers(min_value=0, max_value=1000),
            st.sampled_from([CompressionType.NONE, CompressionType.LZ4]),
        ),
        min_size=1,
        max_size=25,
    ),
    st.integers(min_value=1, max_value=400),
)
@settings(max_examples=40, deadline=None)
def test_indexes_and_recovery_agree_with_a_scan(
    batches: list[tuple[int, int, CompressionType]], interval: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        segment = LogSegment(directory, 5, interval, 1 << 20)
        offset = 5
        for count, ts, codec in batches:
            segment.append([append_batch(offset, count, BASE_TS + ts, compression=codec)])
            offset += count
        offsets, times = offset_entries(segment), time_entries(segment)
        assert offsets == expected_offset_index(segment, interval)
        assert times == expected_time_index(segment, interval)
        assert segment.recover(None) == 0
        assert offset_entries(segment) == offsets
        assert time_entries(segment) == times
        for target in (0, 300, 700, 1001):
            found = next(segment.batches_by_timestamp(BASE_TS + target, 0), None)
            expected = next(
                (b for b in segment.batches_from(0) if b.header.max_timestamp >= BASE_TS + target),
                None,
            )
            assert (found and found.position) == (expected and expected.position)
        segment.close()


def test_a_new_segment_replaces_stale_files_under_its_name(tmp_path: Path) -> None:
    # Kafka's roll deletes a file already under the new segment's name; bytes left there
    # must not end up before the first batch the segment's positions count from 0.
    old = new_segment(tmp_path, 40)
    fill(old, 5, start=40)
    old.close()
    segment = new_segment(tmp_path, 40)
    assert segment.size == 0
    assert segment.offset_index.entries == segment.time_index.entries == 0
    batch = append_batch(40, 3)
    segment.append([batch])
    assert Path(segment.log_path).read_bytes() == bytes(batch.chunks[0])
    assert [r.offset for r in segment_records(segment)] == [40, 41, 42]
    segment.close()


def test_failed_append_leaves_no_partial_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 3)
    size = segment.size
    entries = offset_entries(segment)

    def disk_full(fd: int, buffers: list[bytes]) -> int:
        os.write(fd, bytes(buffers[0])[:10])  # part of the batch reaches the file
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tiercel.storage.log_segment.os.writev", disk_full)
    with pytest.raises(KafkaStorageError, match="No space left"):
        segment.append([append_batch(6, 2)])
    assert segment.size == size == os.path.getsize(segment.log_path)
    assert offset_entries(segment) == entries
    monkeypatch.undo()
    segment.append([append_batch(6, 2)])
    assert [r.offset for r in segment_records(segment)] == list(range(8))
    segment.close()


def test_short_writev_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    segment = new_segment(tmp_path)
    real_writev = os.writev

    def short(fd: int, buffers: list[bytes]) -> int:
        return real_writev(fd, [bytes(buffers[0])[:5]])  # a signal cut the write short

    monkeypatch.setattr("tiercel.storage.log_segment.os.writev", short)
    batch = append_batch(0, 3)
    data = bytes(batch.chunks[0])
    split = AppendBatch((data[:30], data[30:]), batch.size, 0, 2, batch.max_timestamp, 0)
    segment.append([split])
    assert Path(segment.log_path).read_bytes() == data
    assert segment.size == len(data)
    segment.close()


def test_an_append_whose_indexing_fails_leaves_no_bytes_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = new_segment(tmp_path, interval=0)
    fill(segment, 3)
    size = segment.size

    def broken(offset: int, position: int) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(segment.offset_index, "append", broken)
    with pytest.raises(KafkaStorageError):
        segment.append([append_batch(6), append_batch(8)])
    assert segment.size == size == os.path.getsize(segment.log_path)
    assert segment.next_offset() == 6
    monkeypatch.undo()
    segment.append([append_batch(6)])  # the same offsets are written once, not twice
    assert [h.base_offset for h in (b.header for b in segment.batches_from(0))] == [0, 2, 4, 6]


def test_a_closed_segment_refuses_reads_instead_of_using_a_reused_descriptor(
    tmp_path: Path,
) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 2)
    segment.close()
    with open(tmp_path / "other", "wb") as other:  # likely to get the freed number
        other.write(b"X" * 4096)
        with pytest.raises(KafkaStorageError):
            segment.read(0, 1000, segment.size, True)
        with pytest.raises(KafkaStorageError):
            segment.translate_offset(1)
