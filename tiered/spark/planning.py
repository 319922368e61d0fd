"""A tiercel read planned from the object store alone (and, with
``kafka.bootstrap.servers``, the brokers' partitions and high watermarks): which topic
partitions, which offsets of each, which segment ranges hold them, how they are cut into
Spark input partitions. Everything that can be wrong with the request is found here, on
the driver, before any task runs.

Offsets follow Spark's Kafka source in a batch query: a read of each topic partition
from its starting offset (inclusive) to its ending offset (exclusive). ``earliest`` is
the tier's first offset; ``latest`` is one past the tier's last offset — or, with
``kafka.bootstrap.servers``, the broker's high watermark, the offsets past the tier then
read from the broker. The segment ranges are the reader library's lineage-correct plan
(`tiered.reader.scan_plan`). Offsets of the requested range that no segment holds
(deleted by retention, or never tiered) are data loss: an error naming them with
``failOnDataLoss`` (the default), skipped without.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.reader import (
    PartitionPlan,
    SegmentRange,
    TopicPlan,
    aborted_transactions,
    plan_topic,
    tier_last_stable_offset,
)
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_listing import topic_ids
from tiercel.tiered.spark import broker_tail_calls
from tiercel.tiered.spark.options import EARLIEST, LATEST, OffsetBound, ReadOptions
from tiercel.tiered.spark.pushdown import PushedBounds
from tiercel.tiered.spark.slices import (
    BrokerTailSlice,
    StoreRoot,
    TierSlice,
    split_offsets,
    split_ranges,
)
from tiercel.tiered.spark.timestamps import offset_for_timestamp

__all__ = ["PlannedPartition", "TiercelPlanningError", "plan_partitions", "plan_read"]

_TOPIC_ID_CHARS = 22  # a topic id as object keys spell it (base64, object_layout)


class TiercelPlanningError(ValueError):
    """The read cannot be planned as asked: data loss, offsets out of order, a JSON
    offset map not naming the partitions read."""


@dataclass(frozen=True, slots=True)
class PlannedPartition:
    """One topic partition's read: ``ranges`` from the tier and, past the tier's end,
    ``tail`` (first and last offset) from the broker; ``start`` and ``end`` the
    resolved bounds (end exclusive) before pushed filters. ``tail_timestamps`` are the
    starting and ending timestamps the tier could not resolve, for the tail to apply
    (`tail_timestamps`)."""

    topic: str
    partition: int
    start: int
    end: int
    ranges: tuple[SegmentRange, ...]
    tail: tuple[int, int] | None
    tail_timestamps: tuple[int | None, int | None] = (None, None)
    aborted: tuple[tuple[int, int, int], ...] | None = None
    """read_committed: the tier's aborted transactions (`read_committed`)."""


def plan_read(options: ReadOptions, bounds: PushedBounds) -> list[InputPartition]:
    """The input partitions of the read: one `TierSlice` per topic partition with
    tiered records to read (more with ``minPartitions`` and ``maxRecordsPerPartition``),
    one `BrokerTailSlice` per topic partition with records past the tier (more with
    ``maxRecordsPerPartition``, unless a timestamp bound is left to the tail, which
    finds it in one pass)."""
    root = StoreRoot(options.path, options.s3_endpoint_url, options.s3_region)
    planned = plan_partitions(root.open(), options, bounds)
    with_ranges = [p for p in planned if p.ranges]
    aborted = {(p.topic, p.partition): p.aborted for p in with_ranges}
    slices: list[InputPartition] = []
    max_records = options.max_records_per_partition
    per_partition = [p.ranges for p in with_ranges]
    for ranges in split_ranges(per_partition, options.min_partitions, max_records):
        tp = ranges[0].segment.remote_log_segment_id.topic_partition
        slices.append(
            TierSlice(
                root,
                tp.topic,
                tp.partition,
                tuple(ranges),
                options.include_headers,
                aborted[tp.topic, tp.partition],
            )
        )
    for p in planned:
        if p.tail is None:
            continue
        assert options.bootstrap_servers is not None
        timestamps = p.tail_timestamps != (None, None)
        for first, last in split_offsets(*p.tail, None if timestamps else max_records):
            slices.append(
                BrokerTailSlice(
                    options.bootstrap_servers,
                    p.topic,
                    p.partition,
                    first,
                    last,
                    options.include_headers,
                    *p.tail_timestamps,
                    options.starting_timestamp_strategy == "error",
                    options.read_committed,
                    options.security,
                )
            )
    return slices


