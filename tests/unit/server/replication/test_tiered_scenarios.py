"""KIP-405's follower-fetch and unclean-election scenarios ("Follower fetch scenarios",
"log divergence in remote storage") as deterministic tests: brokers A (1) and B (2) hold
real logs, one remote tier and one metadata manager serve them both, and the
RemoteLogManager's copy, expiration and follower tasks run round by round. Each test
reproduces the KIP's epochs, offsets and segments, and checks what followers truncate
to, what leaders copy and delete, and what a consumer reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from replication_support import BASE_TS, TP, Cluster, MakeCluster, epochs
from tiered_scenario_support import (
    PARTITION,
    TIERED,
    Tier,
    consumed,
    msgs,
    offsets_in_remote,
)

from tiercel.storage.log_values import TimestampAndOffset

A, B = 1, 2


@pytest.fixture
async def tier(tmp_path: Path) -> AsyncIterator[Tier]:
    t = Tier(tmp_path)
    yield t
    t.close()


def tiered_cluster(make_cluster: MakeCluster, ids: tuple[int, ...] = (A, B)) -> Cluster:
    c = make_cluster(ids=ids, config=TIERED)
    for broker_id in ids:
        c[broker_id].log.set_remote_log_enabled(True)
    return c


def produce(c: Cluster, broker_id: int, *numbers: int) -> None:
    """``msg n`` for each n, one batch each, to ``broker_id`` as leader."""
    for n in numbers:
        c.produce(broker_id, msgs(n))


Picked = tuple[int, int, dict[int, int]] | None


def lineage_picks(tier: Tier, c: Cluster, broker_id: int) -> dict[int, Picked]:
    """For every offset in the remote tier up to the leader's highest remote offset, the
    segment (start, end, epochs) the metadata manager picks for (the offset's epoch in
    the leader's cache, the offset): what a reader planning from the metadata alone
    gets. Each assertion on it names the winning lineage's segment for every offset."""
    log = c[broker_id].log
    picks: dict[int, Picked] = {}
    for offset in offsets_in_remote(tier):
        epoch = log.epoch_for_offset(offset)
        if epoch is None or offset > log.highest_offset_in_remote_storage:
            continue
        m = tier.rlmm.remote_log_segment_metadata(PARTITION, epoch, offset)
        picks[offset] = (
            None if m is None else (m.start_offset, m.end_offset, dict(m.segment_leader_epochs))
        )
    return picks


def each(segment: Picked, *offsets: int) -> dict[int, Picked]:
    return dict.fromkeys(offsets, segment)


async def test_scenario_1_a_new_follower_builds_its_epochs_from_the_remote_tier(
    make_cluster: MakeCluster, tier: Tier
) -> None:
    """KIP-405 follower scenario 1 (a new follower): A leads with epochs LE-0 at 0, LE-1
    at 3, LE-2 at 5, LE-3 at 7; seg-0-2 (LE-0) and seg-3-5 (LE-1 at 3, LE-2 at 5) are
    remote and A's local log starts at 3 (ELO). B, empty, fetches 0, is told
    OFFSET_MOVED_TO_TIERED_STORAGE, learns ELO 3 and rebuilds its epochs up to it from
    seg-0-2, then fetches 3..7 from A."""
    c = tiered_cluster(make_cluster)
    log = c[A].log
    c.elect(leader=A, leader_epoch=0, isr=(A,))
    produce(c, A, 0, 1, 2)
    log.roll()
    c.elect(leader=A, leader_epoch=1, isr=(A,))
    produce(c, A, 3, 4)
    c.elect(leader=A, leader_epoch=2, isr=(A,))
    produce(c, A, 5)
    await c.scheduler.drain()
    await tier.copy(c, A)  # seg-0-2
    assert log.delete_old_segments() == 1
    log.roll()
    produce(c, A, 6)
    c.elect(leader=A, leader_epoch=3, isr=(A,))
    produce(c, A, 7)
    await c.scheduler.drain()
    await tier.copy(c, A)  # seg-3-5
    assert tier.finished() == [(0, 2, {0: 0}), (3, 5, {1: 3, 2: 5})]
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (0, 3, 8)
    assert epochs(log) == [(0, 0), (1, 3), (2, 5), (3, 7)]

    fetcher, endpoint = tier.fetcher(c, B)
    await fetcher.run_once()  # fetch 0 -> OMTS -> ELO 3 (LE-1) -> aux state from seg-0-2
    follower = c[B].log
    assert [api for api, _ in endpoint.requests] == [
        "fetch",
        "earliest_local",
        "earliest",
        "offset_for_leader_epoch",  # does LE-0 hold ELO - 1? (yes: it ends at 3)
    ]
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 3)
    # The epochs below ELO; LE-1 at 3 comes with the first batch fetched from ELO.
    assert follower.log_end_offset == 3 and epochs(follower) == [(0, 0)]
    await c.catch_up(fetcher, B)
    assert follower.log_end_offset == 8
    assert epochs(follower) == [(0, 0), (1, 3), (2, 5), (3, 7)]
    assert await tier.consume(log) == consumed(*range(8))
    assert lineage_picks(tier, c, A) == {
        **each((0, 2, {0: 0}), 0, 1, 2),
        **each((3, 5, {1: 3, 2: 5}), 3, 4, 5),
    }


