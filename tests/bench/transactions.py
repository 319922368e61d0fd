"""Transactional produce throughput against idempotent produce, and commit latency, on
Tiercel.

    .venv/bin/python tests/bench/transactions.py [--transactions 200] [--per-txn 1000]
        [--value-bytes 1024] [--rounds 3]

librdkafka (confluent-kafka) produces ``--transactions`` x ``--per-txn`` fixed-size
values to a one-partition topic: once idempotent (acks=all, no transactions), once with
``transactional.id``, one transaction per ``--per-txn`` records (begin, produce,
commit). Each run gets a fresh broker started as a user starts it; rounds alternate and
medians are printed with their ratio, and the commit latencies (``commit_transaction``
call to return, which includes flushing the transaction's last records) as p50 and p99
over every transaction of every round. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import TOPIC, produce_all, tiercel


def transactional_run(
    bootstrap: str, transactions: int, per_txn: int, value: bytes
) -> tuple[float, list[float]]:
    """(records/s, commit latencies in ms) of one transactional run."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "bench",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    producer.init_transactions(30)
    latencies = []
    start = time.perf_counter()
    for _ in range(transactions):
        producer.begin_transaction()
        for _ in range(per_txn):
            producer.produce(TOPIC, value, partition=0)
            producer.poll(0)
        before = time.perf_counter()
        producer.commit_transaction(60)
        latencies.append((time.perf_counter() - before) * 1000)
    seconds = time.perf_counter() - start
    return transactions * per_txn / seconds, latencies


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--per-txn", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    count = args.transactions * args.per_txn
    value = os.urandom(args.value_bytes)
    print(
        f"workload: {count} records of {args.value_bytes} bytes, one partition, librdkafka; "
        f"transactions of {args.per_txn}; {args.rounds} alternating rounds",
        flush=True,
    )
    rates: dict[str, list[float]] = {"idempotent": [], "transactional": []}
    latencies: list[float] = []
    for round_number in range(1, args.rounds + 1):
        for name in rates:
            work = tempfile.mkdtemp(prefix=f"bench-{name}-")
            try:
                with tiercel(work) as bootstrap:
                    admin = AdminClient({"bootstrap.servers": bootstrap})
                    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
                    if name == "idempotent":
                        seconds = produce_all(bootstrap, count, value, {"enable.idempotence": True})
                        rate = count / seconds
                    else:
                        rate, run_latencies = transactional_run(
                            bootstrap, args.transactions, args.per_txn, value
                        )
                        latencies += run_latencies
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rates[name].append(rate)
            print(f"round {round_number} {name:13s} {rate:10.0f} records/s", flush=True)
    idempotent, transactional = (statistics.median(rates[n]) for n in rates)
    print(f"median idempotent    {idempotent:10.0f} records/s")
    print(f"median transactional {transactional:10.0f} records/s")
    print(f"ratio transactional/idempotent: {transactional / idempotent:.2f}")
    print(
        f"commit latency over {len(latencies)} transactions: "
        f"p50 {_percentile(latencies, 0.5):.1f} ms, p99 {_percentile(latencies, 0.99):.1f} ms"
    )


if __name__ == "__main__":
    main()
