"""What a query switched from ``format("kafka")`` to ``format("tiercel")`` relies on, as
Spark 4's Kafka source (connector/kafka-0-10-sql) does it, over what a real broker
process tiered to its local directory, read by the shared Spark session and compared
with what a confluent-kafka consumer reads from the broker: a record without headers
has null ``headers``; records of keys or headers without values come in Arrow batches
bounded by the bytes they hold, from the tier and from the broker tail alike;
``subscribePattern`` selects the topics whose name contains a match; the options the
Kafka source takes in a batch read that a tiercel read has no use for (streaming rate
limits, consumer groups, ``kafka.*`` consumer settings) change nothing, and
``maxRecordsPerPartition`` caps the offsets of every task.

One broker for the module: topic ``history`` (two partitions) and ``other``, records with
and without headers, and ``keys``, records of 1 KiB keys or headers and no values; most
of them tiered before the first test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, produce, running_broker, wait_until
from support.reader_rows import arrow_bytes, produced_headers
from support.spark_tiers import SparkRow, spark_rows
from tiercel.tiered.reader import open_object_root, plan_topic, read_segment_range
from tiercel.tiered.reader.broker_tail import read_broker_range
from tiercel.tiered.rsm.object_store import ObjectStore

HISTORY: Final = "history"
OTHER: Final = "other"
KEYS: Final = "keys"
TOPICS: Final = {HISTORY: 2, OTHER: 1, KEYS: 1}  # name -> partitions
PER_PARTITION: Final = 120
BATCH_BYTES: Final = 16 * 1024  # the Arrow batches read from KEYS
BROKER_OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
}
TOPIC_CONFIG: Final = {"remote.storage.enable": "true", "segment.bytes": "2048"}
SEGMENT_BYTES: Final = {HISTORY: 2048, OTHER: 2048, KEYS: 64 * 1024}


@dataclass(frozen=True)
class Tiered:
    """The module's broker, its remote tier's root, and per topic the offsets tiered
    (partition -> one past the last) and the rows a consumer reads below them."""

    broker: BrokerProcess
    root: str
    ends: dict[str, dict[int, int]]
    rows: dict[str, list[SparkRow]]


def outgoing(topic: str, partition: int, n: int) -> Outgoing:
    """Every third record without headers; null keys and values now and then. For KEYS,
    a 1 KiB key and a null value, or a 1 KiB header and an empty value."""
    if topic == KEYS:
        if n % 2:
            return Outgoing(partition, b"", None, (("h", b"%04d" % n * 256),))
        return Outgoing(partition, None, b"%04d" % n * 256)
    key = None if n % 7 == 0 else b"key-%d" % n
    value = None if n % 11 == 0 else b"value %d " % n * (n % 5 + 1)
    headers = (("h", b"%d" % n), ("null", None))[: n % 3]
    return Outgoing(partition, value, key, headers)


def tier_ends(store: ObjectStore, topic: str) -> dict[int, int]:
    plans = plan_topic(store, topic).partitions
    return {p.topic_partition.partition: p.end_offset or 0 for p in plans}


def active_segment_starts(broker: BrokerProcess, topic: str, partitions: int) -> dict[int, int]:
    """Partition -> the base offset of its active segment (its newest ``.log`` file):
    every offset below it is in a rolled segment, which the broker tiers."""
    return {
        p: max(int(f.stem) for f in (broker.log_dir / f"{topic}-{p}").glob("*.log"))
        for p in range(partitions)
    }


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    data = tmp_path_factory.mktemp("kafka_source_parity")
    with running_broker(data, BROKER_OVERRIDES) as broker:
        for topic, partitions in TOPICS.items():
            config = {**TOPIC_CONFIG, "segment.bytes": str(SEGMENT_BYTES[topic])}
            create_topic(broker.bootstrap, topic, partitions, config)
            records = [
                outgoing(topic, p, n) for p in range(partitions) for n in range(PER_PARTITION)
            ]
            config = {"linger.ms": 5, "batch.num.messages": 10}
            produce("confluent", broker.bootstrap, topic, records, config)
        root = f"file://{broker.log_dir / 'remote-storage'}"
        store = open_object_root(root)

        # Every rolled segment tiered: the tier then stays as it is for the module.
        def all_tiered() -> bool:
            return all(
                tier_ends(store, topic) == active_segment_starts(broker, topic, partitions)
                for topic, partitions in TOPICS.items()
            )

        assert wait_until(all_tiered, 60, 0.3), {t: tier_ends(store, t) for t in TOPICS}
        ends = {topic: tier_ends(store, topic) for topic in TOPICS}
        assert all(min(ends[topic].values()) > PER_PARTITION // 3 for topic in TOPICS), ends
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


def assert_bounded(batches: list[pa.RecordBatch], rows: int) -> None:
    """``rows`` records of KEYS (1 KiB each) in Arrow batches each stopped at the record
    that makes it hold BATCH_BYTES."""
    assert sum(b.num_rows for b in batches) == rows
    assert len(batches) >= rows * 1024 // BATCH_BYTES
    for batch in batches:
        assert arrow_bytes(batch.slice(0, batch.num_rows - 1)) < BATCH_BYTES


def test_records_of_keys_or_headers_come_in_bounded_arrow_batches(
    spark: SparkSession, tiered: Tiered
) -> None:
    """Keys and headers count toward an Arrow batch's bytes, not only values: each
    batch stops at the record that makes it hold BATCH_BYTES, from the remote segments
    and from the broker tail (which fetched 50 MB responses into one batch each); and
    Spark reads the topic as the consumer does."""
    store = open_object_root(tiered.root)
    [partition] = plan_topic(store, KEYS).partitions
    from_tier = [
        batch
        for segment_range in partition.ranges
        for batch in read_segment_range(store, segment_range, True, batch_bytes=BATCH_BYTES)
    ]
    assert_bounded(from_tier, tiered.ends[KEYS][0])
    bootstrap = tiered.broker.bootstrap
    last = PER_PARTITION - 1
    from_broker = read_broker_range(bootstrap, KEYS, 0, 0, last, True, batch_bytes=BATCH_BYTES)
    assert_bounded(list(from_broker), PER_PARTITION)
    df = read(spark, tiered, subscribe=KEYS, includeHeaders="true")
    assert spark_rows(df) == tiered.rows[KEYS]


def test_subscribe_pattern_selects_topics_whose_name_contains_a_match(
    spark: SparkSession, tiered: Tiered
) -> None:
    """Spark's Kafka source reads topic ``history`` for ``subscribePattern=istor``: it
    keeps a topic when the regex is found anywhere in its name (SubscribePatternStrategy
    over Admin's topic list, ``findFirstIn``), from the tier's topics and, with
    ``kafka.bootstrap.servers``, from the broker's."""
    tier_only = read(spark, tiered, subscribePattern="istor", includeHeaders="true")
    assert spark_rows(tier_only) == tiered.rows[HISTORY]
    with_broker = read(
        spark,
        tiered,
        subscribePattern="istor",
        includeHeaders="true",
        endingOffsets=json.dumps({HISTORY: {str(p): e for p, e in tiered.ends[HISTORY].items()}}),
        **{"kafka.bootstrap.servers": tiered.broker.bootstrap},
    )
    assert spark_rows(with_broker) == tiered.rows[HISTORY]
    assert read(spark, tiered, subscribePattern="^istor").count() == 0


def test_kafka_source_options_a_tiercel_read_has_no_use_for_change_nothing(
    spark: SparkSession, tiered: Tiered
) -> None:
    """A batch query switched from format("kafka") keeps its options: the streaming
    rate limits Spark ignores in a batch query (validateBatchOptions), its consumer
    group options and kafka.* consumer settings are accepted and logged, the rows are
    the same; maxRecordsPerPartition, which Spark 4 applies to batch reads, makes tasks
    of at most that many offsets, from the tier and the broker tail; a misspelt option
    still fails the query."""
    switched = {
        "kafka.group.id": "reports",
        "groupIdPrefix": "nightly",
        "maxOffsetsPerTrigger": "1000",
        "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "5m",
        "kafkaConsumer.pollTimeoutMs": "60000",
        "kafka.client.id": "reports",
        "kafka.max.partition.fetch.bytes": "1048576",
    }
    df = read(spark, tiered, subscribe=HISTORY, includeHeaders="true", **switched)
    assert spark_rows(df) == tiered.rows[HISTORY]

    capped = read(
        spark, tiered, subscribe=HISTORY, includeHeaders="true", maxRecordsPerPartition="25"
    )
    ends = tiered.ends[HISTORY]
    assert capped.rdd.getNumPartitions() == sum(-(-end // 25) for end in ends.values())
    assert spark_rows(capped) == tiered.rows[HISTORY]
    per_task = capped.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert max(per_task) <= 25

    everything = read(
        spark,
        tiered,
        subscribe=HISTORY,
        maxRecordsPerPartition="25",
        **{"kafka.bootstrap.servers": tiered.broker.bootstrap},
        **switched,
    )
    per_task = everything.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert sum(per_task) == 2 * PER_PARTITION and max(per_task) <= 25
    tier_and_tail = [-(-end // 25) + -(-(PER_PARTITION - end) // 25) for end in ends.values()]
    assert len(per_task) == sum(tier_and_tail)

    with pytest.raises(PySparkException, match=r"unknown option.*maxoffsetpertrigger"):
        read(spark, tiered, subscribe=HISTORY, maxOffsetPerTrigger="1000").collect()