async def test_scenario_2_an_out_of_sync_follower_truncates_and_restarts_at_the_elo(
    make_cluster: MakeCluster, tier: Tier
) -> None:
    """KIP-405 follower scenario 2 (an out-of-sync follower catching up): B stopped at
    offset 3 with LE-0 at 0, LE-1 at 3. While A's segments are local, OffsetForLeaderEpoch
    (LE-1) answers 5, above B's end: no truncation. Then A tiers seg-0-2, seg-3-5 and
    seg-6-8 and deletes them locally (ELO 9, LE-3); B's fetch at 4 gets
    OFFSET_MOVED_TO_TIERED_STORAGE, B drops its local log, rebuilds LE-0..LE-3 from
    seg-6-8 and fetches 9..11 from A."""
    c = tiered_cluster(make_cluster)
    c.live.discard(B)  # B never rejoins the ISR: A's HW follows A alone
    log = c[A].log
    c.elect(leader=A, leader_epoch=0, isr=(A,))
    produce(c, A, 0, 1, 2)
    log.roll()
    c.elect(leader=A, leader_epoch=1, isr=(A,))
    produce(c, A, 3)
    await c.catch_up(c.fetcher(B), B)  # B has 0..3, then goes offline
    produce(c, A, 4)
    c.elect(leader=A, leader_epoch=2, isr=(A,))
    produce(c, A, 5)
    log.roll()
    produce(c, A, 6)
    c.elect(leader=A, leader_epoch=3, isr=(A,))
    produce(c, A, 7, 8)
    log.roll()
    produce(c, A, 9, 10, 11)
    await c.scheduler.drain()
    follower = c[B].log
    assert follower.log_end_offset == 4 and epochs(follower) == [(0, 0), (1, 3)]
    # Step 1: B's latest epoch LE-1 ends at 5 on A, above B's end: nothing to truncate.
    assert c[A].last_offset_for_leader_epoch(3, 1) == (1, 5)

    await tier.copy(c, A)
    assert tier.finished() == [
        (0, 2, {0: 0}),
        (3, 5, {1: 3, 2: 5}),
        (6, 8, {2: 6, 3: 7}),
    ]
    assert log.delete_old_segments() == 3
    assert (log.log_start_offset, log.local_log_start_offset, log.high_watermark) == (0, 9, 12)

    fetcher, endpoint = tier.fetcher(c, B)
    # Truncating (B's LE-1 is not the leader's LE-3): LE-1 ends at 5, B keeps 0..3 and
    # fetches 4 -> OMTS -> ELO 9 (LE-3) -> the aux state from seg-6-8.
    await fetcher.run_once()
    fetched = endpoint.requests[1][1]
    assert isinstance(fetched, dict) and fetched[TP].fetch_offset == 4
    assert [api for api, _ in endpoint.requests] == [
        "offset_for_leader_epoch",
        "fetch",
        "earliest_local",
        "earliest",
        "offset_for_leader_epoch",  # does LE-2 hold ELO - 1? (no: it ends at 7)
    ]
    assert follower.log_end_offset == 9
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 9)
    assert epochs(follower) == [(0, 0), (1, 3), (2, 5), (3, 7)]
    await c.catch_up(fetcher, B)
    assert (follower.local_log_start_offset, follower.log_end_offset) == (9, 12)
    assert epochs(follower) == epochs(log) == [(0, 0), (1, 3), (2, 5), (3, 7)]
    await tier.follow(c, B)
    assert follower.highest_offset_in_remote_storage == 8
    assert await tier.consume(log) == consumed(*range(12))
    assert lineage_picks(tier, c, A) == {
        **each((0, 2, {0: 0}), 0, 1, 2),
        **each((3, 5, {1: 3, 2: 5}), 3, 4, 5),
        **each((6, 8, {2: 6, 3: 7}), 6, 7, 8),
    }


