"""Spark's ``kafka.bootstrap.servers``: one ``spark.read.format("tiercel")`` query reads
a partition's tiered history from the object store and its untiered tail from the
broker (tiered.reader.broker_tail), with no gap or overlap, and a partition with
nothing tiered wholly from the broker; explicit offsets spanning the tier's end give
exactly those rows. Compared with what a confluent-kafka consumer reads (full rows).

Needs the Spark data source (tiercel.tiered.spark) and its shared session fixture
(tests/support/spark.py); skipped in a tree without them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

import pytest

pytest.importorskip("tiercel.tiered.spark", reason="the Spark data source is not in this tree")

from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, produce, wait_until
from support.reader_rows import produced_headers
from support.spark_tiers import SparkRow, spark_rows
from tiercel.tiered.reader import open_object_root, plan_topic

TOPIC: Final = "spark-tail"
HISTORY: Final = 240  # records of partition 0, most of them tiered
FRESH: Final = 6  # records of partition 1, all in its active segment: nothing tiered
BROKER_OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
}
TOPIC_CONFIG: Final = {
    "remote.storage.enable": "true",
    "segment.bytes": "2048",
    "local.retention.bytes": "1",  # tiered segments leave the local log
    "file.delete.delay.ms": "300",
}


def outgoing(partition: int, n: int) -> Outgoing:
    key = None if n % 7 == 0 else b"key-%d" % n
    value = None if n % 11 == 0 else b"value %d " % n * (n % 9 + 1)
    headers = (("h", b"%d" % n), ("null", None))[: n % 3]
    return Outgoing(partition, value, key, headers)


def read(spark: SparkSession, root: str, broker: BrokerProcess, **options: str) -> DataFrame:
    reader = (
        spark.read.format("tiercel")
        .option("path", root)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .option("kafka.bootstrap.servers", broker.bootstrap)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_one_query_reads_the_tier_and_the_broker_tail(
    spark: SparkSession, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker: BrokerProcess = broker_factory(dict(BROKER_OVERRIDES))
    create_topic(broker.bootstrap, TOPIC, 2, TOPIC_CONFIG)
    records = [outgoing(0, n) for n in range(HISTORY)] + [outgoing(1, n) for n in range(FRESH)]
    config = {"compression.type": "lz4", "linger.ms": 5, "batch.num.messages": 10}
    produce("confluent", broker.bootstrap, TOPIC, records, config)
    root = f"file://{broker.log_dir / 'remote-storage'}"
    store = open_object_root(root)

    def tier_end() -> int:
        plans = {p.topic_partition.partition: p for p in plan_topic(store, TOPIC).partitions}
        return plans[0].end_offset or 0 if 0 in plans else 0

    assert wait_until(lambda: tier_end() >= HISTORY // 2, 60, 0.3), tier_end()
    consumed = consume("confluent", broker.bootstrap, TOPIC, HISTORY + FRESH, [0, 1]).records
    expected: list[SparkRow] = sorted(
        (TOPIC, r.partition, r.offset, r.key, r.value, produced_headers(r.headers), r.timestamp,
         r.timestamp_type)
        for r in consumed
    )  # fmt: skip
    assert len(expected) == HISTORY + FRESH

    # Everything: partition 0 from the tier up to its end, then from the broker up to the
    # high watermark; partition 1 (not in the tier at all) from the broker alone.
    assert spark_rows(read(spark, root, broker)) == expected

    # Explicit offsets across the tier's end (exclusive end), and from inside the tail.
    end = tier_end()
    first, past = end - 5, min(end + 7, HISTORY)
    assert first < end < past
    df = read(
        spark,
        root,
        broker,
        startingOffsets=json.dumps({TOPIC: {"0": first, "1": 2}}),
        endingOffsets=json.dumps({TOPIC: {"0": past, "1": -1}}),
    )
    assert spark_rows(df) == [
        row
        for row in expected
        if (row[1] == 0 and first <= row[2] < past) or (row[1] == 1 and row[2] >= 2)
    ]

    # A partition with nothing tiered starts at the broker's log start offset, which
    # DeleteRecords has moved past 0: `earliest` is that, not data loss at offset 0.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    moved = admin.delete_records([CTopicPartition(TOPIC, 1, 2)])[CTopicPartition(TOPIC, 1)]
    assert moved.result(10).low_watermark == 2
    assert spark_rows(read(spark, root, broker)) == [
        row for row in expected if row[1] == 0 or row[2] >= 2
    ]
