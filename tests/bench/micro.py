"""Micro-measurements behind README's explanations of the throughput figures.

    .venv/bin/python tests/bench/micro.py record-check [--records 1000] [--rounds 5]
    .venv/bin/python tests/bench/micro.py producer-check [--batches 100000] [--rounds 5]
    .venv/bin/python tests/bench/micro.py disk [--mb 400] [--rounds 5] [--dir DIR]
    .venv/bin/python tests/bench/micro.py tier-copy [--segment-mb 16] [--rounds 5] [--dir DIR]

- record-check: the produce path's one per-record step, the structural check of every
  record of a batch (``validate_records``), on a batch of 1 KB values like the
  benchmarks'; microseconds per record.
- producer-check: what the idempotent producer adds per batch on the broker, the
  producer-state check and update (``ProducerStateManager.prepare_append`` then
  ``update``) for a stream of in-sequence batches of one producer; microseconds a batch.
- disk: writing --mb MB in 1 MiB ``os.write`` calls into a fresh file under --dir (the
  temporary directory by default), without fsync, as the broker appends to its segments;
  GB/s per round.
- tier-copy: one rolled segment (``--segment-mb`` MiB of log, small indexes and producer
  snapshot) copied to the local-directory tier (``LocalTieredStorage`` under --dir) as
  the copier thread copies it, files synced; milliseconds a segment, median of 10.

Each prints every round and the median. In-process, no broker; not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

from tiercel.protocol.record_batch import RECORDS_OFFSET, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import validate_records
from tiercel.storage.log_values import AppendBatch
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)


def record_check(records: int) -> tuple[float, str]:
    value = os.urandom(1024)
    batch = build_record_batch(SimpleRecord(None, value) for _ in range(records))
    count = read_header(batch).records_count
    repeat = max(1, 200_000 // records)
    start = time.perf_counter()
    for _ in range(repeat):
        validate_records(batch, count, RECORDS_OFFSET)
    seconds = time.perf_counter() - start
    return seconds / (repeat * records) * 1e6, "µs a record"


def producer_check(batches: int) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="bench-producer-state-") as directory:
        state = ProducerStateManager(TopicPartition("bench", 0), directory)
        per_batch = 100  # records a batch: offsets and sequences advance by this much
        start = time.perf_counter()
        for i in range(batches):
            base = i * per_batch
            batch = AppendBatch(
                chunks=(), size=0, base_offset=base, last_offset=base + per_batch - 1,
                max_timestamp=0, partition_leader_epoch=0, producer_id=1000,
                producer_epoch=0, base_sequence=base,
            )  # fmt: skip
            analyzed = state.prepare_append([batch], AppendOrigin.CLIENT)
            assert analyzed.duplicate is None
            for info in analyzed.updates:
                state.update(info)
            state.update_map_end_offset(base + per_batch)
        seconds = time.perf_counter() - start
    return seconds / batches * 1e6, "µs a batch"


def disk(mb: int, directory: str | None) -> tuple[float, str]:
    chunk = os.urandom(1 << 20)
    with tempfile.TemporaryDirectory(prefix="bench-disk-", dir=directory) as work:
        fd = os.open(os.path.join(work, "segment.log"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            start = time.perf_counter()
            for _ in range(mb):
                os.write(fd, chunk)
            seconds = time.perf_counter() - start
        finally:
            os.close(fd)
    return mb * (1 << 20) / 1e9 / seconds, "GB/s"


def tier_copy(segment_mb: int, directory: str | None) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="bench-tier-copy-", dir=directory) as work:
        paths = {}
        for suffix, size in (("log", segment_mb << 20), ("index", 40_000), ("timeindex", 60_000)):
            paths[suffix] = os.path.join(work, f"segment.{suffix}")
            with open(paths[suffix], "wb") as file:
                file.write(os.urandom(size))
        paths["snapshot"] = os.path.join(work, "segment.snapshot")
        with open(paths["snapshot"], "wb") as file:
            file.write(os.urandom(100))
        data = LogSegmentData(
            paths["log"],
            paths["index"],
            paths["timeindex"],
            None,
            paths["snapshot"],
            b"0\n1\n0 0\n",
        )
        rsm = LocalTieredStorage(os.path.join(work, "tier"))
        topic_id, times = uuid.uuid4(), []
        for i in range(10):
            segment_id = RemoteLogSegmentId.generate(topic_id, TopicPartition("bench", 0))
            base = i * 1000
            metadata = RemoteLogSegmentMetadata(
                segment_id, base, base + 999, 0, 0, 0, segment_mb << 20, {0: base}
            )
            start = time.perf_counter()
            rsm.copy_log_segment_data(metadata, data)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, "ms a segment"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("record-check", "producer-check", "disk", "tier-copy"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=1000, help="record-check batch size")
    parser.add_argument("--batches", type=int, default=100_000, help="producer-check batches")
    parser.add_argument("--mb", type=int, default=400, help="disk: MB to write")
    parser.add_argument("--segment-mb", type=int, default=16, help="tier-copy: segment MiB")
    parser.add_argument("--dir", help="disk, tier-copy: where to write (default: temp dir)")
    args = parser.parse_args()
    measure: Callable[[], tuple[float, str]] = {
        "record-check": lambda: record_check(args.records),
        "producer-check": lambda: producer_check(args.batches),
        "disk": lambda: disk(args.mb, args.dir),
        "tier-copy": lambda: tier_copy(args.segment_mb, args.dir),
    }[args.what]
    results = []
    unit = ""
    for round_number in range(1, args.rounds + 1):
        value, unit = measure()
        results.append(value)
        print(f"round {round_number} {args.what} {value:.3f} {unit}", flush=True)
    print(
        f"median {args.what} {statistics.median(results):.3f} {unit} "
        f"({min(results):.3f}-{max(results):.3f}, {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