async def test_scenario_3_multiple_hard_failures(make_cluster: MakeCluster, tier: Tier) -> None:
    """KIP-405 scenario 3 (multiple hard failures): A and B hold 0..2 (LE-0) and A has
    tiered seg-0-1. Both crash; B lost the unflushed msg 1 and msg 2, comes back as
    leader of LE-1 and writes msg 3 at 1. A restarts and truncates to 1 (KIP-101), then
    fetches msg 3 and msg 4. B tiers seg-1-1 (LE-1 at 1) and its local segments below 2
    go. A consumer reads msg 0 from seg-0-1, msg 3 from seg-1-1 (offset 1 is LE-1's),
    then msg 4; seg-0-1, the only remote copy of offset 0, stays."""
    c = tiered_cluster(make_cluster)
    c.elect(leader=A, leader_epoch=0, isr=(A, B))
    produce(c, A, 0, 1)
    c[A].log.roll()
    produce(c, A, 2)
    await c.catch_up(c.fetcher(B), B)
    await c.scheduler.drain()
    await tier.copy(c, A)
    assert tier.finished() == [(0, 1, {0: 0})]
    # Both crash; B's disk kept only msg 0. A stays down while B leads LE-1.
    await c.restart(A)
    lost = await c.restart(B)
    lost.log.truncate_to(1)
    for broker_id in (A, B):
        c[broker_id].log.set_remote_log_enabled(True)
    c.live.discard(A)
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(B,))
    leader = c[B].log
    leader.roll()
    produce(c, B, 3)
    assert epochs(leader) == [(0, 0), (1, 1)]
    c.live.add(A)
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(A,))
    fetcher = c.fetcher(A)
    await c.catch_up(fetcher, A)
    assert epochs(c[A].log) == [(0, 0), (1, 1)] and c[A].log.log_end_offset == 2
    leader.roll()
    produce(c, B, 4)
    await c.catch_up(fetcher, A)
    assert leader.high_watermark == 3
    assert await tier.consume(c[A].log) == consumed(0, 3, 4)  # A truncated msg 1, msg 2
    await c.scheduler.drain()

    await tier.copy(c, B)
    assert tier.finished() == [(0, 1, {0: 0}), (1, 1, {1: 1})]
    assert leader.delete_old_segments() == 2
    assert (leader.log_start_offset, leader.local_log_start_offset) == (0, 2)
    # A consumer at offset 2 in LE-0 diverges: LE-0 ends at 1 (KIP-320).
    assert leader.end_offset_for_epoch(0) == (0, 1)
    assert await tier.expire(c, B) == []
    assert tier.finished() == tier.listed() == [(0, 1, {0: 0}), (1, 1, {1: 1})]
    # seg-0-1 serves offset 0 (LE-0), seg-1-1 offset 1 (LE-1).
    assert lineage_picks(tier, c, B) == {0: (0, 1, {0: 0}), 1: (1, 1, {1: 1})}
    assert await tier.consume(leader) == consumed(0, 3, 4)
    # ListOffsets by time below the local start: offset 0 is in seg-0-1 only, and
    # seg-0-1's msg 1 at offset 1 is not this lineage's.
    for start in (0, 1):
        answer = await tier.reader.find_offset_by_timestamp(
            PARTITION, BASE_TS, start, leader.leader_epoch_cache, leader.log_end_offset
        )
        assert answer == TimestampAndOffset(BASE_TS, start, start)
    await tier.follow(c, A)
    assert c[A].log.highest_offset_in_remote_storage == 1