def plan_partitions(
    store: ObjectStore, options: ReadOptions, bounds: PushedBounds
) -> list[PlannedPartition]:
    """Every topic partition read, resolved and checked (see the module docstring)."""
    plans = _partition_plans(store, options)
    read = {(topic, p) for topic, by_partition in plans.items() for p in by_partition}
    _check_named_partitions(options.starting, "starting", read)
    _check_named_partitions(options.ending, "ending", read)
    planned = []
    for topic, by_partition in sorted(plans.items()):
        partitions = [p for p in sorted(by_partition) if bounds.allows_partition(p)]
        if not partitions:
            continue
        watermarks = _high_watermarks(options, topic, partitions)
        untiered = [p for p in partitions if by_partition[p].start_offset is None]
        log_starts = _log_starts(options, topic, untiered)
        for partition in partitions:
            high = None if watermarks is None else watermarks[partition]
            plan = by_partition[partition]
            planned.append(_plan_one(store, options, bounds, plan, high, log_starts.get(partition)))
    return planned


def _plan_one(
    store: ObjectStore,
    options: ReadOptions,
    bounds: PushedBounds,
    plan: PartitionPlan,
    high_watermark: int | None,
    broker_log_start: int | None,
) -> PlannedPartition:
    tp = plan.topic_partition
    # Nothing tiered: an empty tier at the broker's log start offset (retention or
    # DeleteRecords may have moved it past 0), else at 0.
    empty_at = broker_log_start if broker_log_start is not None else 0
    tier_start = plan.start_offset if plan.start_offset is not None else empty_at
    tier_end = plan.end_offset if plan.end_offset is not None else empty_at
    aborted = None
    if options.read_committed:
        # The tier decides read_committed up to its last stable offset; the rest is the
        # broker tail's (read_committed Fetch), or not readable yet (`read_committed`).
        lso = tier_last_stable_offset(store, plan)
        if lso is not None:
            tier_end = min(tier_end, max(lso, tier_start))
        aborted = aborted_transactions(store, plan).entries()
    latest = high_watermark if high_watermark is not None else tier_end
    in_tail = tier_end if high_watermark is not None else None
    start, start_ts = _resolve(
        store, options.starting, plan, tier_start, latest, in_tail, True, options
    )
    end, end_ts = _resolve(store, options.ending, plan, tier_start, latest, in_tail, False, options)
    if start > end:
        raise TiercelPlanningError(
            f"{tp.topic}-{tp.partition}: the starting offset {start} is after the ending "
            f"offset {end}"
        )
    first, last = bounds.clip(start, end - 1)
    tier_last = min(last, tier_end - 1)  # the part of the read the tier may hold
    ranges = [
        SegmentRange(r.segment, max(r.first_offset, first), min(r.last_offset, tier_last))
        for r in plan.ranges
        if r.first_offset <= tier_last and r.last_offset >= first
    ]
    lost = [(g.first_offset, g.last_offset) for g in plan.gaps]
    lost.append((first, tier_start - 1))  # before the tier
    lost = [(max(lo, first), min(hi, tier_last)) for lo, hi in lost]
    past = (max(first, tier_end), last)  # after the tier
    tail = None
    if high_watermark is not None:
        # The broker holds up to its high watermark; an ending offset past it is a loss
        # too (nothing there to read), not a read that waits.
        tail = (past[0], min(past[1], high_watermark - 1))
        lost.append((max(past[0], high_watermark), past[1]))
    else:
        lost.append(past)
    lost = [(lo, hi) for lo, hi in lost if lo <= hi]
    if lost and options.fail_on_data_loss:
        spans = ", ".join(f"{lo} to {hi}" for lo, hi in sorted(lost))
        where = "in the remote tier" if high_watermark is None else "in the tier or the broker"
        raise TiercelPlanningError(
            f"data loss: offsets {spans} of {tp.topic}-{tp.partition} are not {where} "
            "(deleted by retention, or not tiered yet); set failOnDataLoss to false to read "
            "around them"
        )
    if bounds.min_timestamp_us is not None:
        floor = bounds.min_timestamp_us
        ranges = [r for r in ranges if r.segment.max_timestamp_ms * 1000 >= floor]
    if tail is not None and tail[0] > tail[1]:
        tail = None
    tail_empty = high_watermark is not None and high_watermark <= tier_end
    if start_ts is not None and tail_empty and options.starting_timestamp_strategy == "error":
        # Left to the tail, but the broker has no record past the tier: none is late enough.
        _no_record_after(tp.topic, tp.partition, start_ts)
    pending = (start_ts, end_ts) if tail is not None else (None, None)
    return PlannedPartition(
        tp.topic, tp.partition, start, end, tuple(ranges), tail, pending, aborted
    )


