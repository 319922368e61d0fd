"""One librdkafka consumer-group member in a process of its own (so a test can SIGKILL it).

    python -m support.group_member BOOTSTRAP TOPIC GROUP OUT [--session-ms N]
        [--instance ID] [--delay-ms N] [--protocol classic|consumer]

It subscribes to TOPIC in GROUP and, for every record, writes ``M <time> <partition>
<offset>`` to OUT, commits the record synchronously, then writes ``C <time> <partition>
<next offset>``; assignments and revocations are ``A``/``R <time> <partitions>`` lines.
With ``--protocol consumer`` (KIP-848, whose session and heartbeat settings are the
broker's) assignments are incremental: ``I <time> <partitions>`` adds partitions.
Every line is flushed before the next step, so a killed member's file shows what it did
up to the kill. SIGTERM closes the consumer (leaving the group) and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import time
from typing import Any, TextIO

from confluent_kafka import Consumer, KafkaException


def _line(out: TextIO, *fields: object) -> None:
    out.write(" ".join(str(f) for f in fields) + "\n")
    out.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "topic", "group", "out"):
        parser.add_argument(name)
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--instance")
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    args = parser.parse_args()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": max(args.session_ms // 10, 100),
        "fetch.wait.max.ms": 50,
    }
    if args.instance:
        config["group.instance.id"] = args.instance
    incremental = args.protocol == "consumer"
    if incremental:
        del config["session.timeout.ms"], config["heartbeat.interval.ms"]
        config["group.protocol"] = "consumer"
    with open(args.out, "a", encoding="utf-8") as out:

        def on_assign(_consumer: Any, partitions: list[Any]) -> None:
            kind = "I" if incremental else "A"
            _line(out, kind, time.time(), ",".join(str(p.partition) for p in partitions))

        def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
            _line(out, "R", time.time(), ",".join(str(p.partition) for p in partitions))

        consumer = Consumer(config)
        consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not stopping:
                message = consumer.poll(0.1)
                if message is None:
                    continue
                if message.error() is not None:
                    _line(out, "E", time.time(), str(message.error()).replace(" ", "_"))
                    continue
                _line(out, "M", time.time(), message.partition(), message.offset())
                try:
                    consumer.commit(message=message, asynchronous=False)
                except KafkaException as e:  # a rebalance took the partition away
                    _line(out, "E", time.time(), str(e).replace(" ", "_"))
                    continue
                _line(out, "C", time.time(), message.partition(), message.offset() + 1)
                if args.delay_ms:
                    time.sleep(args.delay_ms / 1000)
        finally:
            consumer.close()


if __name__ == "__main__":
    main()