async def test_scenario_4_unclean_election_including_truncation(
    make_cluster: MakeCluster, tier: Tier
) -> None:
    """KIP-405 scenario 4 (unclean leader election including truncation): A holds 0..3
    (LE-0) and tiered seg-0-2; B, out of sync, holds only 0. A stops; B is elected
    (unclean, min.insync.replicas 1), writes msg 4 and msg 5 at 1 and 2 in LE-1 and tiers
    seg-0-1 (LE-0 at 0, LE-1 at 1): it continues from its own lineage, whose LE-0 ends at
    0. B's first local segment expires. A consumer reads msg 0, then msg 4 (offset 1 is
    LE-1's), not msg 1, then msg 5; A's seg-0-2, off B's lineage and holding nothing B's
    lineage lacks, is deleted."""
    c = tiered_cluster(make_cluster)
    c.live.discard(B)
    c.elect(leader=A, leader_epoch=0, isr=(A,))
    produce(c, A, 0)
    await c.catch_up(c.fetcher(B), B)
    produce(c, A, 1, 2)
    c[A].log.roll()
    produce(c, A, 3)
    await c.scheduler.drain()
    await tier.copy(c, A)
    assert tier.finished() == [(0, 2, {0: 0})]
    assert c[B].log.log_end_offset == 1

    c.live = {B}
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(B,))
    leader = c[B].log
    produce(c, B, 4)
    leader.roll()
    produce(c, B, 5)
    assert epochs(leader) == [(0, 0), (1, 1)] and leader.high_watermark == 3
    await c.scheduler.drain()
    await tier.copy(c, B)
    assert tier.finished() == [(0, 1, {0: 0, 1: 1}), (0, 2, {0: 0})]
    assert leader.delete_old_segments() == 1
    assert (leader.log_start_offset, leader.local_log_start_offset) == (0, 2)
    assert lineage_picks(tier, c, B) == each((0, 1, {0: 0, 1: 1}), 0, 1)
    assert await tier.consume(leader) == consumed(0, 4, 5)
    # A consumer at offset 2 in LE-0 diverges: LE-0 ends at 1 (KIP-320).
    assert leader.end_offset_for_epoch(0) == (0, 1)

    deleted = await tier.expire(c, B)
    assert [(m.start_offset, m.end_offset) for m in deleted] == [(0, 2)]
    assert tier.finished() == tier.listed() == [(0, 1, {0: 0, 1: 1})]
    assert lineage_picks(tier, c, B) == each((0, 1, {0: 0, 1: 1}), 0, 1)
    assert await tier.consume(leader) == consumed(0, 4, 5)


