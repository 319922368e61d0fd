"""Log compaction of a transactional topic on a real broker, with confluent-kafka's
transactional producer (librdkafka).

Generations of values for a set of keys are written in transactions, some committed,
some aborted (the last one aborts after the last committed one for half of the keys),
to a compacted topic with 1 KiB segments and a 1 s ``delete.retention.ms``. Then the
same producer keeps committing small transactions of keys of their own, which roll the
segments and make the log dirty again, until the cleaner (backing off 100 ms) has gone
through the rounds Kafka needs: the aborted data and the shadowed committed data go,
the markers of the transactions left without data get a delete horizon, and the next
round past it removes them. Read back through Fetch (control batches included), the
only marker left among the generations is the COMMIT of the last committed one (its
data is the latest of every key), and no aborted transaction is listed any more. A
read_committed and a read_uncommitted consumer both read exactly the committed latest
value of every key, and the producer's later transactions go on being accepted (its
sequence and epoch survived the cleaning), also after a crash of the broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kio.schema.errors import ErrorCode

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker
from support.txn_wire import fetch_committed
from support.wire import WireClient
from tiercel.protocol.record_batch import iter_batches

TOPIC: Final = "compacted-txns"
TOPIC_CONFIG: Final = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "100",
}
KEYS: Final = [b"key-%d" % i for i in range(8)]
# generation -> (committed?, keys written)
GENERATIONS: Final = [
    (True, KEYS),
    (False, KEYS),
    (True, KEYS),
    (False, KEYS[::2]),
    (True, KEYS),
    (False, KEYS[:4]),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"log.cleaner.backoff.ms": 100}
    with running_broker(Path(tmp_path_factory.mktemp("compaction-txns")), overrides) as started:
        create_topic(started.bootstrap, TOPIC, config=TOPIC_CONFIG)
        yield started


def _value(key: bytes, generation: int) -> bytes:
    return key + b"@%d:" % generation + b"v" * 60


def _transaction(producer: Producer, records: list[tuple[bytes, bytes]], commit: bool) -> None:
    producer.begin_transaction()
    for key, value in records:
        producer.produce(TOPIC, value, key, partition=0)
    if commit:
        producer.commit_transaction(20)
    else:
        producer.flush(20)  # the data is in the log before the ABORT marker
        producer.abort_transaction(20)


@dataclass(frozen=True)
class FetchedLog:
    """The partition as a read_committed Fetch from offset 0 returns it, batch by batch
    (control batches included), with the aborted transactions the broker lists."""

    control_offsets: list[int]
    aborted_first_offsets: list[int]
    end_offset: int


def _fetch_log(bootstrap: str) -> FetchedLog:
    controls: list[int] = []
    aborted: list[int] = []
    offset = 0
    with WireClient(bootstrap) as client:
        while True:
            part = fetch_committed(client, TOPIC, offset)
            assert part.error_code == ErrorCode.none, part.error_code
            aborted += [int(t.first_offset) for t in part.aborted_transactions or ()]
            before = offset
            for _, header in iter_batches(bytes(part.records or b"")):
                if header.is_control:
                    controls.append(header.base_offset)
                offset = header.last_offset + 1
            if offset >= part.high_watermark or offset == before:
                return FetchedLog(controls, sorted(set(aborted)), offset)


def _read_all(bootstrap: str, isolation: str, expect: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record readable at ``isolation``, from the beginning: read
    until ``expect`` arrived (or 20 s passed), then a second more to catch extras."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    read: list[tuple[bytes, bytes]] = []
    try:
        consumer.assign([CTopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 20
        settle: float | None = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for msg in consumer.consume(100, 0.2):
                assert msg.error() is None, msg.error()
                read.append((msg.key(), msg.value()))
            if settle is None and len(read) >= expect:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return read


def test_markers_and_aborted_data_go_and_both_isolations_read_the_committed_values(
    broker: BrokerProcess,
) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "cleaned", "linger.ms": 5}
    )
    producer.init_transactions(20)
    expected: dict[bytes, bytes] = {}
    for generation, (commit, keys) in enumerate(GENERATIONS):
        records = [(key, _value(key, generation)) for key in keys]
        _transaction(producer, records, commit)
        if commit:
            expected.update(records)
    # Everything below this offset is the generations' data and markers.
    fillers_from = _fetch_log(broker.bootstrap).end_offset

    # Committed transactions of keys of their own until the generations' markers are
    # gone but the last committed one's: each makes the log dirty for another round.
    deadline = time.monotonic() + 60
    filler = 0
    while True:
        fetched = _fetch_log(broker.bootstrap)
        left = [o for o in fetched.control_offsets if o < fillers_from]
        if len(left) == 1:
            # The generations' aborted transactions are gone from the indexes too.
            assert fetched.aborted_first_offsets == []
            break
        assert time.monotonic() < deadline, f"markers left at {left}:\n{broker.tail()}"
        records = [(b"filler-%04d-%d" % (filler, i), b"f" * 80) for i in range(3)]
        _transaction(producer, records, True)
        expected.update(records)
        filler += 1
        time.sleep(0.2)
    assert filler > 0

    for isolation in ("read_committed", "read_uncommitted"):
        read = _read_all(broker.bootstrap, isolation, len(expected))
        assert len(read) == len(expected), isolation  # one record per key, no aborted one
        assert dict(read) == expected, isolation

    # After a crash the broker recovers the cleaned segments (markers with a delete
    # horizon, emptied batches) and the producer state from them: the same producer's
    # next transactions, one aborted and one committed, are taken and read as such.
    broker.kill()
    broker.start()
    aborted = [(b"key-0", b"aborted after the crash")]
    _transaction(producer, aborted, False)
    last = [(b"after-crash", b"committed")]  # a key of its own: not cleaned yet
    _transaction(producer, last, True)
    expected.update(last)
    read = _read_all(broker.bootstrap, "read_committed", len(expected))
    assert len(read) == len(expected) and dict(read) == expected
    producer.flush(10)
