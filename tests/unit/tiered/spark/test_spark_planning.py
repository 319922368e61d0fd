"""Planning a tiercel read on the driver, without Spark: pushed filters prune topic
partitions and segment ranges before any object is read, minPartitions cuts ranges into
at least that many contiguous slices, timestamps resolve through the time indexes to
the first offset at or after them, and with a broker the offsets past the tier become
one broker-tail slice per partition, with no gap or overlap."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from support.spark_tiers import Tier, build_tier
from support.tiering import BASE_TS, open_log, small_config
from support.txn_log import tier_with_snapshots, write_transactions
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.reader import SegmentRange, open_object_root, plan_topic
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentId, RemoteLogSegmentMetadata
from tiercel.tiered.spark import broker_tail_calls
from tiercel.tiered.spark.options import parse_options
from tiercel.tiered.spark.planning import (
    PlannedPartition,
    TiercelPlanningError,
    plan_partitions,
    plan_read,
)
from tiercel.tiered.spark.pushdown import PushedBounds, push_filters
from tiercel.tiered.spark.slices import BrokerTailSlice, TierSlice, split_offsets, split_ranges
from tiercel.tiered.spark.timestamps import offset_for_timestamp

T0, T1 = ("t", 0), ("t", 1)


@pytest.fixture
async def tier(tmp_path: Path, scheduler: Scheduler) -> Tier:
    return await build_tier(tmp_path, scheduler, {T0: 40, T1: 25})


def planned(
    tier: Tier, filters: Sequence[Filter] = (), **options: str
) -> tuple[list[PlannedPartition], list[Filter]]:
    bounds = PushedBounds()
    left = list(push_filters(bounds, filters))
    subscription = {} if "assign" in options else {"subscribe": "t"}
    parsed = parse_options({"path": tier.root, **subscription, **options})
    return plan_partitions(open_object_root(tier.root), parsed, bounds), left


def offsets_of(ranges: tuple[SegmentRange, ...]) -> list[int]:
    return [o for r in ranges for o in range(r.first_offset, r.last_offset + 1)]


def tier_topic_id(root: str, topic: str) -> str:
    """The one topic id ``topic`` has in the tier at ``root``."""
    topic_id = plan_topic(open_object_root(root), topic).topic_id
    assert topic_id is not None
    return topic_id


async def test_subscribe_pattern_selects_topics_whose_name_contains_a_match(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's Kafka source keeps a topic when its ``subscribePattern`` is found anywhere
    in the name (SubscribePatternStrategy.assignedTopicPartitions, ``findFirstIn``),
    among the tier's topics and, with a broker, among the broker's."""
    tier = await build_tier(tmp_path, scheduler, {("history", 0): 3, ("other", 0): 3})

    def topics(pattern: str, **options: str) -> list[str]:
        parsed = parse_options({"path": tier.root, "subscribePattern": pattern, **options})
        planned = plan_partitions(open_object_root(tier.root), parsed, PushedBounds())
        return sorted({p.topic for p in planned})

    assert topics("istor") == ["history"]
    assert topics("o") == ["history", "other"]
    assert topics("^h.*y$") == ["history"]
    assert topics("^istor") == []
    ids = {t: tier_topic_id(tier.root, t) for t in ("history", "other")}
    described = {"history": (ids["history"], [0]), "other": (ids["other"], [0]), "story": ("", [0])}
    monkeypatch.setattr(broker_tail_calls, "describe_topics", lambda servers, asked, *_: described)
    monkeypatch.setattr(
        broker_tail_calls,
        "high_watermarks",
        lambda servers, topic, partitions, *_, **__: {0: 3 if topic != "story" else 0},
    )
    monkeypatch.setattr(
        broker_tail_calls, "log_start_offsets", lambda servers, topic, partitions, *_: {0: 0}
    )
    assert topics("tor", **{"kafka.bootstrap.servers": "h:9092"}) == ["history", "story"]


