"""Produce throughput of the idempotent producer against plain acks=all, on Tiercel.

    .venv/bin/python tests/bench/idempotence.py [--mb 200] [--value-bytes 1024] [--rounds 3]

librdkafka (confluent-kafka) produces ``--mb`` MB of fixed-size values to a one-partition
topic with acks=all, once with ``enable.idempotence=false`` and once with ``true``, each
against a fresh broker started as a user starts it (its log written to disk without
fsync per append, Kafka's default); rounds alternate and medians are printed with their
ratio. Each round also prints how many produce requests librdkafka had in flight (its
statistics' ``waitresp_cnt``, sampled every 100 ms): on average over the samples with
any, and at most. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile

from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import TOPIC, produce_all, tiercel


def produce_mb_s(
    bootstrap: str, total_mb: int, value_bytes: int, idempotent: bool
) -> tuple[float, float, int]:
    """(MB/s, average requests in flight when any, most in flight) of one produce run."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    count = total_mb * 1024 * 1024 // value_bytes
    value = os.urandom(value_bytes)
    in_flight: list[int] = []

    def on_stats(stats_json: str) -> None:
        brokers = json.loads(stats_json)["brokers"].values()
        in_flight.append(sum(b["waitresp_cnt"] for b in brokers if b["nodeid"] >= 0))

    seconds = produce_all(
        bootstrap,
        count,
        value,
        {"enable.idempotence": idempotent, "statistics.interval.ms": 100, "stats_cb": on_stats},
    )
    busy = [n for n in in_flight if n > 0] or [0]
    return count * value_bytes / 1e6 / seconds, statistics.fmean(busy), max(busy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MB to produce (default 200)")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args()
    print(
        f"workload: {args.mb} MB of {args.value_bytes}-byte values, acks=all, one partition, "
        f"librdkafka; {args.rounds} alternating rounds",
        flush=True,
    )
    results: dict[str, list[float]] = {"plain": [], "idempotent": []}
    for round_number in range(1, args.rounds + 1):
        for name in results:
            work = tempfile.mkdtemp(prefix=f"bench-{name}-")
            try:
                with tiercel(work) as bootstrap:
                    mb_s, in_flight, most = produce_mb_s(
                        bootstrap, args.mb, args.value_bytes, name != "plain"
                    )
            finally:
                shutil.rmtree(work, ignore_errors=True)
            results[name].append(mb_s)
            print(
                f"round {round_number} {name:10s} produce {mb_s:8.1f} MB/s, "
                f"requests in flight {in_flight:.1f} on average, {most} at most",
                flush=True,
            )
    plain, idempotent = (statistics.median(results[n]) for n in ("plain", "idempotent"))
    print(f"median plain      produce {plain:8.1f} MB/s")
    print(f"median idempotent produce {idempotent:8.1f} MB/s")
    print(f"ratio idempotent/plain: {idempotent / plain:.2f}")


if __name__ == "__main__":
    main()
