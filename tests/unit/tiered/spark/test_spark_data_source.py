"""``spark.read.format("tiercel")`` over local remote tiers built without a broker: every
record of every codec back as produced (full rows), offset and timestamp bounds,
subscriptions, minPartitions, failOnDataLoss both ways, headers, an empty topic, filter
pushdown, and errors naming the object at fault. One Spark session for the run."""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from support.spark_tiers import Tier, build_tier, spark_rows, without_headers
from support.tiering import BASE_TS
from tiercel.protocol.record_batch import RECORD_BATCH_OVERHEAD
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, object_key

T0, T1, OTHER, T2 = ("t", 0), ("t", 1), ("other", 0), ("t2", 0)


@pytest.fixture
async def tier(tmp_path: Path, scheduler: Scheduler) -> Tier:
    """Topic t (2 partitions, many 1 KiB segments), other and t2 (one each)."""
    return await build_tier(tmp_path, scheduler, {T0: 40, T1: 25, OTHER: 6, T2: 6})


def read(spark: SparkSession, tier: Tier, **options: object) -> DataFrame:
    reader = spark.read.format("tiercel").option("path", tier.root)
    for name, value in options.items():
        reader = reader.option(name, str(value).lower() if isinstance(value, bool) else value)
    return reader.load()


def test_every_record_reads_back_as_produced(spark: SparkSession, tier: Tier) -> None:
    df = read(spark, tier, subscribe="t", includeHeaders=True)
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    assert spark_rows(df) == tier.expected([T0, T1])
    # One task per topic partition, as Spark's Kafka source.
    assert df.rdd.getNumPartitions() == 2


def test_a_record_without_headers_has_null_headers(spark: SparkSession, tier: Tier) -> None:
    """As Spark's Kafka source (KafkaRecordToRowConverter): ``headers IS NULL`` selects
    the records produced without headers, and no row has an empty list."""
    df = read(spark, tier, subscribe="t", includeHeaders=True)
    without = sorted(r[2] for r in tier.expected([T0, T1]) if r[1] == 0 and r[5] is None)
    assert without and len(without) < len(tier.expected([T0]))
    nulls = df.where("headers IS NULL and partition = 0").select("offset").collect()
    assert sorted(row.offset for row in nulls) == without
    assert df.where("size(headers) = 0").count() == 0


def test_without_include_headers_there_is_no_headers_column(
    spark: SparkSession, tier: Tier
) -> None:
    df = read(spark, tier, subscribe="other,t2")
    assert "headers" not in df.columns
    assert df.schema["timestamp"].dataType.typeName() == "timestamp"
    assert spark_rows(df) == without_headers(tier.expected([OTHER, T2]))


def test_offset_bounds_json_earliest_and_latest(spark: SparkSession, tier: Tier) -> None:
    df = read(
        spark,
        tier,
        subscribe="t",
        includeHeaders=True,
        startingOffsets='{"t":{"0":5,"1":-2}}',
        endingOffsets='{"t":{"0":30,"1":-1}}',
    )
    expected = [r for r in tier.expected([T0]) if 5 <= r[2] < 30] + tier.expected([T1])
    assert spark_rows(df) == sorted(expected)


def test_assign_reads_only_the_partitions_named(spark: SparkSession, tier: Tier) -> None:
    df = read(spark, tier, assign='{"t":[1]}', includeHeaders=True)
    assert spark_rows(df) == tier.expected([T1])


def test_subscribe_pattern_finds_the_regex_anywhere_in_a_topic_name(
    spark: SparkSession, tier: Tier
) -> None:
    """As Spark's Kafka source (SubscribePatternStrategy over Admin's topic list,
    ``findFirstIn``): a topic is read when the regex is found anywhere in its name."""
    ther = read(spark, tier, subscribePattern="ther", includeHeaders=True)
    assert spark_rows(ther) == tier.expected([OTHER])
    every_t = read(spark, tier, subscribePattern="t", includeHeaders=True)
    assert spark_rows(every_t) == tier.expected([OTHER, T0, T1, T2])
    only_t = read(spark, tier, subscribePattern=" ^t$ ", includeHeaders=True)
    assert spark_rows(only_t) == tier.expected([T0, T1])


