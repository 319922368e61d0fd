"""The reader library (tiered.reader) against S3 (moto's server): a real log's rolled
segments copied by the S3RemoteStorageManager as the broker's copier copies them, under
a key prefix, read back from an ``s3://`` root record for record; a ranged read from the
middle of a segment asks S3 for less than the whole object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.moto_server import REGION, S3Bucket
from support.reader_rows import produce_every_codec, rows_of
from support.tiering import open_log, scheduler, small_config, tier_rolled_segments
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.reader import (
    RemoteTierError,
    SegmentRange,
    open_object_root,
    plan_topic,
    read_partition,
    read_segment_range,
)
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.s3_config import S3Config
from tiercel.tiered.rsm.s3_remote_storage import S3RemoteStorageManager

__all__ = ["scheduler"]


class RangeCounter:
    """The store, recording each ranged read's key, start and length."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.ranges: list[tuple[str, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        data = self.store.get_range(key, start, end)
        self.ranges.append((key, start, len(data)))
        return data


async def test_a_tiered_log_reads_back_from_s3(
    s3_bucket: S3Bucket, tmp_path: Path, scheduler: Scheduler
) -> None:
    config = small_config(segment_bytes=4096, index_interval_bytes=256)
    log = open_log(str(tmp_path / "orders-0"), config, scheduler)
    expected = produce_every_codec(log, 120)
    log.roll()
    rsm = S3RemoteStorageManager(S3Config(s3_bucket.name, "tier/", REGION, s3_bucket.endpoint_url))
    segments = await tier_rolled_segments(log, rsm, InMemoryRemoteLogMetadataManager())  # type: ignore[arg-type]
    assert len(segments) > 3
    await log.close()

    store = open_object_root(
        f"s3://{s3_bucket.name}/tier", endpoint_url=s3_bucket.endpoint_url, region=REGION
    )
    plan = plan_topic(store, "orders")
    [partition] = plan.partitions
    assert partition.gaps == ()
    assert [r.segment.start_offset for r in partition.ranges] == [s.start_offset for s in segments]
    assert rows_of(list(read_partition(store, partition, include_headers=True))) == expected

    # From the middle of the largest segment: the offset index moves the first GET.
    whole = max(partition.ranges, key=lambda r: r.segment.segment_size_in_bytes)
    middle = (whole.first_offset + whole.last_offset) // 2
    counter = RangeCounter(store)
    part = SegmentRange(whole.segment, middle, whole.last_offset)
    rows = rows_of(list(read_segment_range(counter, part, include_headers=True)))  # type: ignore[arg-type]
    assert rows == [row for row in expected if middle <= row[0] <= whole.last_offset]
    [(key, start, size)] = counter.ranges
    assert key == whole.log_key and start > 0
    assert size == whole.segment.segment_size_in_bytes - start


async def test_a_missing_segment_object_is_an_error_naming_it(
    s3_bucket: S3Bucket, tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), small_config(), scheduler)
    produce_every_codec(log, 20)
    log.roll()
    rsm = S3RemoteStorageManager(S3Config(s3_bucket.name, "", REGION, s3_bucket.endpoint_url))
    await tier_rolled_segments(log, rsm, InMemoryRemoteLogMetadataManager())  # type: ignore[arg-type]
    await log.close()
    store = open_object_root(f"s3://{s3_bucket.name}", endpoint_url=s3_bucket.endpoint_url)
    [partition] = plan_topic(store, "orders").partitions
    victim = partition.ranges[1]
    store.delete([victim.log_key])
    with pytest.raises(RemoteTierError, match=victim.log_key):
        list(read_partition(store, partition))
