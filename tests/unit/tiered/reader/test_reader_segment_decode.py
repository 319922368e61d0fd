"""The reader library over a real UnifiedLog tiered into a LocalTieredStorage as the
broker's copier does: every record reads back as produced (keys, values, headers, nulls,
timestamps, every codec), ranges clip, the offset index saves the segment's start, a
corrupt batch is an error naming the object; with the native record decoder and the
Python one alike."""

from __future__ import annotations

import dataclasses
import struct
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cramjam
import crc32c
import pyarrow as pa
import pytest

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.reader_rows import Row, arrow_bytes, produce_every_codec, rows_of
from support.tiering import BASE_TS, open_log, scheduler, small_config, tier_rolled_segments
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TimestampType,
    compute_crc,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.reader import (
    RemoteTierError,
    SegmentRange,
    kafka_source_schema,
    open_object_root,
    plan_topic,
    read_partition,
    read_segment_range,
)
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore, LocalTieredStorage
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, object_key
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)

__all__ = ["scheduler"]

# Every test here runs with both record decoders (conftest.py's `decoder`).
pytestmark = pytest.mark.usefixtures("decoder")


@pytest.fixture
async def tier(tmp_path: Path, scheduler: Scheduler) -> tuple[ObjectStore, list[Row]]:
    """40 batches over every codec, rolled into many 1 KiB segments and
    tiered; the rows a consumer would read."""
    log = open_log(str(tmp_path / "t-0"), small_config(), scheduler)
    expected = produce_every_codec(log, 40)
    log.roll()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    segments = await tier_rolled_segments(log, rsm, InMemoryRemoteLogMetadataManager())
    assert len(segments) > 5
    await log.close()
    return open_object_root(f"file://{rsm.root}"), expected


def test_every_record_reads_back_as_produced(tier: tuple[ObjectStore, list[Row]]) -> None:
    store, expected = tier
    plan = plan_topic(store, "t")
    [partition] = plan.partitions
    assert partition.gaps == ()
    assert (partition.start_offset, partition.end_offset) == (0, len(expected))
    assert rows_of(list(read_partition(store, partition, include_headers=True))) == expected


def test_without_headers_the_schema_is_the_kafka_source_s(
    tier: tuple[ObjectStore, list[Row]],
) -> None:
    store, expected = tier
    [partition] = plan_topic(store, "t").partitions
    table = pa.Table.from_batches(list(read_partition(store, partition)))
    assert table.schema == kafka_source_schema(False)
    assert table.column("topic").to_pylist() == ["t"] * len(expected)
    assert table.column("partition").to_pylist() == [0] * len(expected)
    assert table.column("value").to_pylist() == [row[2] for row in expected]