def test_partition_and_offset_filters_prune_and_are_applied_exactly(tier: Tier) -> None:
    whole, _ = planned(tier)
    assert [len(p.ranges) for p in whole] == [len(tier.segments[T0]), len(tier.segments[T1])]
    filters: list[Filter] = [
        EqualTo(("partition",), 0),
        GreaterThanOrEqual(("offset",), 20),
        LessThan(("offset",), 30),
        IsNotNull(("offset",)),
    ]
    pruned, left = planned(tier, filters)
    assert left == [filters[3]]  # the pushed ones Spark need not apply again
    [p] = pruned
    assert p.partition == 0 and offsets_of(p.ranges) == list(range(20, 30))
    assert len(p.ranges) < len(whole[0].ranges) / 2
    # Bounds beyond the read, and contradictions, read nothing.
    [q] = planned(tier, [GreaterThan(("offset",), 10**6), EqualTo(("partition",), 1)])[0]
    assert q.ranges == ()
    assert planned(tier, [In(("partition",), (0,)), LessThanOrEqual(("partition",), -1)])[0] == []


def test_offset_in_and_timestamp_filters_prune_but_go_back_to_spark(tier: Tier) -> None:
    offsets_in = In(("offset",), (12, 15))
    since = BASE_TS + 250
    moment = datetime.datetime.fromtimestamp(since / 1000, datetime.UTC)
    stamp = GreaterThanOrEqual(("timestamp",), moment)
    string = EqualTo(("topic",), "t")
    plans, left = planned(tier, [offsets_in, string, EqualTo(("partition",), 0)])
    assert left == [offsets_in, string]
    [p] = plans
    assert offsets_of(p.ranges) == list(range(12, 16))
    late, left = planned(tier, [stamp])
    assert left == [stamp]
    for plan in late:
        kept = {r.segment.remote_log_segment_id for r in plan.ranges}
        key = (plan.topic, plan.partition)
        dropped = [m for m in tier.segments[key] if m.remote_log_segment_id not in kept]
        assert dropped and all(m.max_timestamp_ms < since for m in dropped)
        # Every record at or after the bound is still in a kept range.
        wanted = [row[0] for row in tier.rows[key] if row[4] >= since]
        assert set(wanted) <= set(offsets_of(plan.ranges))


def test_timestamps_resolve_to_the_first_offset_at_or_after_them(tier: Tier) -> None:
    store = open_object_root(tier.root)
    [plan] = plan_topic(store, "t", [0]).partitions
    rows = tier.rows[T0]
    stamps = sorted({row[4] for row in rows})
    for stamp in [stamps[0] - 5, *stamps[::3], stamps[-1], stamps[-1] + 1, stamps[5] + 1]:
        expected = next((row[0] for row in rows if row[4] >= stamp), None)
        assert offset_for_timestamp(store, plan.ranges, stamp) == expected, stamp


def test_json_offsets_must_name_every_partition_and_start_before_end(tier: Tier) -> None:
    with pytest.raises(TiercelPlanningError, match=r"names \[t-0\], the read has \[t-0, t-1\]"):
        planned(tier, startingOffsets='{"t":{"0":3}}')
    with pytest.raises(TiercelPlanningError, match="t-1: the starting offset 9 is after the"):
        planned(tier, startingOffsets='{"t":{"0":3,"1":9}}', endingOffsets='{"t":{"0":5,"1":4}}')
    # A partition with nothing tiered reads nothing (earliest and latest are both 0).
    [empty] = planned(tier, assign='{"t":[7]}')[0]
    assert (empty.start, empty.end, empty.ranges, empty.tail) == (0, 0, (), None)


def test_min_partitions_slices_cover_every_offset_once(tier: Tier) -> None:
    parsed = parse_options({"path": tier.root, "subscribe": "t", "minPartitions": "9"})
    slices = plan_read(parsed, PushedBounds())
    assert len(slices) >= 9 and all(isinstance(s, TierSlice) for s in slices)
    for key in (T0, T1):
        got = [o for s in slices if (s.topic, s.partition) == key for o in offsets_of(s.ranges)]
        assert got == [row[0] for row in tier.rows[key]]


def segment(start: int, end: int, size: int) -> RemoteLogSegmentMetadata:
    seg_id = RemoteLogSegmentId.generate(uuid.UUID(int=1), TopicPartition("t", 0))
    return RemoteLogSegmentMetadata(seg_id, start, end, 0, 0, 0, size, {0: 0})