async def test_scenario_5_log_divergence_in_remote_storage(
    make_cluster: MakeCluster, tier: Tier
) -> None:
    """KIP-405 scenario 5 (log divergence in remote storage after unclean elections):
    A holds 0..4 (LE-0) and tiers seg-0-3 (uuid1); B, out of sync, holds 0..1. A fails;
    B, elected uncleanly, writes msg 4..6 at 2..4 in LE-1 and tiers its seg-0-3 (uuid2:
    LE-0 at 0, LE-1 at 2). B fails; A, elected uncleanly without knowing LE-1, writes
    msg 7 and msg 8 at 5 and 6 in LE-2 and tiers seg-4-5 (uuid3): it continues after
    uuid1, the end of its own lineage's LE-0. uuid2 is off A's lineage: the expiration
    task deletes it. B comes back with no local data, gets OFFSET_MOVED_TO_TIERED_STORAGE,
    learns ELO 6 (LE-2) and rebuilds LE-0 at 0, LE-2 at 5 from uuid3. A consumer reads
    A's lineage once: msg 0..4, msg 7, msg 8."""
    c = tiered_cluster(make_cluster)
    c.live.discard(B)
    c.elect(leader=A, leader_epoch=0, isr=(A,))
    produce(c, A, 0, 1)
    await c.catch_up(c.fetcher(B), B)
    produce(c, A, 2, 3)
    c[A].log.roll()
    produce(c, A, 4)
    await c.scheduler.drain()
    await tier.copy(c, A)
    assert tier.finished() == [(0, 3, {0: 0})]

    c.live = {B}
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(B,))
    produce(c, B, 4, 5)
    c[B].log.roll()
    produce(c, B, 6)
    assert epochs(c[B].log) == [(0, 0), (1, 2)]
    await c.scheduler.drain()
    await tier.copy(c, B)
    assert tier.finished() == [(0, 3, {0: 0}), (0, 3, {0: 0, 1: 2})]

    c.live = {A}
    c.elect(leader=A, leader_epoch=2, isr=(A,), members=(A,))
    leader = c[A].log
    produce(c, A, 7)
    leader.roll()
    produce(c, A, 8)
    assert epochs(leader) == [(0, 0), (2, 5)] and leader.high_watermark == 7
    await c.scheduler.drain()
    await tier.copy(c, A)
    uuid3 = (4, 5, {0: 4, 2: 5})
    assert uuid3 in tier.finished() and len(tier.finished()) == 3
    assert leader.delete_old_segments() == 2
    assert (leader.log_start_offset, leader.local_log_start_offset) == (0, 6)
    # Before the expiration task runs, B's uuid2 may serve offsets 0 and 1 (LE-0's
    # records, the same on both lineages), never its LE-1 records at 2 and 3.
    assert await tier.consume(leader) == consumed(0, 1, 2, 3, 4, 7, 8)
    deleted = await tier.expire(c, A)
    assert [dict(m.segment_leader_epochs) for m in deleted] == [{0: 0, 1: 2}]
    assert tier.finished() == tier.listed() == [(0, 3, {0: 0}), uuid3]
    assert lineage_picks(tier, c, A) == {
        **each((0, 3, {0: 0}), 0, 1, 2, 3),
        **each((4, 5, {0: 4, 2: 5}), 4, 5),
    }
    assert await tier.consume(leader) == consumed(0, 1, 2, 3, 4, 7, 8)

    # B restarts with an empty disk and follows A.
    empty = await c.restart(B)
    empty.log.truncate_fully_and_start_at(0)
    empty.log.set_remote_log_enabled(True)
    c.live = {A, B}
    c.elect(leader=A, leader_epoch=2, isr=(A,), members=(B,))
    fetcher, endpoint = tier.fetcher(c, B)
    await c.catch_up(fetcher, B)
    follower = c[B].log
    assert [api for api, _ in endpoint.requests][:2] == ["fetch", "earliest_local"]
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 6)
    assert epochs(follower) == [(0, 0), (2, 5)]
    assert follower.log_end_offset == 7
    # LE-1 is unknown to B now: a fetch of offset 3 in LE-1 diverges at LE-0's end.
    assert follower.end_offset_for_epoch(1) == (0, 5)


