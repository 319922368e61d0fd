"""The Spark reader against a consumer of the broker, over the same fully tiered range
(issue 11's figure).

    .venv/bin/python tests/bench/spark_read.py [--mb 1024] [--partitions 2] [--rounds 2]

One broker, started as a user starts it (tests/bench/tiered_produce.py's ``tiercel``), with
the local-directory tier, and one topic (``remote.storage.enable=true``,
``local.retention.bytes=1``: each segment is deleted locally once it is in the tier) that
receives ``--mb`` MiB of 1 KiB values, lz4-compressed by librdkafka (acks=all). Each value
is 256 random bytes and a 768-byte repetitive text naming the record (lz4 keeps about
28%: 1 GiB of values is about 290 MB of segments). Once each partition's only local
segment is the active one, offsets [0, its base offset) are in the remote tier alone;
that range is read three ways:

- Spark ``count()`` over ``spark.read.format("tiercel")`` (the object store only),
- Spark ``sum(length(value))`` over the same DataFrame (forces every value to the JVM),
- a librdkafka consumer reading it through the broker (served from the remote tier).

Spark runs as ``local[1]`` and ``local[2]`` (one session each, warmed up by one read). The
script prints records/s and MB/s of values for each, the ratio Spark / broker consume, the
CPU seconds the whole process tree used (broker, client, Spark's JVM and Python workers:
steadier than wall time on a loaded machine), and the medians over ``--rounds``. Not part
of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tiered_produce import MIB, Broker, tiercel, wait_for

TOPIC = "history"
VALUE_BYTES = 1024


def create_topic(bootstrap: str, partitions: int, segment_bytes: int) -> None:
    config = {
        "segment.bytes": str(segment_bytes),
        "remote.storage.enable": "true",
        "local.retention.bytes": "1",
        "file.delete.delay.ms": "500",
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1, config=config)]).values():
        future.result(30)


def values(distinct: int = 4096) -> list[bytes]:
    """Half-compressible 1 KiB values: 256 random bytes, then text naming the record."""
    out = []
    for n in range(distinct):
        text = (f'{{"record": {n}, "note": "tiered history"}} ' * 32).encode()
        out.append(os.urandom(256) + text[: VALUE_BYTES - 256])
    return out


def produce(bootstrap: str, count: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    pool = values()
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for n in range(count):
        while True:
            try:
                producer.produce(TOPIC, pool[n % len(pool)], on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(600)
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")


def local_bases(broker: Broker, partition: int) -> list[int]:
    names = os.listdir(broker.log_dir / f"{TOPIC}-{partition}")
    return sorted(int(name[:-4]) for name in names if name.endswith(".log"))


def tiered_ends(broker: Broker, partitions: int) -> dict[int, int] | None:
    """Each partition's local start (one past its remote-only range), once only the active
    segment is left locally."""
    bases = [local_bases(broker, p) for p in range(partitions)]
    if any(len(b) != 1 for b in bases):
        return None
    return {p: b[0] for p, b in enumerate(bases)}


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and every live descendant: the broker,
    Spark's JVM and its Python workers. Steadier than wall time on a loaded machine."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parents[int(name)] = int(fields[1])
        used[int(name)] = (int(fields[11]) + int(fields[12])) / ticks
    tree, grew = {os.getpid()}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return sum(used.get(pid, 0.0) for pid in tree)


Timing = tuple[float, float]  # wall seconds, CPU seconds of the process tree


def consume_s(bootstrap: str, ends: dict[int, int]) -> Timing:
    """Seconds for a fresh librdkafka consumer to read [0, end) of every partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-spark-read",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) when
            # its queue of fetched messages is over queued.max.messages.kbytes (64 MiB of
            # decompressed values, two 10 MB fetches of lz4 batches): the consumer would
            # then wait on itself, not on the broker (3x slower here).
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in ends])
    remaining = {p: end for p, end in ends.items() if end > 0}
    cpu = tree_cpu_s()
    start = time.perf_counter()
    while remaining:
        for message in consumer.consume(10000, timeout=1.0):
            if message.error() is not None:
                raise RuntimeError(f"consume failed: {message.error()}")
            partition = message.partition()
            if partition in remaining and message.offset() + 1 >= remaining[partition]:
                del remaining[partition]
    seconds = time.perf_counter() - start
    cpu = tree_cpu_s() - cpu
    consumer.close()
    return seconds, cpu