def _resolve(
    store: ObjectStore,
    bound: OffsetBound,
    plan: PartitionPlan,
    earliest: int,
    latest: int,
    tail_start: int | None,
    starting: bool,
    options: ReadOptions,
) -> tuple[int, int | None]:
    """One end of ``plan``'s read, by the Kafka source's precedence (OffsetBound), and
    the timestamp left for the broker tail to apply when the tier has no record late
    enough and the tail (from ``tail_start``) is read: the read then starts at the
    tail, or ends at its end, and the tail applies the timestamp (`tail_timestamps`)."""
    tp = plan.topic_partition
    key = (tp.topic, tp.partition)
    timestamp = bound.timestamp
    if timestamp is None and bound.timestamps is not None:
        timestamp = bound.timestamps[key]
    if timestamp is not None:
        found = offset_for_timestamp(store, plan.ranges, timestamp)
        if found is not None:
            return found, None
        if tail_start is not None:
            return (tail_start if starting else latest), timestamp
        if starting and options.starting_timestamp_strategy == "error":
            _no_record_after(tp.topic, tp.partition, timestamp)
        return latest, None
    offset = bound.offsets[key] if bound.offsets is not None else bound.default
    if offset == EARLIEST:
        return earliest, None
    if offset == LATEST:
        return latest, None
    return offset, None


def _no_record_after(topic: str, partition: int, timestamp: int) -> None:
    raise TiercelPlanningError(
        f"{topic}-{partition}: no record has a timestamp at or after {timestamp} "
        "(startingOffsetsByTimestampStrategy=latest starts such partitions at the latest "
        "offset)"
    )


def _check_named_partitions(bound: OffsetBound, end: str, read: set[tuple[str, int]]) -> None:
    """The JSON offset map in force names exactly the partitions read, as the Kafka
    source requires ("you must specify all TopicPartitions")."""
    if bound.timestamp is not None:
        return
    if bound.timestamps is not None:
        name, given = f"{end}OffsetsByTimestamp", set(bound.timestamps)
    elif bound.offsets is not None:
        name, given = f"{end}Offsets", set(bound.offsets)
    else:
        return
    if given != read:
        raise TiercelPlanningError(
            f"{name} must name every partition read (-2 for earliest, -1 for latest): "
            f"it names {_names(given)}, the read has {_names(read)}"
        )


def _names(keys: set[tuple[str, int]]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(keys)) + "]"


