"""Consumer-group failover: from a member's SIGKILL to the survivors reading its partitions.

    .venv/bin/python tests/bench/group_failover.py [--rounds 3] [--session-ms 2000]
        [--protocol classic|consumer|both]

Each round starts a fresh broker (as a user starts it, asyncio debug off; its log is
written to disk without fsync per append, Kafka's default), fills a six-partition topic
with 100 records a partition, and runs three librdkafka members in separate processes
(tests/support/group_members.py, the scenario the group integration tests check): once
they have split the topic and the first has committed on each of its partitions, it is
SIGKILLed, and the time to the survivors' first read of its partitions is taken. Each
member sleeps 10 ms after each record so that the victim is still busy when it dies.

- classic: ``session.timeout.ms`` = --session-ms, heartbeat every tenth of it, broker
  ``group.initial.rebalance.delay.ms=0``;
- consumer (KIP-848, ``group.protocol=consumer``): the broker's
  ``group.consumer.session.timeout.ms`` = --session-ms, heartbeat interval 200 ms.

Prints each round and the median (min-max) per protocol. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the support package

from support.broker import BrokerProcess
from support.clients import create_topic
from support.group_members import Member, lose_a_member

PARTITIONS, PER_PARTITION = 6, 100


def settings(protocol: str, session_ms: int) -> tuple[dict[str, object], tuple[str, ...]]:
    """(broker overrides, member flags) for one protocol."""
    if protocol == "classic":
        broker = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}
        return broker, ("--session-ms", str(session_ms), "--delay-ms", "10")
    broker = {
        "group.consumer.session.timeout.ms": session_ms,
        "group.consumer.heartbeat.interval.ms": 200,
    }
    return broker, ("--protocol", "consumer", "--delay-ms", "10")


def one_round(protocol: str, session_ms: int, work: Path) -> float:
    overrides, member_args = settings(protocol, session_ms)
    broker = BrokerProcess(work / "broker", overrides)
    broker.asyncio_debug = False
    members: list[Member] = []
    try:
        broker.start()
        create_topic(broker.bootstrap, "failover", PARTITIONS)
        loss = lose_a_member(
            broker.bootstrap, "failover", "failover-group", PARTITIONS, PER_PARTITION,
            work, members, member_args,
        )  # fmt: skip
        return loss.rebalance_s
    finally:
        for member in members:
            member.kill()
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per protocol (default 3)")
    parser.add_argument("--session-ms", type=int, default=2000, help="session timeout (2000)")
    parser.add_argument("--protocol", choices=("classic", "consumer", "both"), default="both")
    args = parser.parse_args()
    protocols = ("classic", "consumer") if args.protocol == "both" else (args.protocol,)
    print(
        f"three librdkafka members, {PARTITIONS} partitions x {PER_PARTITION} records, "
        f"session timeout {args.session_ms} ms, {args.rounds} rounds",
        flush=True,
    )
    results: dict[str, list[float]] = {p: [] for p in protocols}
    for round_number in range(1, args.rounds + 1):
        for protocol in protocols:
            with tempfile.TemporaryDirectory(prefix=f"bench-group-{protocol}-") as work:
                seconds = one_round(protocol, args.session_ms, Path(work))
            results[protocol].append(seconds)
            print(f"round {round_number} {protocol:8s} failover {seconds:.2f} s", flush=True)
    for protocol, values in results.items():
        print(
            f"median {protocol:8s} failover {statistics.median(values):.2f} s "
            f"({min(values):.2f}-{max(values):.2f} s, {len(values)} rounds)"
        )


if __name__ == "__main__":
    main()
