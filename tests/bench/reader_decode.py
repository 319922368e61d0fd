"""Decode throughput of the reader library (`tiercel.tiered.reader`): one remote segment
object per codec (uncompressed, lz4, zstd by default), read from a local-directory store
into Arrow batches of Spark's Kafka-source schema.

    .venv/bin/python tests/bench/reader_decode.py [--mb 64] [--value-bytes 1024]
        [--batch-records N] [--codecs none,lz4,zstd] [--rounds 3] [--headers]
    TIERCEL_READER_PURE_PYTHON=1 .venv/bin/python tests/bench/reader_decode.py ...

Values are text-like (words drawn from a small vocabulary, as JSON-ish payloads
compress), keys 16 bytes; batches of ``--batch-records`` records (default: 16 KiB of
values, the Java producer's default batch.size), as a producer with some linger sends
them. Prints which record decoder ran (native, or the Python fallback forced by
TIERCEL_READER_PURE_PYTHON=1) and the best round's records/s and MB/s (of value bytes)
per codec, by wall-clock and by process CPU time (the machine is shared: CPU time is
the steadier figure). Single-threaded; not part of `make test`.
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
from tiercel.tiered.reader import SegmentRange, read_segment_range, record_columns
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, object_key
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)

WORDS = [f"w{n:03d}".encode() for n in range(300)]


def values(rng: random.Random, count: int, size: int) -> list[bytes]:
    return [b" ".join(rng.choices(WORDS, k=size // 5 + 1))[:size] for _ in range(count)]


def build_segment(
    store: LocalDirectoryStore,
    mb: int,
    value_bytes: int,
    batch_records: int,
    codec: CompressionType,
    headers: bool,
) -> tuple[SegmentRange, int]:
    rng = random.Random(7)
    pool = values(rng, 512, value_bytes)
    batches = []
    offset = 0
    while offset * value_bytes < mb * 1024 * 1024:
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
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--batch-records", type=int, default=0, help="default: 16 KiB")
    parser.add_argument("--codecs", default="none,lz4,zstd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--headers", action="store_true")
    args = parser.parse_args()
    batch_records = args.batch_records or max(1, 16384 // args.value_bytes)
    native = record_columns.native_available() and not record_columns.pure_python
    print(
        f"decoder: {'native' if native else 'python'}; {args.value_bytes}-byte values, "
        f"{batch_records} records a batch{', headers' if args.headers else ''}"
    )
    for name in args.codecs.split(","):
        codec = CompressionType.from_name(name)
        with tempfile.TemporaryDirectory() as root:
            store = LocalDirectoryStore(root)
            segment, size = build_segment(
                store, args.mb, args.value_bytes, batch_records, codec, args.headers
            )
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