async def test_scenario_3_a_new_follower_while_only_the_old_leaders_segment_holds_offset_0(
    make_cluster: MakeCluster, tier: Tier
) -> None:
    """KIP-405 scenario 3, then scenario 1 for a new broker C: B leads LE-1 from offset 1;
    its copy task counts A's seg-0-1 (LE-0 at 0 and 1) as the remote copy of offset 0,
    so B's local retention drops its segment [0] before seg-1-1 is copied (ELO 1, LE-1).
    C, empty, is told OFFSET_MOVED_TO_TIERED_STORAGE: the remote segment holding ELO - 1
    is A's seg-0-1, whose offset 1 is not B's. C must restart at B's ELO 1, not after
    seg-0-1, and hold msg 3 at 1 in LE-1."""
    C = 3
    c = tiered_cluster(make_cluster, (A, B, C))
    c.live.discard(C)
    c.elect(leader=A, leader_epoch=0, isr=(A, B))
    produce(c, A, 0, 1)
    c[A].log.roll()
    produce(c, A, 2)
    await c.catch_up(c.fetcher(B), B)
    await c.scheduler.drain()
    await tier.copy(c, A)
    lost = await c.restart(B)
    lost.log.truncate_to(1)
    lost.log.set_remote_log_enabled(True)
    c.live = {B}
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(B,))
    leader = c[B].log
    leader.roll()
    produce(c, B, 3)
    await c.scheduler.drain()
    await tier.copy(c, B)  # nothing rolled above offset 0 yet: offset 0 counts as copied
    assert leader.highest_offset_in_remote_storage == 0
    assert leader.delete_old_segments() == 1
    assert (leader.log_start_offset, leader.local_log_start_offset) == (0, 1)
    leader.roll()
    produce(c, B, 4)

    c.live = {B, C}
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(C,))
    fetcher, _ = tier.fetcher(c, C)
    await fetcher.run_once()
    follower = c[C].log
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 1)
    assert epochs(follower) == [(0, 0)]
    await c.catch_up(fetcher, C)
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 1)
    assert epochs(follower) == epochs(leader) == [(0, 0), (1, 1)]
    assert await tier.consume(follower) == consumed(0, 3, 4)


async def test_a_new_follower_restarts_after_a_remote_segment_the_leader_also_keeps_locally(
    make_cluster: MakeCluster, tier: Tier
) -> None:
    """KIP-405 scenario 1 after a clean leader change: A tiered seg-0-14 (LE-0); B, whose
    own segments roll at 10, leads LE-1 from 15 and keeps 10..16 locally (ELO 10). The
    remote segment holding ELO - 1 goes on to 14, and B has those records (its LE-0
    ends at 15): C restarts after the segment, at 15, with its producer snapshot."""
    C = 3
    c = tiered_cluster(make_cluster, (A, B, C))
    c.live.discard(C)
    c.elect(leader=A, leader_epoch=0, isr=(A, B))
    produce(c, A, *range(10))
    fetcher = c.fetcher(B)
    await c.catch_up(fetcher, B)
    c[B].log.roll()
    produce(c, A, *range(10, 15))
    c[A].log.roll()
    await c.catch_up(fetcher, B)
    await c.scheduler.drain()
    await tier.copy(c, A)
    assert tier.finished() == [(0, 14, {0: 0})]
    c.live = {B}
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(B,))
    leader = c[B].log
    produce(c, B, 15, 16)
    await tier.follow(c, B)  # B counts seg-0-14 as its lineage's (its LE-0 ends at 15)
    assert leader.delete_old_segments() == 1
    assert leader.local_log_start_offset == 10

    c.live = {B, C}
    c.elect(leader=B, leader_epoch=1, isr=(B,), members=(C,))
    fetcher, endpoint = tier.fetcher(c, C)
    await c.catch_up(fetcher, C)
    follower = c[C].log
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 15)
    assert epochs(follower) == epochs(leader) == [(0, 0), (1, 15)]
    assert [api for api, _ in endpoint.requests][:5] == [
        "fetch",
        "earliest_local",
        "earliest",
        "offset_for_leader_epoch",  # is LE-0's end above the segment's end? (yes)
        "fetch",
    ]
    assert 15 in follower.producer_state.snapshot_offsets
    assert await tier.consume(follower) == consumed(*range(17))