@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    sizes=st.lists(st.integers(1, 10_000), min_size=6, max_size=6),
    parts=st.integers(1, 40),
)
@settings(max_examples=200, deadline=None)
def test_split_ranges_cuts_contiguously_into_at_least_min_partitions(
    lengths: list[int], sizes: list[int], parts: int
) -> None:
    ranges, start = [], 0
    for length, size in zip(lengths, sizes, strict=False):
        ranges.append(
            SegmentRange(segment(start, start + length - 1, size), start, start + length - 1)
        )
        start += length
    slices = split_ranges([ranges], parts)
    assert [o for piece in slices for o in offsets_of(tuple(piece))] == list(range(start))
    assert len(slices) >= min(parts, start)
    assert all(piece for piece in slices)


@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    sizes=st.lists(st.integers(1, 10_000), min_size=6, max_size=6),
    most=st.integers(1, 100),
    parts=st.one_of(st.none(), st.integers(1, 40)),
)
@settings(max_examples=200, deadline=None)
def test_split_ranges_holds_at_most_max_records_per_partition(
    lengths: list[int], sizes: list[int], most: int, parts: int | None
) -> None:
    """maxRecordsPerPartition (Spark 4's KafkaOffsetRangeCalculator): the fewest pieces
    of about equal offsets holding at most that many each, then minPartitions cuts those
    further; every offset once, in order."""
    ranges, start = [], 0
    for length, size in zip(lengths, sizes, strict=False):
        ranges.append(
            SegmentRange(segment(start, start + length - 1, size), start, start + length - 1)
        )
        start += length
    slices = split_ranges([ranges], parts, most)
    assert [o for piece in slices for o in offsets_of(tuple(piece))] == list(range(start))
    counts = [len(offsets_of(tuple(piece))) for piece in slices]
    assert max(counts) <= most
    assert len(slices) >= -(-start // most)
    if parts is None:
        assert len(slices) == -(-start // most) and max(counts) - min(counts) <= 1


def test_split_offsets_cuts_a_tail_into_pieces_of_at_most_max_records() -> None:
    assert split_offsets(10, 19, None) == [(10, 19)]
    assert split_offsets(10, 19, 10) == [(10, 19)]
    assert split_offsets(10, 19, 4) == [(10, 12), (13, 15), (16, 19)]
    assert split_offsets(5, 5, 1) == [(5, 5)]


def test_max_records_per_partition_cuts_tier_and_tail_slices(
    tier: Tier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Spark task of the read holds at most maxRecordsPerPartition offsets, from
    the tier and from the broker tail, as Spark 4's Kafka source cuts a batch read's
    offset ranges; a tail left a timestamp to resolve stays whole."""
    ends = {p: len(tier.rows[("t", p)]) for p in (0, 1)}
    monkeypatch.setattr(
        broker_tail_calls,
        "describe_topics",
        lambda servers, topics, *_: {"t": (tier_topic_id(tier.root, "t"), [0, 1])},
    )
    monkeypatch.setattr(
        broker_tail_calls,
        "high_watermarks",
        lambda servers, topic, partitions, *_: {0: ends[0] + 25, 1: ends[1]},
    )
    options = {
        "path": tier.root,
        "subscribe": "t",
        "kafka.bootstrap.servers": "h:1",
        "maxRecordsPerPartition": "10",
    }
    slices = plan_read(parse_options(options), PushedBounds())
    tails = [(s.first_offset, s.last_offset) for s in slices if isinstance(s, BrokerTailSlice)]
    assert tails == split_offsets(ends[0], ends[0] + 24, 10) and len(tails) == 3
    for p in (0, 1):
        pieces = [
            offsets_of(s.ranges) for s in slices if isinstance(s, TierSlice) and s.partition == p
        ]
        assert [o for piece in pieces for o in piece] == list(range(ends[p]))
        assert max(len(piece) for piece in pieces) <= 10
        assert len(pieces) == -(-ends[p] // 10)
    late = BASE_TS + 10**9  # past every record: the tail's task applies it, in one pass
    whole = plan_read(parse_options({**options, "endingTimestamp": str(late)}), PushedBounds())
    assert [
        (s.first_offset, s.last_offset, s.end_timestamp)
        for s in whole
        if isinstance(s, BrokerTailSlice)
    ] == [(ends[0], ends[0] + 24, late)]


def test_with_a_broker_the_offsets_past_the_tier_are_one_tail_slice_each(
    tier: Tier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's partitions and high watermarks (the broker tail's calls, stood in
    for here to plan without a broker; tests/integration/tiered/test_spark_broker_tail.py
    has the real one) extend the read past the tier: tier slices up to the tier's end,
    then a tail slice from there to the high watermark."""
    ends = {p: len(tier.rows[("t", p)]) for p in (0, 1)}
    watermarks = {0: ends[0] + 17, 1: ends[1], 2: 5}
    monkeypatch.setattr(
        broker_tail_calls,
        "describe_topics",
        lambda servers, topics, *_: {"t": (tier_topic_id(tier.root, "t"), [0, 1, 2])},
    )
    monkeypatch.setattr(
        broker_tail_calls,
        "high_watermarks",
        lambda servers, topic, partitions, *_: {p: watermarks[p] for p in partitions},
    )
    monkeypatch.setattr(
        broker_tail_calls, "log_start_offsets", lambda servers, topic, partitions, *_: {2: 0}
    )
    parsed_options = {"path": tier.root, "subscribe": "t", "kafka.bootstrap.servers": "h:1"}
    slices = plan_read(parse_options(parsed_options), PushedBounds())
    tails = sorted(
        (s.partition, s.first_offset, s.last_offset)
        for s in slices
        if isinstance(s, BrokerTailSlice)
    )
    assert tails == [(0, ends[0], ends[0] + 16), (2, 0, 4)]
    for p in (0, 1):
        tiered = [
            o
            for s in slices
            if isinstance(s, TierSlice) and s.partition == p
            for o in offsets_of(s.ranges)
        ]
        assert tiered == list(range(ends[p]))
    # An ending offset past the high watermark is data loss even with the broker.
    beyond = f'{{"t":{{"0":{ends[0] + 20},"1":{ends[1]},"2":5}}}}'
    with pytest.raises(
        TiercelPlanningError,
        match=f"offsets {ends[0] + 17} to {ends[0] + 19} of t-0 are not in the tier or the broker",
    ):
        plan_read(parse_options({**dict(parsed_options), "endingOffsets": beyond}), PushedBounds())
    # Without the broker, the same ending offset is data loss the tier cannot serve.
    json = f'{{"t":{{"0":{ends[0] + 17},"1":{ends[1]}}}}}'
    with pytest.raises(TiercelPlanningError, match=f"offsets {ends[0]} to {ends[0] + 16} of t-0"):
        planned(tier, endingOffsets=json)

    # A starting timestamp past every tiered record is left to the tail's task; with
    # nothing past the tier (partition 1) it is an error at once, as without a broker.
    late = max(row[4] for rows in tier.rows.values() for row in rows) + 1
    by_time = {"path": tier.root, "assign": '{"t":[0]}', "kafka.bootstrap.servers": "h:1"}
    [tail] = plan_read(parse_options({**by_time, "startingTimestamp": str(late)}), PushedBounds())
    assert isinstance(tail, BrokerTailSlice)
    assert (tail.first_offset, tail.last_offset) == (ends[0], ends[0] + 16)
    assert (tail.start_timestamp, tail.end_timestamp, tail.fail_if_no_start) == (late, None, True)
    on_1 = {**by_time, "assign": '{"t":[1]}', "startingTimestamp": str(late)}
    with pytest.raises(TiercelPlanningError, match="t-1: no record has a timestamp"):
        plan_read(parse_options(on_1), PushedBounds())
    # An ending timestamp past the tier: the whole tier, then the tail up to it.
    to_late = parse_options({**by_time, "endingTimestamp": str(late)})
    slices = plan_read(to_late, PushedBounds())
    [tail] = [s for s in slices if isinstance(s, BrokerTailSlice)]
    assert (tail.first_offset, tail.start_timestamp, tail.end_timestamp) == (ends[0], None, late)
    assert [o for s in slices if isinstance(s, TierSlice) for o in offsets_of(s.ranges)] == list(
        range(ends[0])
    )


async def test_read_committed_plans_up_to_the_tier_s_last_stable_offset(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction open at the end of the last upload (its producer snapshot says so):
    read_committed tier slices stop at its first offset and carry the tier's aborted
    transactions; with a broker, the tail starts there and is fetched read_committed up
    to the broker's last stable offset (ListOffsets isolation level 1)."""
    log = open_log(str(tmp_path / "txn-0"), small_config(), scheduler)
    txns = write_transactions(log, rounds=16)
    open_first = log.log_end_offset
    txns.send(log, 103, 2, True)
    for _ in range(12):
        txns.send(log, 7, 2, False)
    log.roll()
    store = await tier_with_snapshots(log, tmp_path, scheduler)
    await log.close()
    base = {"path": f"file://{tmp_path / 'remote'}", "subscribe": "txn"}
    [uncommitted] = plan_partitions(store, parse_options(base), PushedBounds())
    committed_options = parse_options({**base, "kafka.isolation.level": "read_committed"})
    [committed] = plan_partitions(store, committed_options, PushedBounds())
    assert uncommitted.end > open_first and uncommitted.aborted is None
    assert committed.end == open_first
    assert offsets_of(committed.ranges) == list(range(open_first))
    assert committed.aborted is not None
    assert {pid for pid, _, _ in committed.aborted} == {100, 102}

    asked: list[bool] = []

    def high_watermarks(
        servers: str,
        topic: str,
        partitions: Sequence[int],
        security: object,
        read_committed: bool = False,
    ) -> dict[int, int]:
        asked.append(read_committed)
        return {p: uncommitted.end + 3 for p in partitions}

    topic_id = tier_topic_id(base["path"], "txn")
    monkeypatch.setattr(
        broker_tail_calls, "describe_topics", lambda s, t, *_: {"txn": (topic_id, [0])}
    )
    monkeypatch.setattr(broker_tail_calls, "high_watermarks", high_watermarks)
    slices = plan_read(
        parse_options({**base, "kafka.isolation.level": "read_committed",
                       "kafka.bootstrap.servers": "h:1"}),
        PushedBounds(),
    )  # fmt: skip
    assert asked == [True]
    [tail] = [s for s in slices if isinstance(s, BrokerTailSlice)]
    assert (tail.first_offset, tail.last_offset, tail.read_committed) == (
        open_first,
        uncommitted.end + 2,
        True,
    )
    tier_slices = [s for s in slices if isinstance(s, TierSlice)]
    assert all(s.aborted == committed.aborted for s in tier_slices)


def test_with_a_broker_a_recreated_topic_reads_nothing_of_its_old_ids_tier(
    tier: Tier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker names the topic's current id: uploads under another id (the topic
    deleted and recreated under the same name) are not its records, so a recreated
    topic with nothing tiered yet is read from the broker alone."""
    new_id = "AAAAAAAAAAAAAAAAAAAAAQ"
    assert new_id != tier_topic_id(tier.root, "t")
    monkeypatch.setattr(
        broker_tail_calls, "describe_topics", lambda servers, topics, *_: {"t": (new_id, [0, 1])}
    )
    monkeypatch.setattr(
        broker_tail_calls,
        "high_watermarks",
        lambda servers, topic, partitions, *_, **__: {0: 5, 1: 0},
    )
    monkeypatch.setattr(
        broker_tail_calls, "log_start_offsets", lambda servers, topic, partitions, *_: {0: 0, 1: 0}
    )
    options = {"path": tier.root, "subscribe": "t", "kafka.bootstrap.servers": "h:1"}
    slices = plan_read(parse_options(options), PushedBounds())
    assert not [s for s in slices if isinstance(s, TierSlice)]
    tails = [(s.partition, s.first_offset, s.last_offset) for s in slices]
    assert tails == [(0, 0, 4)]
