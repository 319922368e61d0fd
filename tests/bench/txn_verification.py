"""What verifying a transaction's first write to a partition costs (KIP-890 part 1).

    .venv/bin/python tests/bench/txn_verification.py [--transactions 300] [--rounds 3]

Raw wire against one broker (its own transaction coordinator), one connection: each
transaction adds partition 0 (AddPartitionsToTxn), writes one record (verified: a
question to the coordinator), writes a second one (the transaction is open there: no
question), and commits. The p50 latency of the first and the second write is printed per
round, alternately with transaction.partition.verification.enable true and false; the
difference between the two writes is what verification adds. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the support package

from kio.schema.errors import ErrorCode

from support.broker import BrokerProcess
from support.clients import create_topic
from support.wire import WireClient
from support.wire_txn import WireTxn

TOPIC = "verify-bench"


def one_run(overrides: dict[str, object], transactions: int) -> tuple[float, float]:
    """(first write p50 ms, second write p50 ms) on a fresh broker."""
    broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="txn-verify-bench-")), overrides).start()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        first, second = [], []
        with WireClient(broker.bootstrap) as client:
            txn = WireTxn(client, "bench", TOPIC)
            for _ in range(transactions):
                while txn.add(0) != ErrorCode.none:  # the last commit's markers pending
                    time.sleep(0.001)
                start = time.perf_counter()
                verified = txn.produce(0, b"first")
                middle = time.perf_counter()
                unverified = txn.produce(0, b"second")
                end = time.perf_counter()
                assert verified[0] == unverified[0] == ErrorCode.none, (verified, unverified)
                first.append((middle - start) * 1000)
                second.append((end - middle) * 1000)
                txn.end(commit=True)
        return statistics.median(first), statistics.median(second)
    finally:
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for round_number in range(1, args.rounds + 1):
        for enabled in ("true", "false"):
            overrides = {"transaction.partition.verification.enable": enabled}
            first, second = one_run(overrides, args.transactions)
            print(
                f"round {round_number} verification {enabled:5s}: first write p50 "
                f"{first:.2f} ms, second write p50 {second:.2f} ms, "
                f"difference {first - second:.2f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