def _partition_plans(
    store: ObjectStore, options: ReadOptions
) -> dict[str, dict[int, PartitionPlan]]:
    """Topic -> partition -> its whole plan in the tier, for the partitions read:
    ``assign``'s; else the subscribed topics' partitions in the tier and, with a broker,
    the broker's (a partition with nothing tiered has an empty plan)."""
    if options.assign is not None:
        wanted: dict[str, set[int]] = {t: set(ps) for t, ps in options.assign.items()}
    else:
        if options.subscribe is not None:
            topics = set(options.subscribe)
        else:
            assert options.subscribe_pattern is not None
            topics = {t for t in tier_topics(store) if _subscribed(options.subscribe_pattern, t)}
        wanted = {t: set() for t in topics}
    # With a broker, each topic is read under the id the broker has for it: a topic
    # deleted and recreated leaves the old id's uploads in the tier, which are not its.
    broker_ids: dict[str, str] = {}
    if options.bootstrap_servers is not None:
        asked = None if options.subscribe_pattern is not None else sorted(wanted)
        described = broker_tail_calls.describe_topics(
            options.bootstrap_servers, asked, options.security
        )
        for topic, (topic_id, on_broker) in described.items():
            pattern = options.subscribe_pattern
            if pattern is None or _subscribed(pattern, topic):
                broker_ids[topic] = topic_id
                if options.assign is None:
                    wanted.setdefault(topic, set()).update(on_broker)
    found: dict[str, dict[int, PartitionPlan]] = {}
    for topic, numbers in wanted.items():
        plan = _topic_plan(store, topic, broker_ids.get(topic))
        by_partition = {p.topic_partition.partition: p for p in plan.partitions}
        read = numbers if options.assign is not None else numbers | set(by_partition)
        found[topic] = {
            p: by_partition.get(p)
            or PartitionPlan(TopicPartition(topic, p), plan.topic_id or "", (), (), ())
            for p in read
        }
    return {topic: plans for topic, plans in found.items() if plans}


def _subscribed(pattern: str, topic: str) -> bool:
    """Whether ``subscribePattern`` selects ``topic``: as Spark's Kafka source reads
    topics through Admin (SubscribePatternStrategy.assignedTopicPartitions, its default
    since Spark 3.1), when the regex is found anywhere in the name (Scala's
    ``findFirstIn``), not only when it matches the whole name as Kafka's consumer
    ``subscribe(Pattern)`` would."""
    return re.search(pattern, topic) is not None


def _topic_plan(store: ObjectStore, topic: str, broker_topic_id: str | None) -> TopicPlan:
    """The tier's plan of ``topic``: of the broker's topic id when there is a broker (an
    empty plan when that id has tiered nothing yet), else of the newest id in the tier."""
    if broker_topic_id is None:
        return plan_topic(store, topic)
    if broker_topic_id not in topic_ids(store, topic):
        return TopicPlan(topic, broker_topic_id, (), ())
    return plan_topic(store, topic, topic_id=broker_topic_id)


def tier_topics(store: ObjectStore) -> list[str]:
    """The topic names with objects in the tier (folders ``<topic>-<topic id>/``)."""
    names = set()
    for folder in store.list_folders(""):
        name = folder.rstrip("/")
        if len(name) > _TOPIC_ID_CHARS + 1 and name[-_TOPIC_ID_CHARS - 1] == "-":
            names.add(name[: -_TOPIC_ID_CHARS - 1])
    return sorted(names)


def _log_starts(options: ReadOptions, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    """The broker's log start offsets of ``partitions`` (those with nothing tiered)."""
    if options.bootstrap_servers is None or not partitions:
        return {}
    return broker_tail_calls.log_start_offsets(
        options.bootstrap_servers, topic, partitions, options.security
    )


def _high_watermarks(
    options: ReadOptions, topic: str, partitions: Sequence[int]
) -> dict[int, int] | None:
    if options.bootstrap_servers is None:
        return None
    # read_committed: "latest" is the last stable offset (ListOffsets isolation level 1).
    return broker_tail_calls.high_watermarks(
        options.bootstrap_servers, topic, partitions, options.security, options.read_committed
    )
