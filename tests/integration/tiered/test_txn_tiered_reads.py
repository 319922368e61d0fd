"""read_committed over the remote tier against a real broker: transactional batches of
two producer ids, ended by COMMIT and ABORT markers (WriteTxnMarkers, as a coordinator
sends them), tiered to the broker's local-directory RSM with their ``.txnindex``; once
local retention removed those segments,

- a raw read_committed Fetch served from the tier lists the same aborted transactions
  the same Fetch listed while the segments were local (Kafka's
  RemoteLogManager.addAbortedTransactions);
- a confluent-kafka read_committed consumer from offset 0 sees exactly the committed and
  plain records, in order;
- Spark (``kafka.isolation.level=read_committed``) reads exactly those from the tier,
  and with ``kafka.bootstrap.servers`` the whole partition, tier and broker tail."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from pyspark.sql import SparkSession

from support.broker import BrokerProcess
from support.clients import create_topic, earliest_local_offset, running_broker, wait_until
from support.txn_wire import (
    HAND_COORDINATOR_OVERRIDES,
    TxnProducer,
    consume_confluent,
    fetch_committed,
    plain,
)
from support.wire import WireClient
from tiercel.tiered.reader import broker_tail, open_object_root, plan_topic

TOPIC: Final = "txn-tiered"
OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
    **HAND_COORDINATOR_OVERRIDES,
}
ROUNDS: Final = 24


@dataclass
class Written:
    broker: BrokerProcess
    committed: list[bytes] = field(default_factory=list)
    aborted: list[bytes] = field(default_factory=list)
    local_answers: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    local_start: int = 0


def aborted_list(part: object) -> list[tuple[int, int]]:
    found = getattr(part, "aborted_transactions", None) or ()
    return sorted((int(a.producer_id), int(a.first_offset)) for a in found)


def committed_fetch(client: WireClient, offset: int) -> tuple[list[tuple[int, int]], bytes]:
    """A read_committed Fetch at ``offset`` that returned records (a remote read may
    come back empty when it outlives remote.fetch.max.wait.ms: asked again)."""
    deadline = time.monotonic() + 15
    while True:
        part = fetch_committed(client, TOPIC, offset)
        assert part.error_code == ErrorCode.none, part.error_code
        records = bytes(part.records or b"")
        if records or time.monotonic() > deadline:
            return aborted_list(part), records
        time.sleep(0.1)


def tier_end(broker: BrokerProcess) -> int:
    store = open_object_root(f"file://{broker.log_dir / 'remote-storage'}")
    plans = plan_topic(store, TOPIC).partitions
    return (plans[0].end_offset or 0) if plans else 0


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    with running_broker(tmp_path_factory.mktemp("txn_tiered"), OVERRIDES) as broker:
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "1024",
            "file.delete.delay.ms": "300",
        }
        create_topic(broker.bootstrap, TOPIC, config=config)
        w = Written(broker)
        with WireClient(broker.bootstrap) as client:
            a, b = TxnProducer(client, TOPIC), TxnProducer(client, TOPIC)
            open_values: dict[int, list[bytes]] = {a.producer_id: [], b.producer_id: []}
            for i in range(ROUNDS):
                for producer, count in ((a, 1 + i % 3), (b, 2)):
                    values = [b"%d-%d-%d:" % (producer.producer_id, i, j) + b"t" * 60
                              for j in range(count)]  # fmt: skip
                    assert producer.send(*values)[0] == ErrorCode.none
                    open_values[producer.producer_id].extend(values)
                value = b"plain-%d:" % i + b"p" * 60
                plain(client, TOPIC, value)
                w.committed.append(value)
                for producer, ends in ((a, i % 2 == 1), (b, i % 5 == 4)):
                    if ends or i == ROUNDS - 1:
                        commit = (i // 2) % 2 == 0 if producer is a else i % 10 == 9
                        assert producer.end(commit) == ErrorCode.none
                        done = open_values[producer.producer_id]
                        (w.committed if commit else w.aborted).extend(done)
                        open_values[producer.producer_id] = []
            for i in range(20):  # past the last marker: its segment rolls and tiers
                value = b"after-%d:" % i + b"p" * 60
                plain(client, TOPIC, value)
                w.committed.append(value)
            assert wait_until(lambda: tier_end(broker) > ROUNDS * 5, 60, 0.3)
            end = tier_end(broker)
            for offset in range(0, end, 5):
                w.local_answers[offset] = committed_fetch(client, offset)[0]
        assert any(w.local_answers.values())
        # Now local retention removes the tiered segments.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        entry = ConfigEntry(
            "local.retention.bytes", "1", incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[entry])
        next(iter(admin.incremental_alter_configs([resource]).values())).result(15)
        assert wait_until(
            lambda: earliest_local_offset(broker.bootstrap, TOPIC) >= end - 1, 30, 0.3
        )
        w.local_start = earliest_local_offset(broker.bootstrap, TOPIC)
        yield w


def test_remote_read_committed_fetches_list_the_aborted_transactions_a_local_one_did(
    written: Written,
) -> None:
    with WireClient(written.broker.bootstrap) as client:
        for offset, expected in written.local_answers.items():
            if offset >= written.local_start:
                continue
            remote, records = committed_fetch(client, offset)
            assert records, offset
            assert remote == expected, offset
    assert sum(1 for o in written.local_answers if o < written.local_start) > 10


def test_a_read_committed_consumer_from_offset_0_sees_exactly_the_committed_records(
    written: Written,
) -> None:
    bootstrap = written.broker.bootstrap
    values = consume_confluent(bootstrap, TOPIC, "read_committed", len(written.committed))
    assert sorted(values) == sorted(written.committed)
    assert len(values) == len(written.committed)
    assert not set(values) & set(written.aborted)
    everything = consume_confluent(
        bootstrap, TOPIC, "read_uncommitted", len(written.committed) + len(written.aborted)
    )
    # Offset order is the broker's: the committed records keep it among themselves.
    assert [v for v in everything if v in set(written.committed)] == values


def test_spark_read_committed_reads_the_committed_records_from_the_tier(
    spark: SparkSession, written: Written
) -> None:
    broker = written.broker
    root = f"file://{broker.log_dir / 'remote-storage'}"

    def read(**options: str) -> list[tuple[int, bytes]]:
        reader = spark.read.format("tiercel").option("path", root).option("subscribe", TOPIC)
        for name, value in options.items():
            reader = reader.option(name, value)
        rows = reader.load().select("offset", "value").collect()
        return sorted((int(r.offset), bytes(r.value)) for r in rows)

    committed = set(written.committed)
    tier = read(**{"kafka.isolation.level": "read_committed"})
    uncommitted_tier = read()
    assert tier == [(o, v) for o, v in uncommitted_tier if v in committed]
    assert len(tier) < len(uncommitted_tier)  # aborted records were tiered, and dropped
    both = read(
        **{"kafka.isolation.level": "read_committed", "kafka.bootstrap.servers": broker.bootstrap}
    )
    assert [v for _, v in both] == consume_confluent(
        broker.bootstrap, TOPIC, "read_committed", len(committed)
    )
    assert {v for _, v in both} == committed


def test_the_broker_tail_reader_drops_aborted_records_with_read_committed(
    written: Written,
) -> None:
    """`read_broker_range` over the whole partition (the broker serves its tiered part
    from the remote tier): Fetch isolation level 1 and the responses' aborted lists."""
    bootstrap = written.broker.bootstrap
    [lso] = broker_tail.high_watermarks(bootstrap, TOPIC, [0], read_committed=True).values()

    def values(read_committed: bool) -> list[bytes]:
        batches = broker_tail.read_broker_range(
            bootstrap, TOPIC, 0, 0, lso - 1, read_committed=read_committed
        )
        return [v for b in batches for v in b.column("value").to_pylist()]

    committed = values(True)
    assert sorted(committed) == sorted(written.committed)
    everything = values(False)
    assert len(everything) == len(written.committed) + len(written.aborted)
    assert [v for v in everything if v in set(written.committed)] == committed
