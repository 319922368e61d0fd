"""What a query switched from ``format("kafka")`` to ``format("tiercel")`` relies on, as
Spark 4's Kafka source (connector/kafka-0-10-sql) does it, over what a real broker
process tiered to its local directory, read by the shared Spark session and compared
with what a confluent-kafka consumer reads from the broker: a record without headers
has null ``headers``.

One broker for the module: topic ``history`` (two partitions) and ``other``, records with
and without headers, most of them tiered before the first test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import pytest
from pyspark.sql import DataFrame, SparkSession

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, produce, running_broker, wait_until
from support.reader_rows import produced_headers
from support.spark_tiers import SparkRow, spark_rows
from tiercel.tiered.reader import open_object_root, plan_topic
from tiercel.tiered.rsm.object_store import ObjectStore

HISTORY: Final = "history"
OTHER: Final = "other"
TOPICS: Final = {HISTORY: 2, OTHER: 1}  # name -> partitions
PER_PARTITION: Final = 120
BROKER_OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
}
TOPIC_CONFIG: Final = {"remote.storage.enable": "true", "segment.bytes": "2048"}


@dataclass(frozen=True)
class Tiered:
    """The module's broker, its remote tier's root, and per topic the offsets tiered
    (partition -> one past the last) and the rows a consumer reads below them."""

    broker: BrokerProcess
    root: str
    ends: dict[str, dict[int, int]]
    rows: dict[str, list[SparkRow]]


def outgoing(partition: int, n: int) -> Outgoing:
    """Every third record without headers; null keys and values now and then."""
    key = None if n % 7 == 0 else b"key-%d" % n
    value = None if n % 11 == 0 else b"value %d " % n * (n % 5 + 1)
    headers = (("h", b"%d" % n), ("null", None))[: n % 3]
    return Outgoing(partition, value, key, headers)


def tier_ends(store: ObjectStore, topic: str) -> dict[int, int]:
    plans = plan_topic(store, topic).partitions
    return {p.topic_partition.partition: p.end_offset or 0 for p in plans}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    data = tmp_path_factory.mktemp("kafka_source_parity")
    with running_broker(data, BROKER_OVERRIDES) as broker:
        for topic, partitions in TOPICS.items():
            create_topic(broker.bootstrap, topic, partitions, TOPIC_CONFIG)
            records = [outgoing(p, n) for p in range(partitions) for n in range(PER_PARTITION)]
            config = {"linger.ms": 5, "batch.num.messages": 10}
            produce("confluent", broker.bootstrap, topic, records, config)
        root = f"file://{broker.log_dir / 'remote-storage'}"
        store = open_object_root(root)

        def tiered_enough() -> bool:
            ends = {topic: tier_ends(store, topic) for topic in TOPICS}
            return all(
                len(ends[topic]) == partitions and min(ends[topic].values()) > PER_PARTITION // 2
                for topic, partitions in TOPICS.items()
            )

        assert wait_until(tiered_enough, 60, 0.3), {t: tier_ends(store, t) for t in TOPICS}
        ends = {topic: tier_ends(store, topic) for topic in TOPICS}
        rows = {}
        for topic, partitions in TOPICS.items():
            total = partitions * PER_PARTITION
            consumed = consume("confluent", broker.bootstrap, topic, total, range(partitions))
            assert len(consumed.records) == total
            rows[topic] = sorted(
                (topic, r.partition, r.offset, r.key, r.value, produced_headers(r.headers),
                 r.timestamp, r.timestamp_type)
                for r in consumed.records
                if r.offset < ends[topic][r.partition]
            )  # fmt: skip
        yield Tiered(broker, root, ends, rows)


def read(spark: SparkSession, tiered: Tiered, **options: str) -> DataFrame:
    reader = spark.read.format("tiercel").option("path", tiered.root)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_record_without_headers_has_null_headers(spark: SparkSession, tiered: Tiered) -> None:
    """Spark's KafkaRecordToRowConverter gives a record with no headers null, not an
    empty array: ``headers IS NULL`` finds exactly the records produced without."""
    df = read(spark, tiered, subscribe=HISTORY, includeHeaders="true")
    assert spark_rows(df) == tiered.rows[HISTORY]
    without = sorted((r[1], r[2]) for r in tiered.rows[HISTORY] if r[5] is None)
    assert without
    nulls = df.where("headers IS NULL").select("partition", "offset").collect()
    assert sorted((row.partition, row.offset) for row in nulls) == without
