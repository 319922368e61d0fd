"""What survives a stop, a crash, and a crash that leaves a torn write behind.

- SIGTERM, then start: a clean shutdown; every record, offset, timestamp, config and
  log start offset is as it was, and producing continues at the next offset.
- SIGKILL while a producer is in the middle of acks=all requests: after the restart
  (``clean_shutdown=False``: recovery ran) every acknowledged record is at the offset it
  was acknowledged with, every partition reads from 0 to its end with no error and no
  foreign data, and new records go to the next offset.
- SIGKILL, then garbage appended to the active segment (a torn batch, a batch whose CRC
  is wrong, zero-filled space): recovery truncates it and the log ends at the last
  whole record.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from support.broker import BrokerProcess
from support.clients import (
    CLIENTS,
    Outgoing,
    consume,
    create_topic,
    now_ms,
    produce,
    watermarks,
)

PARTITIONS = 3


def _topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(futures.values())).result(10)
    return {name: e.value for name, e in entries.items()}


def test_clean_restart_keeps_everything(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "kept", PARTITIONS, {"segment.bytes": "2048"})
    create_topic(
        broker.bootstrap, "kept-append-time", 1, {"message.timestamp.type": "LogAppendTime"}
    )
    base = now_ms() - 600_000
    records = [
        Outgoing(
            i % PARTITIONS, b"v%d " % i * (1 + i % 17), b"k%d" % i, (("n", b"%d" % i),), base + i
        )
        for i in range(300)
    ]
    produce("confluent", broker.bootstrap, "kept", records[:150], {"compression.type": "gzip"})
    # Batches must fit in a segment (RECORD_LIST_TOO_LARGE otherwise).
    produce("kafka-python", broker.bootstrap, "kept", records[150:], {"batch_size": 1024})
    produce(
        "aiokafka",
        broker.bootstrap,
        "kept-append-time",
        [Outgoing(0, b"a%d" % i) for i in range(5)],
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_records([TopicPartition("kept", 2, 30)])[TopicPartition("kept", 2)].result(10)

    before = consume("confluent", broker.bootstrap, "kept", 300 - 30, range(PARTITIONS)).records
    assert len(before) == 300 - 30
    appended = consume("confluent", broker.bootstrap, "kept-append-time", 5).records
    marks = {p: watermarks(broker.bootstrap, "kept", p) for p in range(PARTITIONS)}
    assert marks == {0: (0, 100), 1: (0, 100), 2: (30, 100)}
    config = _topic_config(broker.bootstrap, "kept")

    assert broker.stop() == 0
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    assert "clean_shutdown=True" in broker.tail()
    assert "partition_recovered" not in broker.tail()

    assert {p: watermarks(broker.bootstrap, "kept", p) for p in range(PARTITIONS)} == marks
    assert _topic_config(broker.bootstrap, "kept") == config
    for client in CLIENTS:
        after = consume(client, broker.bootstrap, "kept", 300 - 30, range(PARTITIONS)).records
        assert after == before, client
    assert consume("kafka-python", broker.bootstrap, "kept-append-time", 5).records == appended
    more = produce("aiokafka", broker.bootstrap, "kept", [Outgoing(p, b"next") for p in range(3)])
    assert [(d.partition, d.offset) for d in more] == [(p, 100) for p in range(PARTITIONS)]


class ContinuousProducer:
    """Produces to every partition from a thread until stopped, recording each record
    the broker acknowledged with acks=all as (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self.sent: set[bytes] = set()
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 50,
                "message.timeout.ms": 3000,
                "retries": 0,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed += 1

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            value = b"seq-%08d-" % sequence + b"x" * (sequence % 200)
            try:
                self._producer.produce(
                    self.topic,
                    value,
                    partition=sequence % PARTITIONS,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self._producer.poll(0.01)
                continue
            self.sent.add(value)
            sequence += 1
            self._producer.poll(0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        # Whatever is still queued or in flight will never be acknowledged.
        self._producer.purge()
        self._producer.flush(5)


def test_sigkill_during_acks_all_produce_loses_no_acknowledged_record(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    topic = "crashed"
    create_topic(broker.bootstrap, topic, PARTITIONS, {"segment.bytes": "65536"})
    producer = ContinuousProducer(broker.bootstrap, topic)
    producer.start()
    deadline = time.monotonic() + 20
    while len(producer.acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    time.sleep(0.3)
    producer.stop()
    acked = list(producer.acked)
    assert len(acked) >= 3000, "the producer did not get going"

    broker.start()
    assert "clean_shutdown=False" in broker.tail()
    ends = {p: watermarks(broker.bootstrap, topic, p) for p in range(PARTITIONS)}
    by_partition: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    for partition, offset, value in acked:
        by_partition[partition][offset] = value
    for p, (low, high) in ends.items():
        assert low == 0
        assert high >= max(by_partition[p]) + 1, f"partition {p} lost acknowledged records"

    total = sum(high for _, high in ends.values())
    for client in ("confluent", "kafka-python"):
        got = consume(client, broker.bootstrap, topic, total, range(PARTITIONS), timeout=30)
        for p, records in got.by_partition().items():
            assert [r.offset for r in records] == list(range(ends[p][1])), (client, p)
            stored = {r.offset: r.value for r in records}
            for offset, value in by_partition[p].items():
                assert stored[offset] == value, (client, p, offset)
            assert {r.value for r in records} <= producer.sent, "data nobody produced"

    delivered = produce(
        "kafka-python", broker.bootstrap, topic, [Outgoing(p, b"after") for p in range(PARTITIONS)]
    )
    assert [d.offset for d in delivered] == [ends[p][1] for p in range(PARTITIONS)]


def _last_batch(segment: Path) -> bytes:
    data = segment.read_bytes()
    position = last = 0
    while position + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, position + 8)
        last = position
        position += 12 + length
    return data[last:position]


def _torn(batch: bytes) -> bytes:
    """The batch again (at the next offset), cut off half way through."""
    return batch[: len(batch) // 2]


def _bad_crc(batch: bytes) -> bytes:
    """The batch again, whole but with one record byte changed."""
    corrupted = bytearray(batch)
    corrupted[-3] ^= 0xFF
    return bytes(corrupted)


def _zeros(batch: bytes) -> bytes:
    """Space the file system allocated but never filled."""
    return bytes(4096)


@pytest.mark.parametrize("garbage", [_torn, _bad_crc, _zeros], ids=["torn", "bad-crc", "zeros"])
def test_recovery_truncates_a_corrupt_tail(
    broker_factory: Callable[..., BrokerProcess], garbage: Callable[[bytes], bytes]
) -> None:
    broker = broker_factory()
    topic = "torn"
    create_topic(broker.bootstrap, topic, 1)
    records = [Outgoing(0, b"record %d " % i * 10) for i in range(50)]
    produce("confluent", broker.bootstrap, topic, records, {"batch.num.messages": 10})
    broker.kill()

    segment = broker.log_dir / f"{topic}-0" / f"{0:020d}.log"
    good_size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(garbage(_last_batch(segment)))
        f.flush()
        os.fsync(f.fileno())

    broker.start()
    tail = broker.tail()
    assert "clean_shutdown=False" in tail
    assert f"event=partition_recovered partition={topic}-0" in tail
    assert segment.stat().st_size == good_size
    assert watermarks(broker.bootstrap, topic) == (0, 50)
    for client in CLIENTS:
        got = consume(client, broker.bootstrap, topic, 50)
        assert [(r.offset, r.value) for r in got.records] == [
            (i, r.value) for i, r in enumerate(records)
        ], client
    assert produce("aiokafka", broker.bootstrap, topic, [Outgoing(0, b"next")])[0].offset == 50
