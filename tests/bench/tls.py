"""The cost of TLS: produce and consume throughput over an SSL listener against a
PLAINTEXT one, on Tiercel, same client and workload, one run.

    .venv/bin/python tests/bench/tls.py [--mb 200] [--value-bytes 1024] [--rounds 3]

librdkafka (confluent-kafka) runs produce_consume.py's workload (``--mb`` MB of
fixed-size values to a one-partition topic with acks=all, then a consumer reads them all
back) against a fresh broker started as a user starts it, once over its PLAINTEXT
listener and once over its SSL listener (server authentication, a PEM key store made for
the run; librdkafka verifies the broker against the run's CA). Rounds alternate; medians
and the SSL/PLAINTEXT ratios are printed. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from produce_consume import Result, _free_port, _serving, run_workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.certs import make_pki


@contextmanager
def tiercel_with_tls(work: str) -> Iterator[tuple[str, str, str]]:
    """A broker serving PLAINTEXT and SSL: (plaintext bootstrap, SSL bootstrap, CA file)."""
    pki = make_pki(Path(work) / "pki")
    plaintext, tls = _free_port(), _free_port()
    command = [
        os.path.join(os.path.dirname(sys.executable), "tiercel"), "broker",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{plaintext},SSL://127.0.0.1:{tls}",
        "--override", f"log.dirs={os.path.join(work, 'tiercel-data')}",
        "--override", "ssl.keystore.type=PEM",
        "--override", f"ssl.keystore.location={pki.broker.keystore_pem}",
    ]  # fmt: skip
    with _serving(command, os.path.join(work, "tiercel.log"), plaintext) as bootstrap:
        yield bootstrap, f"127.0.0.1:{tls}", str(pki.ca_pem)


def measure(protocol: str, mb: int, size: int) -> Result:
    work = tempfile.mkdtemp(prefix=f"bench-tls-{protocol.lower()}-")
    try:
        with tiercel_with_tls(work) as (plaintext, tls, ca):
            if protocol == "SSL":
                config: dict[str, object] = {"security.protocol": "SSL", "ssl.ca.location": ca}
                result = run_workload(tls, mb, size, config)
            else:
                result = run_workload(plaintext, mb, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"  {protocol:9s} produce {result.produce_mb_s:8.1f} MB/s   "
        f"consume {result.consume_mb_s:8.1f} MB/s",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MB to produce (default 200)")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)"
    )
    args = parser.parse_args()
    print(
        f"workload: {args.mb} MB of {args.value_bytes}-byte values, acks=all, one partition, "
        f"librdkafka; PLAINTEXT and SSL listeners, {args.rounds} alternating rounds",
        flush=True,
    )
    results: dict[str, list[Result]] = {"PLAINTEXT": [], "SSL": []}
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}", flush=True)
        for protocol in results:
            results[protocol].append(measure(protocol, args.mb, args.value_bytes))
    medians = {
        protocol: Result(
            statistics.median(r.produce_mb_s for r in rs),
            statistics.median(r.consume_mb_s for r in rs),
        )
        for protocol, rs in results.items()
    }
    for protocol, result in medians.items():
        print(
            f"median {protocol:9s} produce {result.produce_mb_s:8.1f} MB/s   "
            f"consume {result.consume_mb_s:8.1f} MB/s"
        )
    plain, tls = medians["PLAINTEXT"], medians["SSL"]
    print(
        f"ratio SSL/PLAINTEXT: produce {tls.produce_mb_s / plain.produce_mb_s:.2f}   "
        f"consume {tls.consume_mb_s / plain.consume_mb_s:.2f}"
    )


if __name__ == "__main__":
    main()