def spark_session(master: str) -> object:
    from pyspark.sql import SparkSession

    from tiercel.tiered.spark import TiercelDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(master)
        .appName("tiercel-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.dataSource.register(TiercelDataSource)
    return spark


def spark_reads(spark: object, root: Path, ends: dict[int, int]) -> dict[str, Timing]:
    """Seconds for count() and sum(length(value)) over the tiered range."""
    from pyspark.sql import functions as F

    frame = (
        spark.read.format("tiercel")  # type: ignore[attr-defined]
        .option("path", root.as_uri())
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({TOPIC: {str(p): e for p, e in ends.items()}}))
        .load()
    )
    timings: dict[str, Timing] = {}
    expected = sum(ends.values())

    def timed(name: str, action: Callable[[], object], check: object) -> None:
        cpu = tree_cpu_s()
        start = time.perf_counter()
        result = action()
        timings[name] = time.perf_counter() - start, tree_cpu_s() - cpu
        if result != check:
            raise AssertionError(f"{name}: {result}, expected {check}")

    timed("count", frame.count, expected)
    timed(
        "sum(length(value))",
        lambda: frame.agg(F.sum(F.length("value"))).first()[0],
        expected * VALUE_BYTES,
    )
    return timings


def report(name: str, timing: Timing, records: int, consume: Timing) -> None:
    seconds, cpu = timing
    print(
        f"  {name:26s} {records / seconds / 1e3:5.0f}k rec/s "
        f"{records * VALUE_BYTES / seconds / 1e6:6.1f} MB/s  "
        f"ratio to broker consume {consume[0] / seconds:.2f}  "
        f"CPU {cpu:5.2f} s ({cpu / records * 1e6:.2f} us/record)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="MiB of values (default 1024)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segment-mb", type=int, default=64, help="segment.bytes in MiB")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "250",
        "log.retention.check.interval.ms": "250",
    }
    count = args.mb * MIB // VALUE_BYTES
    with (
        tempfile.TemporaryDirectory(prefix="bench-spark-read-") as tmp,
        tiercel(Path(tmp), overrides, None) as broker,
    ):
        create_topic(broker.bootstrap, args.partitions, args.segment_mb * MIB)
        start = time.perf_counter()
        produce(broker.bootstrap, count)
        print(f"produced {count} records in {time.perf_counter() - start:.1f} s", flush=True)
        if not wait_for(lambda: tiered_ends(broker, args.partitions) is not None, 600):
            raise TimeoutError("the rolled segments were not all tiered and trimmed")
        ends = tiered_ends(broker, args.partitions)
        assert ends is not None
        records = sum(ends.values())
        print(
            f"{records} records ({records * VALUE_BYTES / 1e6:.0f} MB of values) in the "
            f"remote tier only, {args.partitions} partitions",
            flush=True,
        )
        root = broker.log_dir / "remote-storage"
        consumed: list[Timing] = []
        results: dict[str, list[Timing]] = {}
        for master in ("local[1]", "local[2]"):
            spark = spark_session(master)
            spark_reads(spark, root, ends)  # warm-up: JVM, Python workers
            for round_number in range(1, args.rounds + 1):
                consume = consume_s(broker.bootstrap, ends)
                consumed.append(consume)
                print(f"{master} round {round_number}:", flush=True)
                report("broker consume", consume, records, consume)
                for name, timing in spark_reads(spark, root, ends).items():
                    results.setdefault(f"{master} {name}", []).append(timing)
                    report(f"spark {name}", timing, records, consume)
            spark.stop()  # type: ignore[attr-defined]
        consume = median_timing(consumed)
        print("medians:")
        report("broker consume", consume, records, consume)
        for name, timings in results.items():
            report(name, median_timing(timings), records, consume)


def median_timing(timings: list[Timing]) -> Timing:
    return statistics.median(t[0] for t in timings), statistics.median(t[1] for t in timings)


if __name__ == "__main__":
    main()
