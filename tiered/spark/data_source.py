"""``spark.read.format("tiercel")``: the remote tier read by Spark with no broker, as
Spark's Kafka source reads a topic through one (same schema, same option names).

    spark.dataSource.register(TiercelDataSource)
    df = (spark.read.format("tiercel")
          .option("path", "s3://bucket/prefix").option("subscribe", "orders").load())

The driver plans from the object store (`planning`); each task reads its segment
ranges with the reader library and hands Spark Arrow batches. Options are checked when
the DataFrame is made (`schema`), the rest of planning when the query runs, both before
any task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from tiercel.tiered.reader import AbortedTransactions, kafka_source_schema, read_segment_range
from tiercel.tiered.spark import broker_tail_calls
from tiercel.tiered.spark.kafka_source_options import log_not_applying
from tiercel.tiered.spark.options import ReadOptions, parse_options
from tiercel.tiered.spark.planning import plan_read
from tiercel.tiered.spark.pushdown import PushedBounds, push_filters
from tiercel.tiered.spark.slices import BrokerTailSlice, TierSlice
from tiercel.tiered.spark.tail_timestamps import clip_by_timestamps

__all__ = ["TiercelDataSource", "TiercelPushdownReader", "TiercelReader", "spark_schema"]

_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
_HEADERS_DDL: Final = ", headers array<struct<key:string,value:binary>>"


def spark_schema(include_headers: bool) -> str:
    """Spark's Kafka-source schema, as DDL."""
    return _DDL + (_HEADERS_DDL if include_headers else "")


def _arrow_schema(include_headers: bool) -> pa.Schema:
    """The reader's Arrow schema with Spark's timestamp unit (µs): Spark takes a batch
    only if its types are exactly those of the schema."""
    schema = kafka_source_schema(include_headers)
    at = schema.get_field_index("timestamp")
    return schema.set(at, pa.field("timestamp", pa.timestamp("us", tz="UTC")))


_SPARK_ARROW: Final = {False: _arrow_schema(False), True: _arrow_schema(True)}


class TiercelDataSource(DataSource):
    """The ``tiercel`` format (see the module docstring and README)."""

    @classmethod
    def name(cls) -> str:
        return "tiercel"

    def schema(self) -> str:
        return spark_schema(parse_options(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options)
        # Once a query, where Spark's Kafka source logs it (validateBatchOptions).
        log_not_applying(options.not_applying)
        if options.filter_pushdown:
            return TiercelPushdownReader(options)
        return TiercelReader(options)


class TiercelReader(DataSourceReader):
    """Plans on the driver (`partitions`), reads a slice in a task (`read`)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.bounds = PushedBounds()

    def partitions(self) -> Sequence[InputPartition]:
        return plan_read(self.options, self.bounds)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, TierSlice):
            store = partition.root.open()
            schema = _SPARK_ARROW[partition.include_headers]
            aborted = None
            if partition.aborted is not None:
                aborted = AbortedTransactions(partition.aborted)
            for segment_range in partition.ranges:
                for batch in read_segment_range(
                    store, segment_range, partition.include_headers, aborted=aborted
                ):
                    yield batch.cast(schema)
        elif isinstance(partition, BrokerTailSlice):
            schema = _SPARK_ARROW[partition.include_headers]
            batches = broker_tail_calls.read_broker_range(
                partition.bootstrap_servers,
                partition.topic,
                partition.partition,
                partition.first_offset,
                partition.last_offset,
                partition.include_headers,
                partition.read_committed,
                partition.security,
            )
            if partition.start_timestamp is not None or partition.end_timestamp is not None:
                batches = clip_by_timestamps(
                    batches,
                    partition.start_timestamp,
                    partition.end_timestamp,
                    partition.fail_if_no_start,
                    f"{partition.topic}-{partition.partition} (broker tail)",
                )
            for batch in batches:
                yield batch.cast(schema)
        elif type(partition) is not InputPartition or partition.value is not None:
            # PySpark reads InputPartition(None) in place of an empty list of partitions.
            raise TypeError(f"not a tiercel input partition: {partition!r}")


class TiercelPushdownReader(TiercelReader):
    """A reader taking Spark's filters on partition, offset and timestamp (`pushdown`).
    A separate class because PySpark refuses a reader that has ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled`` is true: option ``filterPushdown=true``
    chooses it."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return list(push_filters(self.bounds, filters))
