"""KIP-405's scenarios 3 to 5, read back through the reader library (`tiered.reader`)
from the object store alone: before every expiration round and at the end, the plan and
the Arrow rows equal what a consumer of the leader reads, offset by offset, once each,
also while the tier still holds the uploads of a truncated lineage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pytest
import test_tiered_scenarios as scenarios
from replication_support import TP, Cluster, MakeCluster
from tiered_scenario_support import Tier, consumed

from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.reader import PartitionPlan, plan_topic, read_partition
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata

Rows = list[tuple[int, bytes]]


class ReadingTier(Tier):
    """A `Tier` that reads itself through the reader library before each expiration
    round, next to what a consumer of the leader reads then."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[tuple[PartitionPlan, Rows, Rows]] = []

    async def read_back(self, leader: UnifiedLog) -> None:
        plan, rows = read_tier(self)
        assert plan.end_offset is not None
        wanted = [(o, v) for o, v in await self.consume(leader) if o < plan.end_offset]
        self.reads.append((plan, rows, wanted))

    async def expire(self, c: Cluster, broker_id: int) -> list[RemoteLogSegmentMetadata]:
        await self.read_back(c[broker_id].log)
        return await super().expire(c, broker_id)


def read_tier(tier: Tier) -> tuple[PartitionPlan, Rows]:
    store = tier.rsm.store
    [plan] = plan_topic(store, TP.topic).partitions
    batches = list(read_partition(store, plan))
    table = pa.Table.from_batches(batches) if batches else None
    rows = (
        []
        if table is None
        else list(zip(*table.select(["offset", "value"]).to_pydict().values(), strict=True))
    )
    return plan, rows


@pytest.fixture
async def tier(tmp_path: Path) -> AsyncIterator[ReadingTier]:
    t = ReadingTier(tmp_path)
    yield t
    t.close()


def assert_read_as_consumed(tier: ReadingTier) -> None:
    for plan, rows, wanted in tier.reads:
        assert plan.gaps == ()
        assert rows == wanted


async def test_scenario_3_reads_offset_0_from_the_old_segment_and_1_from_the_new(
    make_cluster: MakeCluster, tier: ReadingTier
) -> None:
    """seg-0-1 (LE-0) also holds msg 1 at offset 1, truncated by LE-1: the reader takes
    offset 0 from it and offset 1 from seg-1-1 (LE-1), as the broker serves them."""
    await scenarios.test_scenario_3_multiple_hard_failures(make_cluster, tier)
    assert_read_as_consumed(tier)
    [(plan, rows, _)] = tier.reads
    assert rows == consumed(0, 3)
    assert [(r.first_offset, r.last_offset, r.segment.start_offset) for r in plan.ranges] == [
        (0, 0, 0),
        (1, 1, 1),
    ]
    assert [(e.epoch, e.start_offset) for e in plan.lineage] == [(0, 0), (1, 1)]


async def test_scenario_4_never_reads_the_truncated_lineage(
    make_cluster: MakeCluster, tier: ReadingTier
) -> None:
    """A's seg-0-2 (LE-0: msg 0..2) and B's seg-0-1 (LE-0 at 0, LE-1 at 1) overlap: the
    reader gets msg 0 and msg 4 (B's lineage won), never msg 1 or msg 2."""
    await scenarios.test_scenario_4_unclean_election_including_truncation(make_cluster, tier)
    assert_read_as_consumed(tier)
    [(plan, rows, _)] = tier.reads
    assert rows == consumed(0, 4)
    assert len(plan.ranges) == 1 and plan.ranges[0].segment.segment_leader_epochs == {0: 0, 1: 1}
    assert read_tier(tier)[1] == consumed(0, 4)


async def test_scenario_5_reads_the_winning_lineage_once(
    make_cluster: MakeCluster, tier: ReadingTier
) -> None:
    """Before expiration the tier holds uuid1 (A, LE-0 0..3), uuid2 (B: LE-0 at 0, LE-1
    at 2) and uuid3 (A: 4..5, LE-2 at 5): the reader reads A's lineage, each offset once,
    offsets 0 and 1 from one upload only, and none of B's LE-1 records."""
    await scenarios.test_scenario_5_log_divergence_in_remote_storage(make_cluster, tier)
    assert_read_as_consumed(tier)
    [(plan, rows, _)] = tier.reads
    assert rows == consumed(0, 1, 2, 3, 4, 7)
    assert [(r.first_offset, r.last_offset) for r in plan.ranges] == [(0, 1), (2, 3), (4, 5)]
    assert [(e.epoch, e.start_offset) for e in plan.lineage] == [(0, 0), (2, 5)]
    assert read_tier(tier)[1] == consumed(0, 1, 2, 3, 4, 7)
