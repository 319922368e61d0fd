"""Throughput of the reader's broker tail (`tiercel.tiered.reader.broker_tail`) against
librdkafka consuming the same range from the same broker.

    .venv/bin/python tests/bench/broker_tail.py [--mb 200] [--rounds 3] [--codec lz4]

One broker, started as a user starts it (tests/bench/tiered_produce.py's ``tiercel``),
one partition of ``--mb`` MB of 1 KiB text-like values produced by librdkafka (acks=all,
``--codec``; nothing tiered: the tail's usual range is the local log). Then, alternating
for ``--rounds`` rounds: `read_broker_range` over every offset, summing the value
lengths of the Arrow batches (as Spark's ``sum(length(value))`` forces the values), and
a fresh librdkafka consumer over the same offsets (touching each message's value).
Prints records/s and MB/s of values per read, the medians and the ratio tail/consumer.
Not part of `make test`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import produce_all
from tiered_produce import MIB, tiercel

from tiercel.tiered.reader.broker_tail import high_watermarks, read_broker_range

TOPIC = "tail-bench"
WORDS = [f"w{n:03d}".encode() for n in range(300)]


def text_value(size: int) -> bytes:
    rng = random.Random(7)
    return b" ".join(rng.choices(WORDS, k=size // 4))[:size]


def tail_read(bootstrap: str, end: int) -> tuple[float, int]:
    """(seconds, value bytes) of `read_broker_range` over offsets [0, end)."""
    start = time.perf_counter()
    total = 0
    for batch in read_broker_range(bootstrap, TOPIC, 0, 0, end - 1):
        total += pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0
    return time.perf_counter() - start, total


def consumer_read(bootstrap: str, end: int) -> tuple[float, int]:
    """(seconds, value bytes) of a fresh librdkafka consumer over offsets [0, end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-tail",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    next_offset, total = 0, 0
    start = time.perf_counter()
    while next_offset < end:
        for message in consumer.consume(min(10000, end - next_offset), timeout=1.0):
            if message.error() is not None:
                raise RuntimeError(f"consume failed: {message.error()}")
            total += len(message.value() or b"")
            next_offset = message.offset() + 1
    seconds = time.perf_counter() - start
    consumer.close()
    return seconds, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MB of values (default 200)")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--codec", default="lz4")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    count = args.mb * MIB // args.value_bytes
    with (
        tempfile.TemporaryDirectory(prefix="bench-broker-tail-") as tmp,
        tiercel(Path(tmp), {}, None) as broker,
    ):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        value = text_value(args.value_bytes)
        produce_all(broker.bootstrap, count, value, {"compression.type": args.codec}, TOPIC)
        end = high_watermarks(broker.bootstrap, TOPIC, [0])[0]
        print(f"{end} records, {args.codec}; {args.rounds} alternating rounds", flush=True)
        rates: dict[str, list[float]] = {"tail": [], "consumer": []}
        for round_number in range(1, args.rounds + 1):
            for name, read in (("tail", tail_read), ("consumer", consumer_read)):
                seconds, total = read(broker.bootstrap, end)
                assert total == end * len(value), (name, total)
                rates[name].append(end / seconds)
                print(
                    f"round {round_number}: {name:8s} {end / seconds:10,.0f} records/s "
                    f"{total / 1e6 / seconds:7.1f} MB/s",
                    flush=True,
                )
    tail, consumer = (statistics.median(rates[name]) for name in ("tail", "consumer"))
    mb = args.value_bytes / 1e6
    print(f"median: tail {tail:,.0f} records/s ({tail * mb:.1f} MB/s), ", end="")
    print(f"librdkafka {consumer:,.0f} records/s ({consumer * mb:.1f} MB/s)")
    print(f"ratio tail/librdkafka: {tail / consumer:.2f}")


if __name__ == "__main__":
    main()
