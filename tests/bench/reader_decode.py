"""Decode throughput of the reader library (`tiercel.tiered.reader`): one remote segment
object of 1 KiB values, uncompressed and zstd, read from a local-directory store into
Arrow batches of Spark's Kafka-source schema.

    .venv/bin/python tests/bench/reader_decode.py [--mb 64] [--batch-records 16]
        [--rounds 3] [--headers]

Values are text-like (words drawn from a small vocabulary, as JSON-ish payloads
compress), keys 16 bytes; batches of ``--batch-records`` records, as a producer with
some linger sends them. Prints the best round's records/s and MB/s (of value bytes) per
codec, by wall-clock and by process CPU time (the machine is shared: CPU time is the
steadier figure). Single-threaded; not part of `make test`.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid

from tiercel.protocol.compression import CompressionType
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.reader import SegmentRange, read_segment_range
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, object_key
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)

VALUE_BYTES = 1024
WORDS = [f"w{n:03d}".encode() for n in range(300)]


def values(rng: random.Random, count: int) -> list[bytes]:
    return [b" ".join(rng.choices(WORDS, k=VALUE_BYTES // 5))[:VALUE_BYTES] for _ in range(count)]


def build_segment(
    store: LocalDirectoryStore, mb: int, batch_records: int, codec: CompressionType, headers: bool
) -> tuple[SegmentRange, int]:
    rng = random.Random(7)
    pool = values(rng, 512)
    batches = []
    offset = 0
    while offset * VALUE_BYTES < mb * 1024 * 1024:
        records = [
            SimpleRecord(
                f"key-{offset + i:012d}".encode(),
                pool[(offset + i) % len(pool)],
                [("trace", b"abc")] if headers else (),
                1_700_000_000_000 + offset + i,
            )
            for i in range(batch_records)
        ]
        batches.append(build_record_batch(records, base_offset=offset, compression=codec))
        offset += batch_records
    data = b"".join(batches)
    tp = TopicPartition("bench", 0)
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(uuid.uuid4(), tp), 0, offset - 1, 0, 0, 0, len(data), {0: 0}
    )
    store.put_bytes(object_key(metadata, LOG_SUFFIX), data)
    return SegmentRange(metadata, 0, offset - 1), len(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--batch-records", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--headers", action="store_true")
    args = parser.parse_args()
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        with tempfile.TemporaryDirectory() as root:
            store = LocalDirectoryStore(root)
            segment, size = build_segment(store, args.mb, args.batch_records, codec, args.headers)
            walls, cpus = [], []
            for _ in range(args.rounds):
                wall, cpu = time.perf_counter(), time.process_time()
                rows = 0
                value_bytes = 0
                for batch in read_segment_range(store, segment, args.headers):
                    rows += batch.num_rows
                    value_bytes += batch.column("value").buffers()[2].size
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
            for what, elapsed in (("wall", min(walls)), ("cpu", min(cpus))):
                print(
                    f"{codec.kafka_name:>5} ({what}): {rows} records, segment "
                    f"{size / 2**20:.1f} MiB: {rows / elapsed:,.0f} records/s, "
                    f"{value_bytes / elapsed / 1e6:,.0f} MB/s of values ({elapsed:.2f} s)"
                )


if __name__ == "__main__":
    main()
