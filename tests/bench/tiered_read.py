"""Consumer throughput over a fully tiered range against the same range read locally
(KIP-405 remote reads).

    .venv/bin/python tests/bench/tiered_read.py [--mb 200] [--rounds 5] [--segment-mb 16]
        [--isolation read_committed|read_uncommitted]

One broker, started as a user starts it (tests/bench/tiered_produce.py's ``tiercel``), with the
local-directory tier and two one-partition topics that receive the same ``--mb`` MB of
1 KiB values from librdkafka (acks=all): ``tiered`` (``remote.storage.enable=true``,
``local.retention.bytes=1``: each segment is deleted locally once it is in the tier) and
``local`` (no tiering). Once only the tiered topic's active segment is left on local
disk, offsets [0, its base offset) are in the remote tier alone; a fresh librdkafka
consumer then reads that range from each topic in turn, alternating for ``--rounds``
rounds. Prints MB/s per read, the medians and the ratio tiered/local. The consumer reads
with librdkafka's default isolation, read_committed, unless ``--isolation`` says
otherwise: a read_committed remote fetch also searches the tier's transaction indexes
for aborted transactions (small ``--segment-mb`` values, hundreds of segments, show what
that search costs).

The local topic's segments were just written, so they are read from the page cache; the
tier's objects were written with O_DIRECT, so remote reads start from the disk (or the
VM host's cache) as a colder tier would. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import produce_all
from tiered_produce import MIB, Broker, tiercel, wait_for

TOPICS = ("tiered", "local")


def create_topics(bootstrap: str, segment_bytes: int) -> None:
    segment = {"segment.bytes": str(segment_bytes)}
    tiered = {
        **segment,
        "remote.storage.enable": "true",
        "local.retention.bytes": "1",
        "file.delete.delay.ms": "500",
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic("tiered", 1, 1, config=tiered), NewTopic("local", 1, 1, config=segment)]
    )
    for future in futures.values():
        future.result(30)


def local_bases(broker: Broker, topic: str) -> list[int]:
    names = os.listdir(broker.log_dir / f"{topic}-0")
    return sorted(int(name[:-4]) for name in names if name.endswith(".log"))


def read_mb_s(bootstrap: str, topic: str, end: int, value_bytes: int, isolation: str) -> float:
    """A fresh consumer reads offsets [0, end) of ``topic``; MB/s of values."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "isolation.level": isolation,
            "group.id": "bench-read",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    next_offset = 0
    start = time.perf_counter()
    while next_offset < end:
        # As produce_consume.py: progress from each batch's last offset, no per-message work.
        messages = consumer.consume(min(10000, end - next_offset), timeout=1.0)
        if messages:
            last = messages[-1]
            if last.error() is not None:
                raise RuntimeError(f"consume failed: {last.error()}")
            next_offset = last.offset() + 1
    seconds = time.perf_counter() - start
    consumer.close()
    return end * value_bytes / 1e6 / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MB to produce (default 200)")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--segment-mb", type=float, default=16, help="segment.bytes in MiB")
    parser.add_argument(
        "--isolation", choices=("read_committed", "read_uncommitted"), default="read_committed"
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "250",
        "log.retention.check.interval.ms": "250",
    }
    value = os.urandom(args.value_bytes)
    count = args.mb * MIB // args.value_bytes
    with (
        tempfile.TemporaryDirectory(prefix="bench-tiered-read-") as tmp,
        tiercel(Path(tmp), overrides, None) as broker,
    ):
        segment_bytes = int(args.segment_mb * MIB)
        create_topics(broker.bootstrap, segment_bytes)
        # Batches fit in a segment (librdkafka's default batch.size is 1 MB).
        batching = {"batch.size": min(1_000_000, segment_bytes // 2)}
        for topic in TOPICS:
            produce_all(broker.bootstrap, count, value, batching, topic=topic)
        if not wait_for(lambda: len(local_bases(broker, "tiered")) == 1, 300):
            raise TimeoutError("the tiered topic's rolled segments were not all trimmed")
        end = local_bases(broker, "tiered")[0]
        print(
            f"{end} records ({end * args.value_bytes / 1e6:.0f} MB of values) below the "
            f"tiered topic's local start; {args.rounds} alternating rounds, {args.isolation}",
            flush=True,
        )
        results: dict[str, list[float]] = {topic: [] for topic in TOPICS}
        for round_number in range(1, args.rounds + 1):
            for topic in TOPICS:
                rate = read_mb_s(broker.bootstrap, topic, end, args.value_bytes, args.isolation)
                results[topic].append(rate)
                print(f"round {round_number}: {topic:6s} read {rate:7.1f} MB/s", flush=True)
    tiered, local = (statistics.median(results[topic]) for topic in TOPICS)
    print(f"median read: tiered {tiered:.1f} MB/s, local {local:.1f} MB/s")
    print(f"ratio tiered/local: {tiered / local:.2f}")


if __name__ == "__main__":
    main()
