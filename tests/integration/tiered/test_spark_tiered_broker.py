"""Spark reads what a real broker tiered, to its local directory RSM and to S3 (moto's
server): records produced with every codec, headers, null keys and values, over three
partitions; once tiered, ``spark.read.format("tiercel")`` gives exactly the records a
confluent-kafka consumer reads from the broker for the same offset ranges (full rows).
With ``kafka.bootstrap.servers`` (once the broker tail is there), one read covers the
tier and the untiered tail with no gap or overlap."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
from pyspark.sql import DataFrame, SparkSession

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, produce, wait_until
from support.moto_server import REGION, S3Bucket
from support.reader_rows import produced_headers
from support.spark_tiers import SparkRow, spark_rows
from support.tiered_s3 import s3_broker, s3_broker_overrides
from tiercel.tiered.reader import open_object_root, plan_topic
from tiercel.tiered.rsm.object_store import ObjectStore

TOPIC: Final = "spark-tiered"
PARTITIONS: Final = 3
CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC: Final = 150
TOPIC_CONFIG: Final = {"remote.storage.enable": "true", "segment.bytes": "2048"}
TASK_INTERVALS: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
}


def outgoing(codec_no: int, i: int) -> Outgoing:
    n = codec_no * PER_CODEC + i
    key = None if n % 7 == 0 else f"key-{n}".encode()
    value = None if n % 11 == 0 else (b"" if n % 13 == 0 else f"value {n} ".encode() * (n % 9))
    headers = (("h", f"{n}".encode()), ("null", None))[: n % 3]
    return Outgoing(n % PARTITIONS, value, key, headers)


def produce_every_codec(bootstrap: str) -> None:
    create_topic(bootstrap, TOPIC, PARTITIONS, TOPIC_CONFIG)
    for codec_no, codec in enumerate(CODECS):
        records = [outgoing(codec_no, i) for i in range(PER_CODEC)]
        config = {"compression.type": codec, "linger.ms": 5, "batch.num.messages": 20}
        produce("confluent", bootstrap, TOPIC, records, config)


def tier_ends(store: ObjectStore) -> dict[int, int]:
    """Partition -> one past its last tiered offset (0: nothing tiered)."""
    return {
        p.topic_partition.partition: p.end_offset or 0 for p in plan_topic(store, TOPIC).partitions
    }


def wait_until_tiered(store: ObjectStore) -> dict[int, int]:
    """Until every partition has most of its records tiered (the active segment stays
    local); the tier's ends then."""
    wanted = PER_CODEC * len(CODECS) // PARTITIONS // 3
    assert wait_until(
        lambda: (ends := tier_ends(store)) and len(ends) == PARTITIONS
        and min(ends.values()) >= wanted,
        60,
        0.3,
    ), f"not tiered in time: {tier_ends(store)}"  # fmt: skip
    return tier_ends(store)


def consumed_rows(bootstrap: str, ends: dict[int, int]) -> list[SparkRow]:
    """What librdkafka reads from the broker, offsets below ``ends``."""
    total = PER_CODEC * len(CODECS)
    records = consume("confluent", bootstrap, TOPIC, total, list(range(PARTITIONS))).records
    assert len(records) == total
    return sorted(
        (TOPIC, r.partition, r.offset, r.key, r.value, produced_headers(r.headers), r.timestamp,
         r.timestamp_type)
        for r in records
        if r.offset < ends[r.partition]
    )  # fmt: skip


def read_tier(spark: SparkSession, path: str, ends: dict[int, int], **options: str) -> DataFrame:
    reader = (
        spark.read.format("tiercel")
        .option("path", path)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .option("endingOffsets", json.dumps({TOPIC: {str(p): e for p, e in ends.items()}}))
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.fixture
def s3_tiering_broker(tmp_path: Path, s3_bucket: S3Bucket) -> Iterator[BrokerProcess]:
    overrides = s3_broker_overrides(
        s3_bucket.endpoint_url, s3_bucket.name, **{"rsm.config.s3.prefix": "tier/spark"}
    )
    overrides.update(TASK_INTERVALS)
    broker = s3_broker(tmp_path / "broker", overrides)
    try:
        yield broker.start()
    finally:
        broker.kill()


def test_spark_reads_what_the_broker_tiered_to_its_local_directory(
    spark: SparkSession, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker: BrokerProcess = broker_factory(dict(TASK_INTERVALS))
    produce_every_codec(broker.bootstrap)
    root = broker.log_dir / "remote-storage"
    ends = wait_until_tiered(open_object_root(f"file://{root}"))
    df = read_tier(spark, f"file://{root}", ends)
    assert spark_rows(df) == consumed_rows(broker.bootstrap, ends)

    if importlib.util.find_spec("tiercel.tiered.reader.broker_tail") is None:
        return  # the broker tail (kafka.bootstrap.servers) is not in this tree yet
    everything = (
        spark.read.format("tiercel")
        .option("path", f"file://{root}")
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .load()
    )
    everything_ends = {p: 10**9 for p in range(PARTITIONS)}
    assert spark_rows(everything) == consumed_rows(broker.bootstrap, everything_ends)


def test_spark_reads_what_the_broker_tiered_to_s3(
    spark: SparkSession, s3_tiering_broker: BrokerProcess, s3_bucket: S3Bucket
) -> None:
    produce_every_codec(s3_tiering_broker.bootstrap)
    path = f"s3://{s3_bucket.name}/tier/spark"
    store = open_object_root(path, s3_bucket.endpoint_url, REGION)
    ends = wait_until_tiered(store)
    df = read_tier(
        spark, path, ends, **{"s3.endpoint.url": s3_bucket.endpoint_url, "s3.region": REGION}
    )
    assert spark_rows(df) == consumed_rows(s3_tiering_broker.bootstrap, ends)
