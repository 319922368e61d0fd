"""The leader's side of replication in Partition: HW = smallest LEO over the (maximal)
ISR, ISR shrink after replica.lag.time.max.ms and expansion at the HW, both written as
conditional writes of the partition state, and min.insync.replicas for acks=all."""

from __future__ import annotations

from dataclasses import replace

import pytest
from replication_support import CONFIG, LAG_MS, TP, Cluster, MakeCluster, values

from tiercel.protocol.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from tiercel.server.partition import LogReadResult


def fetch(c: Cluster, follower: int, offset: int, leader: int = 1) -> LogReadResult:
    """Follower ``follower`` fetches from ``offset``: it has everything below it."""
    epoch = c[leader].leader_epoch
    return c[leader].fetch_records_for_follower(follower, offset, 0, 1 << 20, True, epoch, -1, True)


async def test_high_watermark_is_the_smallest_log_end_offset_over_the_isr(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(ids=(1, 2, 3))
    c.elect(leader=1, leader_epoch=0)
    for _ in range(3):
        c.produce(1, values(10))
    fetch(c, 2, 30)
    fetch(c, 3, 10)
    assert c[1].log.high_watermark == 10
    fetch(c, 3, 20)
    assert c[1].log.high_watermark == 20
    assert c.delayed.count(TP) == 2  # every advance re-checks the delayed operations
    fetch(c, 3, 15)  # an older fetch never moves the HW back
    assert c[1].log.high_watermark == 20
    # The answer carries the HW taken before the fetch was recorded.
    assert fetch(c, 3, 30).high_watermark == 20
    assert c[1].log.high_watermark == 30


async def test_a_lagging_follower_leaves_the_isr_and_stops_holding_the_hw(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(ids=(1, 2, 3))
    state = c.elect(leader=1, leader_epoch=0)
    for _ in range(3):
        c.produce(1, values(10))
    fetch(c, 2, 30)
    fetch(c, 3, 10)
    c.clock.now += LAG_MS // 2
    c[1].maybe_shrink_isr()
    assert c.store.writes == []  # both caught up within replica.lag.time.max.ms
    c.clock.now += LAG_MS // 2 + 1
    fetch(c, 2, 30)  # follower 2 keeps up, follower 3 is stuck at 10
    fetch(c, 3, 10)
    c[1].maybe_shrink_isr()
    # Until the write is done the old ISR still counts for the HW.
    assert c[1].log.high_watermark == 10
    await c.settle()
    assert c.store.writes == [replace(state, isr=(1, 2), partition_epoch=state.partition_epoch + 1)]
    assert (c[1].isr, c[1].state.partition_epoch) == ((1, 2), state.partition_epoch + 1)
    assert c[1].log.high_watermark == 30


async def test_a_follower_that_reaches_the_hw_rejoins_the_isr(make_cluster: MakeCluster) -> None:
    c = make_cluster(ids=(1, 2, 3))
    state = c.elect(leader=1, leader_epoch=0, isr=(1, 2))
    for _ in range(3):
        c.produce(1, values(10))
    fetch(c, 2, 30)
    assert c[1].log.high_watermark == 30
    fetch(c, 3, 20)  # below the HW: not yet
    assert c[1].maximal_isr == {1, 2}
    fetch(c, 3, 30)
    # Counted at once for the HW (the maximal ISR, KIP-497), committed once written.
    assert c[1].maximal_isr == {1, 2, 3} and c[1].isr == (1, 2)
    await c.settle()
    assert c[1].isr == (1, 2, 3)
    assert c.store.state == replace(state, isr=(1, 2, 3), partition_epoch=state.partition_epoch + 1)
    c.produce(1, values(5))
    fetch(c, 2, 35)
    assert c[1].log.high_watermark == 30  # follower 3 now holds it too


async def test_an_unregistered_broker_does_not_rejoin(make_cluster: MakeCluster) -> None:
    c = make_cluster(ids=(1, 2))
    c.elect(leader=1, leader_epoch=0, isr=(1,))
    c.produce(1, values(10))
    c.live.discard(2)
    fetch(c, 2, 10)
    await c.settle()
    assert c[1].isr == (1,) and c.store.writes == []


async def test_a_lost_compare_and_set_adopts_the_controllers_state(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(ids=(1, 2, 3))
    state = c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    fetch(c, 2, 10)
    c.clock.now += LAG_MS + 1
    fetch(c, 2, 10)
    c[1].maybe_shrink_isr()
    # The controller writes first (broker 3 died): a new epoch, the shrink is moot.
    controller = c.store.put(replace(state, leader_epoch=1, isr=(1, 2)))
    await c.settle()
    assert c.store.state == controller
    assert c[1].isr == (1, 2, 3) and c[1].maximal_isr == {1, 2, 3}
    c[1].make_leader(controller)
    assert (c[1].isr, c[1].leader_epoch) == ((1, 2), 1)


async def test_the_leaders_own_write_coming_back_keeps_a_change_in_flight(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(ids=(1, 2, 3))
    c.elect(leader=1, leader_epoch=0, isr=(1, 2))
    c.produce(1, values(10))
    fetch(c, 3, 10)
    await c.settle()
    written = c.store.state
    assert written is not None and written.isr == (1, 2, 3)
    c.produce(1, values(1))
    c.clock.now += LAG_MS + 1
    fetch(c, 2, 11)
    c[1].maybe_shrink_isr()  # broker 3 is behind now
    c[1].make_leader(written)  # the watch delivers the expansion written before
    assert c[1].maximal_isr == {1, 2, 3}
    await c.settle()
    assert c[1].isr == (1, 2)


async def test_min_insync_replicas(make_cluster: MakeCluster) -> None:
    c = make_cluster(ids=(1, 2), config=replace(CONFIG, min_insync_replicas=2))
    c.elect(leader=1, leader_epoch=0)
    info = c.produce(1, values(10), acks=-1)
    assert c[1].check_enough_replicas_reach_offset(info.next_offset) == (False, None)
    fetch(c, 2, 10)
    assert c[1].check_enough_replicas_reach_offset(info.next_offset) == (True, None)
    c.produce(1, values(1), acks=1)
    c.clock.now += LAG_MS + 1  # follower 2 never fetches offset 10
    c[1].maybe_shrink_isr()
    await c.settle()
    assert c[1].isr == (1,)
    # Appended and covered by the HW, but the ISR is now below min.insync.replicas.
    done, error = c[1].check_enough_replicas_reach_offset(info.next_offset)
    assert done and isinstance(error, NotEnoughReplicasAfterAppendError)
    with pytest.raises(NotEnoughReplicasError):
        c.produce(1, values(1), acks=-1)
    assert c[1].log.high_watermark == 10  # no HW advance under min ISR (Kafka 3.7+)
