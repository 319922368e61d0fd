"""The remote tier read without a broker: plan from an object-store listing
(`scan_plan`), decode segment byte ranges into Arrow (`segment_reader`). Imports nothing
from ``server``: it runs in Spark executors and notebooks.

    store = open_object_root("file:///var/lib/tiercel/remote")
    plan = plan_topic(store, "orders")
    for partition in plan.partitions:
        for batch in read_partition(store, partition, include_headers=True):
            ...  # a pyarrow.RecordBatch of Spark's Kafka-source schema
"""

from tiercel.tiered.reader.object_root import open_object_root
from tiercel.tiered.reader.read_committed import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransactions,
    aborted_transactions,
    tier_last_stable_offset,
)
from tiercel.tiered.reader.record_columns import kafka_source_schema
from tiercel.tiered.reader.scan_plan import (
    OffsetGap,
    PartitionPlan,
    RemoteTierError,
    SegmentRange,
    TopicPlan,
    complete_segments,
    plan_partition,
    plan_topic,
    topic_partitions,
)
from tiercel.tiered.reader.segment_reader import read_partition, read_segment_range

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AbortedTransactions",
    "OffsetGap",
    "PartitionPlan",
    "RemoteTierError",
    "SegmentRange",
    "TopicPlan",
    "aborted_transactions",
    "complete_segments",
    "kafka_source_schema",
    "open_object_root",
    "plan_partition",
    "plan_topic",
    "read_partition",
    "read_segment_range",
    "tier_last_stable_offset",
    "topic_partitions",
]
