"""How long a KRaft cluster takes to move leaderships away from a node killed with
SIGKILL, on the default timeouts (broker.session.timeout.ms 9000,
broker.heartbeat.interval.ms 2000, controller.quorum.fetch.timeout.ms 2000,
controller.quorum.election.timeout.ms 1000): three combined nodes, a topic of six
partitions with three replicas; per round, one node is killed — a node that is not the
active controller, then the active controller itself — and the time from the kill
until every partition has a leader on a live node and no dead replica in its ISR is
printed, as a client sees it (Metadata through a surviving broker).

    .venv/bin/python tests/bench/kraft_failover.py [--rounds 3]

Real processes from tests/support/kraft.py, started as users start them. Not part of
`make test`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.kraft import controller_ports, describe_quorum, kraft_node

TOPIC = "failover"


def active_controller(node: BrokerProcess) -> int:
    return int(describe_quorum(node).topics[0].partitions[0].leader_id)


def time_to_move(survivors: list[BrokerProcess], dead: int) -> float:
    admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in survivors)})
    start = time.monotonic()
    while True:
        try:
            partitions = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions
        except Exception:
            partitions = {}
        if partitions and all(
            p.leader not in (-1, dead) and dead not in p.isrs for p in partitions.values()
        ):
            return time.monotonic() - start
        time.sleep(0.05)


def round_trip(root: Path, kill_controller: bool) -> float:
    ports = controller_ports([1, 2, 3])
    nodes = [kraft_node(root, i, ports) for i in (1, 2, 3)]
    for node in nodes:
        node.asyncio_debug = False
        node.launch()
    try:
        for node in nodes:
            node.wait_started(60)
        admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in nodes)})
        admin.create_topics([NewTopic(TOPIC, 6, 3)])[TOPIC].result(60)
        time.sleep(3)  # the ISRs settle
        controller = active_controller(nodes[0])
        victim = controller if kill_controller else next(i for i in (1, 2, 3) if i != controller)
        nodes[victim - 1].kill()
        return time_to_move([n for n in nodes if n.running], victim)
    finally:
        for node in nodes:
            node.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for kill_controller, label in ((False, "broker (not the active controller)"),
                                   (True, "active controller and broker")):  # fmt: skip
        times = []
        for i in range(args.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                times.append(round_trip(Path(tmp), kill_controller))
            print(f"{label}: round {i + 1}: {times[-1]:.1f} s", flush=True)
        print(f"{label}: median {statistics.median(times):.1f} s", flush=True)


if __name__ == "__main__":
    main()
