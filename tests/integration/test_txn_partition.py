"""The partition side of transactions against a real broker process, driven on the wire
as a transaction coordinator would: idempotent producer ids (InitProducerId without a
transactional id) write transactional batches, WriteTxnMarkers (27) ends them with
COMMIT or ABORT markers, and

- read_committed consumers (librdkafka, kafka-python, aiokafka) see only committed and
  non-transactional records, read_uncommitted ones see everything;
- while a transaction is open the last stable offset holds reads back: Fetch's
  last_stable_offset, ListOffsets LATEST for read_committed, and consumers all stop
  at it;
- a read_committed Fetch lists the aborted transactions of what it returns;
- every bad marker gets Kafka's error: an unknown partition, a stale producer epoch,
  an older coordinator epoch; a plain write inside an open transaction is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiokafka
import kafka
import pytest
from kio.schema.errors import ErrorCode

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker
from support.txn_wire import (
    HAND_COORDINATOR_OVERRIDES,
    TxnProducer,
    consume_confluent,
    fetch_committed,
    latest_offset,
    plain,
    request,
    write_marker,
)
from support.wire import WireClient

TOPIC = "txn"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(Path(tmp_path_factory.mktemp("txn")), HAND_COORDINATOR_OVERRIDES) as broker:
        yield broker


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(broker.bootstrap) as wire:
        yield wire


def consume_kafka_python(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=1500,
    )
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            batch = [m.value for m in consumer]
            values.extend(batch)
            if len(values) >= expect and not batch:
                break
    finally:
        consumer.close()
    return values


async def consume_aiokafka(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        tp = aiokafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            got = await consumer.getmany(tp, timeout_ms=500)
            batch = [m.value for m in got.get(tp, [])]
            values.extend(batch)
            if len(values) >= expect and not batch:
                break
    finally:
        await consumer.stop()
    return values


# -- tests -------------------------------------------------------------------------------


def test_read_committed_sees_only_committed_records_and_waits_for_open_ones(
    broker: BrokerProcess, client: WireClient
) -> None:
    create_topic(broker.bootstrap, TOPIC, 1)
    a = TxnProducer(client, TOPIC)
    b = TxnProducer(client, TOPIC)
    assert a.send(b"a0", b"a1") == (ErrorCode.none, 0)
    assert b.send(b"b0") == (ErrorCode.none, 2)
    assert plain(client, TOPIC, b"plain") == 3
    # Both transactions are open: read_committed stops at the first one.
    part = fetch_committed(client, TOPIC, 0)
    assert (part.high_watermark, part.last_stable_offset) == (4, 0)
    assert part.records in (None, b"")
    assert latest_offset(client, TOPIC, 1) == 0
    assert latest_offset(client, TOPIC, 0) == 4
    assert consume_confluent(broker.bootstrap, TOPIC, "read_committed", 1, timeout=3) == []

    assert a.end(commit=True) == ErrorCode.none  # offset 4
    assert latest_offset(client, TOPIC, 1) == 2  # b is still open
    assert b.end(commit=False) == ErrorCode.none  # offset 5
    assert latest_offset(client, TOPIC, 1) == 6
    assert a.send(b"a2") == (ErrorCode.none, 6)
    assert a.end(commit=False) == ErrorCode.none  # offset 7
    assert plain(client, TOPIC, b"tail") == 8
    assert latest_offset(client, TOPIC, 1) == latest_offset(client, TOPIC, 0) == 9

    part = fetch_committed(client, TOPIC, 0)
    assert part.last_stable_offset == 9
    aborted = {(int(t.producer_id), int(t.first_offset)) for t in part.aborted_transactions}
    assert aborted == {(b.producer_id, 2), (a.producer_id, 6)}
    committed = [b"a0", b"a1", b"plain", b"tail"]
    everything = [b"a0", b"a1", b"b0", b"plain", b"a2", b"tail"]
    assert consume_confluent(broker.bootstrap, TOPIC, "read_committed", 4) == committed
    assert consume_confluent(broker.bootstrap, TOPIC, "read_uncommitted", 6) == everything
    assert consume_kafka_python(broker.bootstrap, TOPIC, 4) == committed
    assert asyncio.run(consume_aiokafka(broker.bootstrap, TOPIC, 4)) == committed


def test_bad_markers_and_writes_get_kafkas_errors(
    broker: BrokerProcess, client: WireClient
) -> None:
    topic = "txn-errors"
    create_topic(broker.bootstrap, topic, 1)
    p = TxnProducer(client, topic, epoch=3)
    assert p.send(b"x")[0] == ErrorCode.none
    # A plain write inside the open transaction.
    assert p.send(b"plain", transactional=False)[0] == ErrorCode.invalid_txn_state
    # One marker for a partition led here and two that do not exist here.
    errors = write_marker(client, p.producer_id, 3, True, 0, {topic: [0, 7], "no-such-topic": [0]})
    assert errors[(topic, 7)] == ErrorCode.unknown_topic_or_partition
    assert errors[("no-such-topic", 0)] == ErrorCode.unknown_topic_or_partition
    assert errors[(topic, 0)] == ErrorCode.none
    assert p.send(b"y")[0] == ErrorCode.none
    # A stale producer epoch writes nothing.
    assert p.end(commit=True, epoch=2) == ErrorCode.invalid_producer_epoch
    # A coordinator epoch older than the last marker's is fenced.
    assert p.end(commit=True, coordinator_epoch=5) == ErrorCode.none
    assert p.send(b"z")[0] == ErrorCode.none
    assert p.end(commit=False, coordinator_epoch=4) == ErrorCode.transaction_coordinator_fenced
    # x 0, COMMIT 1, y 2, COMMIT 3, z 4: z's transaction is still open.
    assert latest_offset(client, topic, 1) == 4
    described = (
        request(client, 61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
        .topics[0]
        .partitions[0]
    )
    assert [
        (int(e.producer_id), e.producer_epoch, e.coordinator_epoch, e.current_txn_start_offset)
        for e in described.active_producers
    ] == [(p.producer_id, 3, 5, 4)]
    assert p.end(commit=False, coordinator_epoch=5) == ErrorCode.none
    assert latest_offset(client, topic, 1) == latest_offset(client, topic, 0) == 6