class CountingStore:
    """A store that records the bytes each ranged read returned."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.ranges: list[tuple[str, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        data = self.store.get_range(key, start, end)
        self.ranges.append((key, start, len(data)))
        return data


def test_a_range_clips_and_starts_at_the_offset_index_entry(
    tier: tuple[ObjectStore, list[Row]],
) -> None:
    """A range at the end of a segment: only its offsets, and the read starts at the
    index entry below its first offset, not at the segment's start (1 KiB segments have
    an index entry every ~100 bytes)."""
    store, expected = tier
    [partition] = plan_topic(store, "t").partitions
    whole = max(partition.ranges, key=lambda r: r.last_offset - r.first_offset)
    first, last = whole.last_offset - 1, whole.last_offset
    counting = CountingStore(store)
    batches = list(
        read_segment_range(counting, SegmentRange(whole.segment, first, last), True)  # type: ignore[arg-type]
    )
    assert rows_of(batches) == [row for row in expected if first <= row[0] <= last]
    [(key, start, size)] = counting.ranges
    assert key == whole.log_key
    assert start > 0 and start + size == whole.segment.segment_size_in_bytes


def test_a_range_in_the_middle_reads_only_the_bytes_around_it(
    tier: tuple[ObjectStore, list[Row]],
) -> None:
    """The offset index bounds both ends: one GET, from past the segment's start to
    before its end."""
    store, expected = tier
    [partition] = plan_topic(store, "t").partitions
    whole = max(partition.ranges, key=lambda r: r.last_offset - r.first_offset)
    middle = (whole.first_offset + whole.last_offset) // 2
    counting = CountingStore(store)
    part = SegmentRange(whole.segment, middle, middle)
    rows = rows_of(list(read_segment_range(counting, part, True)))  # type: ignore[arg-type]
    assert rows == [row for row in expected if row[0] == middle]
    [(_, start, size)] = counting.ranges
    assert start > 0 and start + size < whole.segment.segment_size_in_bytes


def corrupt_byte(store: LocalDirectoryStore, key: str, position: int) -> None:
    path = Path(store.root) / key
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_batch_failing_its_crc_is_an_error_naming_the_object(
    tier: tuple[ObjectStore, list[Row]],
) -> None:
    store, _ = tier
    assert isinstance(store, LocalDirectoryStore)
    [partition] = plan_topic(store, "t").partitions
    victim = partition.ranges[2]
    corrupt_byte(store, victim.log_key, RECORD_BATCH_OVERHEAD + 2)
    with pytest.raises(RemoteTierError, match=f"{victim.log_key} at position 0.*CRC"):
        list(read_partition(store, partition))


# --- hand-built segments: what the log would not take from a producer ------------------


def segment_with(store: ObjectStore, batches: list[bytes]) -> SegmentRange:
    """A segment object of ``batches`` (offsets as built) under a made-up upload."""
    data = b"".join(batches)
    last = read_header(batches[-1])
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(uuid.uuid4(), TopicPartition("h", 0)),
        0,
        last.base_offset + last.last_offset_delta,
        0,
        0,
        0,
        len(data),
        {0: 0},
    )
    store.put_bytes(object_key(metadata, LOG_SUFFIX), data)
    return SegmentRange(metadata, 0, metadata.end_offset)


def raw_snappy(batch: bytes) -> bytes:
    """``batch`` with its records compressed as raw snappy (no xerial framing)."""
    header = read_header(batch)
    payload = bytes(cramjam.snappy.compress_raw(batch[RECORD_BATCH_OVERHEAD:]))
    attributes = (header.attributes & ~0x07) | CompressionType.SNAPPY
    covered = bytearray(batch[ATTRIBUTES_OFFSET:RECORD_BATCH_OVERHEAD]) + payload
    struct.pack_into(">h", covered, 0, attributes)
    crc = crc32c.crc32c(bytes(covered))
    prefix = struct.pack(
        ">qiibI", header.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload), 0, 2, crc
    )
    return prefix + bytes(covered)


def simple(offset: int, n: int) -> list[SimpleRecord]:
    return [SimpleRecord(b"k", f"v{offset + i}".encode(), timestamp=BASE_TS) for i in range(n)]


def test_raw_snappy_log_append_time_and_control_batches(tmp_path: Path) -> None:
    """Raw snappy (not only xerial) decodes; a LogAppendTime batch's records all carry
    its max timestamp, timestampType 1; control batches are no rows."""
    store = LocalDirectoryStore(str(tmp_path))
    pid = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0}
    segment = segment_with(
        store,
        [
            raw_snappy(build_record_batch(simple(0, 3), base_offset=0)),
            build_record_batch(
                [SimpleRecord(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
                base_offset=3,
                is_control=True,
                is_transactional=True,
                **pid,  # type: ignore[arg-type]
            ),
            build_record_batch(
                simple(4, 2),
                base_offset=4,
                timestamp_type=TimestampType.LOG_APPEND_TIME,
                log_append_time=BASE_TS + 999,
            ),
        ],
    )
    table = pa.Table.from_batches(list(read_segment_range(store, segment)))
    assert table.column("offset").to_pylist() == [0, 1, 2, 4, 5]
    assert table.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"v4", b"v5"]
    stamps = [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()]
    assert stamps == [BASE_TS] * 3 + [BASE_TS + 999] * 2
    assert table.column("timestampType").to_pylist() == [0, 0, 0, 1, 1]


def batches_of(rows: int) -> Iterator[bytes]:
    for base in range(0, rows, 4):
        yield build_record_batch(simple(base, 4), base_offset=base)


def test_large_ranges_come_as_several_arrow_batches(tmp_path: Path) -> None:
    store = LocalDirectoryStore(str(tmp_path))
    segment = segment_with(store, list(batches_of(400)))
    batches = list(read_segment_range(store, segment, read_bytes=1000, batch_bytes=500))
    assert len(batches) > 1
    offsets = pa.Table.from_batches(batches).column("offset").to_pylist()
    assert offsets == list(range(400))


def test_key_and_header_heavy_records_come_in_bounded_batches(tmp_path: Path) -> None:
    """Batches of keys without values, and of headers without keys or values (lz4, so
    decompressed into the reused buffer): every Arrow batch stops at the record that
    makes it hold ``batch_bytes``, within a Kafka batch too; before, only value bytes
    counted and the whole range came as one Arrow batch."""
    keys = [SimpleRecord(b"%06d" % i * 100, None, timestamp=BASE_TS) for i in range(300)]
    headers = [SimpleRecord(None, b"", [("h", b"%06d" % i * 50)], BASE_TS) for i in range(300)]
    store = LocalDirectoryStore(str(tmp_path))
    segment = segment_with(
        store,
        [
            build_record_batch(keys, base_offset=0, compression=CompressionType.LZ4),
            build_record_batch(headers, base_offset=300),
        ],
    )
    batches = list(read_segment_range(store, segment, True, batch_bytes=8192))
    assert len(batches) > 20
    for batch in batches:
        assert arrow_bytes(batch.slice(0, batch.num_rows - 1)) < 8192
        assert batch.nbytes < 2 * 8192
    rows = rows_of(batches)
    assert [r[1] for r in rows[:300]] == [r.key for r in keys]
    assert [r[3] for r in rows[300:]] == [list(r.headers) for r in headers]


def test_a_header_key_of_malformed_utf8_reads_with_replacement_characters(
    tmp_path: Path,
) -> None:
    """As Kafka's header decoding (Java's String constructor), not an invalid Arrow
    string."""
    batch = bytearray(
        build_record_batch([SimpleRecord(b"k", b"v", [("h\u00e9", b"x"), ("ok", None)])])
    )
    at = batch.index("h\u00e9".encode())
    batch[at + 1] = 0xFF
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    store = LocalDirectoryStore(str(tmp_path))
    table = pa.Table.from_batches(
        list(read_segment_range(store, segment_with(store, [bytes(batch)]), True))
    )
    table.validate(full=True)
    assert table.column("headers").to_pylist() == [
        [{"key": "h\ufffd\ufffd", "value": b"x"}, {"key": "ok", "value": None}]
    ]


def test_a_record_count_short_of_the_records_is_an_error(tmp_path: Path) -> None:
    """A batch whose CRC holds but whose records outnumber its count (a writer's bug)
    is reported, not read as fewer records."""
    batch = bytearray(build_record_batch(simple(0, 3)))
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 2)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    store = LocalDirectoryStore(str(tmp_path))
    segment = segment_with(store, [bytes(batch)])
    with pytest.raises(RemoteTierError, match="10 bytes after the last of the batch's records"):
        list(read_segment_range(store, segment))


def test_a_record_longer_than_its_fields_is_an_error(tmp_path: Path) -> None:
    """A batch whose CRC holds but whose last record's length counts a byte past its
    fields (Kafka's DefaultRecord.readFrom refuses it) is reported, not read with the
    byte skipped."""
    batch = bytearray(build_record_batch(simple(0, 1)))
    assert batch[RECORD_BATCH_OVERHEAD] < 0x7F  # a one-byte length varint: + 1 is + 2
    batch[RECORD_BATCH_OVERHEAD] += 2
    batch.append(0)
    struct.pack_into(">i", batch, BATCH_LENGTH_OFFSET, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    store = LocalDirectoryStore(str(tmp_path))
    segment = segment_with(store, [bytes(batch)])
    with pytest.raises(RemoteTierError, match=r"at position 0 .*expected to read"):
        list(read_segment_range(store, segment))


def test_an_object_shorter_than_its_manifest_says_is_an_error(tmp_path: Path) -> None:
    store = LocalDirectoryStore(str(tmp_path))
    segment = segment_with(store, list(batches_of(40)))
    size = segment.segment.segment_size_in_bytes
    longer = dataclasses.replace(segment.segment, segment_size_in_bytes=size + 100)
    with pytest.raises(RemoteTierError, match=f"ends at byte {size}, before the {size + 100}"):
        list(read_segment_range(store, SegmentRange(longer, 0, 39), read_bytes=512))


def test_a_read_stopped_early_leaves_no_prefetch_thread(tmp_path: Path) -> None:
    store = LocalDirectoryStore(str(tmp_path))
    segment = segment_with(store, list(batches_of(400)))
    reads = read_segment_range(store, segment, read_bytes=1000, batch_bytes=100)
    assert next(reads).num_rows > 0
    reads.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("tiercel-reader-prefetch")]