def test_timestamp_bounds_resolve_through_the_time_indexes(spark: SparkSession, tier: Tier) -> None:
    """Record n of a partition has timestamp BASE_TS + 10 * batch + i (reader_rows),
    increasing with the offset: the bounds are the first offsets at or after them."""
    rows = tier.rows[T0]
    start_row, end_row = rows[len(rows) // 3], rows[2 * len(rows) // 3]
    df = read(
        spark,
        tier,
        assign='{"t":[0]}',
        includeHeaders=True,
        startingTimestamp=start_row[4],
        endingTimestamp=end_row[4],
    )
    assert spark_rows(df) == tier.expected([T0], start_row[0], end_row[0] - 1)

    t1_from = tier.rows[T1][7]
    by_partition = read(
        spark,
        tier,
        subscribe="t",
        includeHeaders=True,
        startingOffsetsByTimestamp=f'{{"t":{{"0":{start_row[4]},"1":{t1_from[4]}}}}}',
    )
    assert spark_rows(by_partition) == sorted(
        tier.expected([T0], start_row[0]) + tier.expected([T1], t1_from[0])
    )
    # Past every record: an error by default (the Kafka source's strategy "error"), the
    # end with strategy latest; an ending timestamp past every record is the end.
    late = BASE_TS + 10**9
    with pytest.raises(PySparkException, match="t-0: no record has a timestamp at or after"):
        read(spark, tier, assign='{"t":[0]}', startingTimestamp=late).collect()
    assert (
        read(
            spark,
            tier,
            assign='{"t":[0]}',
            startingTimestamp=late,
            startingOffsetsByTimestampStrategy="latest",
        ).collect()
        == []
    )
    to_end = read(spark, tier, assign='{"t":[0]}', includeHeaders=True, endingTimestamp=late)
    assert spark_rows(to_end) == tier.expected([T0])


def test_min_partitions_splits_ranges_into_more_tasks(spark: SparkSession, tier: Tier) -> None:
    df = read(spark, tier, subscribe="t", includeHeaders=True, minPartitions=7)
    assert df.rdd.getNumPartitions() >= 7
    assert spark_rows(df) == tier.expected([T0, T1])


def delete_segment(tier: Tier, key: tuple[str, int], index: int) -> tuple[int, int]:
    """Every object of the ``index``-th upload of ``key`` gone (retention); its offsets."""
    segment = tier.segments[key][index]
    folder = Path(tier.rsm.root) / os.path.dirname(object_key(segment, LOG_SUFFIX))
    for path in folder.iterdir():
        if path.name.startswith(
            os.path.basename(object_key(segment, LOG_SUFFIX))[: -len(LOG_SUFFIX)]
        ):
            path.unlink()
    return segment.start_offset, segment.end_offset


def test_fail_on_data_loss_both_ways(spark: SparkSession, tier: Tier) -> None:
    first, last = delete_segment(tier, T0, 2)
    with pytest.raises(PySparkException, match=f"offsets {first} to {last} of t-0"):
        read(spark, tier, assign='{"t":[0]}').collect()
    df = read(spark, tier, assign='{"t":[0]}', includeHeaders=True, failOnDataLoss=False)
    assert spark_rows(df) == [r for r in tier.expected([T0]) if not first <= r[2] <= last]
    # An ending offset past the tier, with no broker to read the rest from, is a loss too.
    with pytest.raises(PySparkException, match="data loss: offsets"):
        n = len(tier.rows[T1])
        read(spark, tier, assign='{"t":[1]}', endingOffsets=f'{{"t":{{"1":{n + 5}}}}}').collect()


def test_an_empty_or_unknown_topic_reads_as_no_rows(spark: SparkSession, tier: Tier) -> None:
    df = read(spark, tier, subscribe="nothing-here", includeHeaders=True)
    assert df.collect() == []
    assert "headers" in df.columns
    assert read(spark, tier, subscribePattern="nothing.*").collect() == []
    # The root given to load() is the path option, as for Spark's file sources.
    by_load = spark.read.format("tiercel").option("subscribe", "nothing-here").load(tier.root)
    assert by_load.collect() == []


def test_a_batch_failing_its_crc_fails_the_query_naming_the_object(
    spark: SparkSession, tier: Tier
) -> None:
    segment = tier.segments[T1][1]
    key = object_key(segment, LOG_SUFFIX)
    path = Path(tier.rsm.root) / key
    data = bytearray(path.read_bytes())
    data[RECORD_BATCH_OVERHEAD + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(PySparkException, match=f"{key} at position 0.*CRC"):
        read(spark, tier, subscribe="t").collect()


def test_a_missing_segment_object_fails_the_query_naming_it(
    spark: SparkSession, tier: Tier
) -> None:
    """The manifest is there (the plan counts the upload) but the log object is not."""
    key = object_key(tier.segments[T0][3], LOG_SUFFIX)
    (Path(tier.rsm.root) / key).unlink()
    with pytest.raises(PySparkException, match=f"{key}: the segment object is missing"):
        read(spark, tier, subscribe="t").collect()


def test_bad_options_fail_when_the_dataframe_is_made(spark: SparkSession, tier: Tier) -> None:
    with pytest.raises(PySparkException, match=r"unknown option.*endingoffset"):
        read(spark, tier, subscribe="t", endingOffset="latest")
    with pytest.raises(PySparkException, match="startingOffsets: latest is not allowed"):
        read(spark, tier, subscribe="t", startingOffsets="latest")
    with pytest.raises(PySparkException, match="option path is required"):
        spark.read.format("tiercel").option("subscribe", "t").load()
    shutil.rmtree(Path(tier.rsm.root))
    with pytest.raises(PySparkException, match="no such directory"):
        read(spark, tier, subscribe="t").collect()


def test_filters_on_partition_and_offset_prune_tasks_and_apply_exactly(
    spark: SparkSession, tier: Tier
) -> None:
    base = read(spark, tier, subscribe="t", includeHeaders=True, filterPushdown=True)
    one = base.where("partition = 1")
    assert one.rdd.getNumPartitions() == 1
    assert spark_rows(one) == tier.expected([T1])
    window = base.where("offset >= 10 AND offset < 20 AND partition IN (0)")
    assert window.rdd.getNumPartitions() == 1
    assert spark_rows(window) == tier.expected([T0], 10, 19)
    since = datetime.datetime.fromtimestamp((BASE_TS + 300) / 1000, datetime.UTC)
    recent = base.where(base.timestamp >= since)
    assert spark_rows(recent) == [r for r in tier.expected([T0, T1]) if r[6] >= BASE_TS + 300]
