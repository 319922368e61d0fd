"""Replication figures of a three-node KRaft cluster: acks=all throughput with RF=3
against RF=1, and failover time after the leader is SIGKILLed.

    .venv/bin/python tests/bench/cluster.py [--mb 100] [--rounds 3] [--failovers 3]
        [--session-timeout-ms MS]

Three combined nodes run as child processes started from config/kraft/node-{1,2,3}.yaml
exactly as the tests start them (tests/support/cluster.py), with asyncio debug mode off;
they use the broker.session.timeout.ms of their config files (9 s, Kafka's default)
unless ``--session-timeout-ms`` overrides it.

Throughput: librdkafka produces ``--mb`` MB of 1 KB values with acks=all to a
one-partition topic with replication factor 1, then to one with replication factor 3
(min.insync.replicas=2), alternating for ``--rounds`` rounds; prints the medians and the
ratio. Failover: an idempotent acks=all producer streams into an RF=3 partition; the
leader's broker is SIGKILLed, and the time until the producer's first acknowledgement
after the kill is the failover time. Most of it is the old leader's session expiring,
which the active controller waits for: between broker.session.timeout.ms minus the
heartbeat interval and that timeout after the kill. The killed node is never the
active controller (tests/bench/kraft_failover.py measures that case). It is restarted
and rejoins the ISR before the next round. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.cluster import ClusterProcess
from support.sequence_producer import SequenceProducer

VALUE_BYTES = 1024


def produce_mb_s(bootstrap: str, topic: str, megabytes: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 512 * 1024,
        }
    )
    value = b"x" * VALUE_BYTES
    count = megabytes * 1024 * 1024 // VALUE_BYTES
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    elapsed = time.perf_counter() - start
    assert not errors, errors[:3]
    return count * VALUE_BYTES / elapsed / 1e6


def throughput(cluster: ClusterProcess, megabytes: int, rounds: int) -> None:
    cluster.create_topic("rf1", replication_factor=1)
    cluster.create_topic("rf3", replication_factor=3, config={"min.insync.replicas": "2"})
    produce_mb_s(cluster.bootstrap(), "rf1", 5)  # warm-up: connections, metadata
    produce_mb_s(cluster.bootstrap(), "rf3", 5)
    results: dict[str, list[float]] = {"rf1": [], "rf3": []}
    for round_ in range(rounds):
        for topic in ("rf1", "rf3"):
            rate = produce_mb_s(cluster.bootstrap(), topic, megabytes)
            results[topic].append(rate)
            print(f"round {round_ + 1}: {topic} {rate:.0f} MB/s", flush=True)
    rf1, rf3 = (statistics.median(results[t]) for t in ("rf1", "rf3"))
    print(f"acks=all produce, medians of {rounds}: RF=1 {rf1:.0f} MB/s, RF=3 {rf3:.0f} MB/s")
    print(f"RF=3 / RF=1: {rf3 / rf1:.2f}")


def failover(cluster: ClusterProcess, rounds: int) -> None:
    cluster.create_topic("failover", replication_factor=3, config={"min.insync.replicas": "2"})
    times = []
    for round_ in range(rounds):
        leader = cluster.leader_of("failover", 0)
        if leader == cluster.wait_for_controller():
            elected = [n for n in cluster.brokers if n != leader]
            cluster.restart(leader)  # its controlled shutdown moves the leadership
            cluster.wait_until_isr("failover", 0, cluster.brokers, timeout=120)
            leader = cluster.leader_of("failover", 0)
            assert leader in elected
        producer = SequenceProducer(cluster.bootstrap(), "failover").start()
        producer.wait_for_acks(1000)
        cluster.kill(leader)
        killed_at = time.monotonic()
        producer.wait_for(
            lambda t, since=killed_at: any(at > since for at in t.ack_times.values()),
            timeout=120,
        )
        first = min(at for at in producer.tally.ack_times.values() if at > killed_at)
        tally = producer.stop()
        assert not tally.failed, list(tally.failed.items())[:3]
        times.append(first - killed_at)
        print(f"round {round_ + 1}: killed leader {leader}, first ack after {times[-1]:.2f} s")
        cluster.start_broker(leader)
        cluster.wait_until_isr("failover", 0, cluster.brokers, timeout=120)
    print(
        f"failover (leader SIGKILL -> first acknowledged produce), {rounds} rounds: "
        f"median {statistics.median(times):.2f} s, range {min(times):.2f}-{max(times):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tiercel-bench-cluster-") as tmp:
        overrides = {}
        if args.session_timeout_ms is not None:
            overrides["broker.session.timeout.ms"] = args.session_timeout_ms
        cluster = ClusterProcess(Path(tmp) / "cluster", overrides=overrides)
        for node in cluster.nodes.values():
            node.asyncio_debug = False
        try:
            cluster.start()
            if args.rounds:
                throughput(cluster, args.mb, args.rounds)
            if args.failovers:
                failover(cluster, args.failovers)
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
