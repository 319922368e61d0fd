"""The controller on a shared store: election and failover, new partitions, broker loss
and return, clean and unclean elections, preferred elections (API and automatic),
controlled shutdown, deletion, and fencing of a deposed controller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from controller_support import Cluster, eventually, tp

from tiercel.config.broker_config import Listener
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.controller.controller_store import ControllerMovedError, ControllerStore
from tiercel.server.controller.replica_leader_election import ElectionType
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.store import (
    CreateOp,
    DeleteOp,
    MetadataStoreError,
    Op,
    OpResult,
    Stat,
)
from tiercel.server.partition import PartitionState


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster.open(tmp_path)
    yield c
    await c.close()


async def three_brokers(cluster: Cluster, **overrides: object) -> None:
    for broker in (1, 2, 3):
        await cluster.start(broker, **overrides)
    await cluster.wait_active()


def code(result: int | KafkaError | None) -> ErrorCode:
    assert isinstance(result, KafkaError), result
    return result.error_code


# -- election --------------------------------------------------------------------------


async def test_one_controller_is_elected_and_another_takes_over(cluster: Cluster) -> None:
    first = await cluster.start(1)
    second = await cluster.start(2)
    assert first.is_active and not second.is_active and first.epoch == 1
    data, _ = await cluster.store.get(zk.CONTROLLER_EPOCH_PATH)
    assert data == b"1"
    await cluster.stop(1)
    active = await cluster.wait_active()
    assert active is second and second.epoch == 2
    # The new controller does the controller's work: a new topic gets its leaders.
    await cluster.create_topic("t", {0: (2,)})
    assert (await cluster.wait_state("t", lambda s: s.leader == 2)).leader_epoch == 0


async def test_new_partitions_get_the_first_live_replica_as_leader(cluster: Cluster) -> None:
    await cluster.start(1)
    await cluster.start(2)
    await cluster.create_topic("t", {0: (3, 2, 1), 1: (3,)})
    state = await cluster.wait_state("t", lambda s: True)
    assert (state.leader, state.leader_epoch, state.isr) == (2, 0, (2, 1))
    assert state.controller_epoch == 1
    # No replica of partition 1 is live: it gets no state until one comes.
    assert await cluster.state("t", 1) is None
    await cluster.register(3)
    state = await cluster.wait_state("t", lambda s: True, partition=1)
    assert (state.leader, state.leader_epoch, state.isr) == (3, 0, (3,))


async def test_partitions_added_to_a_topic_get_leaders(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (1, 2)})
    await cluster.wait_state("t", lambda s: True)
    data, stat = await cluster.store.get(zk.topic_path("t"))
    grown = zk.TopicAssignment.decode(data)
    grown.partitions[1] = (3, 1)
    await cluster.store.set(zk.topic_path("t"), grown.encode(), expected_version=stat.version)
    state = await cluster.wait_state("t", lambda s: True, partition=1)
    assert (state.leader, state.isr) == (3, (3, 1))


# -- broker loss and return ------------------------------------------------------------


async def test_a_lost_leader_is_replaced_from_the_isr_with_a_new_epoch(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (3, 1, 2)})
    await cluster.wait_state("t", lambda s: s.leader == 3)
    await cluster.deregister(3)
    state = await cluster.wait_state("t", lambda s: s.leader != 3)
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))


async def test_a_lost_follower_leaves_the_isr(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (1, 2, 3)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.deregister(3)
    state = await cluster.wait_state("t", lambda s: 3 not in s.isr)
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))


async def test_a_bounced_broker_is_handled_as_lost_then_new(cluster: Cluster) -> None:
    """Its registration replaced in one step (the controller never sees it missing), as
    by a restart within the session timeout: the new czxid (Kafka's broker epoch) tells
    the controller, and its leaderships move with a new epoch (processBrokerChange)."""
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (3, 1, 2)})
    await cluster.wait_state("t", lambda s: s.leader == 3)
    registration = zk.BrokerRegistration(3, (Listener("PLAINTEXT", "127.0.0.1", 3),))
    path = zk.broker_path(3)
    await cluster.store.multi([DeleteOp(path), CreateOp(path, registration.encode(), True)])
    state = await cluster.wait_state("t", lambda s: s.leader != 3)
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))


async def test_without_a_live_isr_member_the_partition_goes_offline(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (2, 3)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.set_isr("t", (2,))  # 3 fell behind
    await cluster.deregister(2)
    # Offline, with the last ISR member kept so that only it can come back as leader.
    state = await cluster.wait_state("t", lambda s: s.leader == -1)
    assert (state.leader_epoch, state.isr) == (1, (2,))
    # 3 is live but out of sync: no unclean election by default.
    await cluster.deregister(3)
    await cluster.register(3)
    await asyncio.sleep(0.05)  # the watches fire, the controller handles them
    await eventually(lambda: _idle(cluster))
    assert (await cluster.state("t")) == state
    # The ISR member's return brings the partition back.
    await cluster.register(2)
    state = await cluster.wait_state("t", lambda s: s.leader == 2)
    assert (state.leader_epoch, state.isr) == (2, (2,))


async def test_a_topic_override_allows_an_unclean_election(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (2, 3)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.set_isr("t", (2,))
    await cluster.deregister(2)
    await cluster.wait_state("t", lambda s: s.leader == -1)
    # Turning the override on elects the out-of-sync replica, alone in the ISR.
    await cluster.store.set(
        zk.topic_config_path("t"),
        zk.encode_topic_config({"unclean.leader.election.enable": "true"}),
    )
    state = await cluster.wait_state("t", lambda s: s.leader == 3)
    assert (state.leader_epoch, state.isr) == (2, (3,))


async def test_the_broker_default_allows_unclean_elections(cluster: Cluster) -> None:
    for broker in (1, 2, 3):
        await cluster.start(broker, **{"unclean.leader.election.enable": True})
    await cluster.wait_active()
    await cluster.create_topic("t", {0: (2, 3)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.set_isr("t", (2,))
    await cluster.deregister(2)
    state = await cluster.wait_state("t", lambda s: s.leader == 3)
    assert state.isr == (3,)


async def test_a_concurrent_isr_change_is_reread_before_the_election(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (1, 2, 3)})
    await cluster.wait_state("t", lambda s: True)
    # The leader shrinks the ISR between the controller's read and its write.
    real_multi = cluster.store.multi
    interfered: list[bool] = []

    async def multi(ops: Sequence[Op]) -> list[OpResult]:
        if not interfered and any("/state" in getattr(op, "path", "") for op in ops):
            interfered.append(True)
            await cluster.set_isr("t", (1, 3))
        return await real_multi(ops)

    monkeypatch.setattr(cluster.store, "multi", multi)
    await cluster.deregister(1)
    state = await cluster.wait_state("t", lambda s: s.leader != 1)
    # Elected from the ISR the leader wrote, not from the one the controller first read.
    assert interfered and (state.leader, state.isr, state.leader_epoch) == (3, (3,), 1)


# -- fencing ---------------------------------------------------------------------------


async def test_a_deposed_controllers_writes_are_rejected(cluster: Cluster) -> None:
    await cluster.start(1)
    await cluster.create_topic("t", {0: (1,)})
    before = await cluster.wait_state("t", lambda s: True)
    _, stat = await cluster.store.get(zk.CONTROLLER_EPOCH_PATH)
    stale = ControllerStore(cluster.store, epoch=1, epoch_zk_version=stat.version)
    # Another controller is elected: it bumps the epoch.
    await cluster.store.set(zk.CONTROLLER_EPOCH_PATH, b"2", expected_version=stat.version)
    with pytest.raises(ControllerMovedError):
        await stale.update_state(
            tp("t"), (1,), lambda _, s: PartitionState(-1, s.leader_epoch + 1, s.isr, ())
        )
    assert await cluster.state("t") == before
    # A state already written by a newer controller also stops the old one.
    newer = ControllerStore(cluster.store, epoch=2, epoch_zk_version=stat.version + 1)
    await newer.update_state(tp("t"), (1,), lambda _, s: PartitionState(1, 9, (1,), ()))
    with pytest.raises(ControllerMovedError):
        await stale.read_state(tp("t"), (1,))


async def test_a_controller_whose_epoch_moved_resigns(cluster: Cluster) -> None:
    controller = await cluster.start(1)
    await cluster.start(2)
    await cluster.create_topic("t", {0: (1, 2)})
    await cluster.wait_state("t", lambda s: True)
    _, stat = await cluster.store.get(zk.CONTROLLER_EPOCH_PATH)
    await cluster.store.set(zk.CONTROLLER_EPOCH_PATH, b"7", expected_version=stat.version)
    await cluster.deregister(2)  # the controller acts, and its write is refused
    await eventually(lambda: _true(controller.epoch == 8))
    # It resigned, gave up its stale /controller node and won a new election.
    state = await cluster.wait_state("t", lambda s: 2 not in s.isr)
    assert state.controller_epoch == 8


# -- preferred elections ---------------------------------------------------------------


async def test_elect_leaders_preferred(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (1, 2), 1: (3, 2)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.wait_state("t", lambda s: True, partition=1)
    await cluster.stop(1)
    await cluster.wait_state("t", lambda s: s.leader == 2)
    await cluster.start(1)
    await cluster.wait_state("t", lambda s: s.leader == 2)
    await cluster.set_isr("t", (2, 1))  # 1 caught up
    active = await cluster.wait_active()
    results = await active.elect_leaders(
        [tp("t", 0), tp("t", 1), tp("t", 7), tp("x")], ElectionType.PREFERRED
    )
    assert results[tp("t", 0)] == 1
    assert code(results[tp("t", 1)]) == ErrorCode.election_not_needed
    assert code(results[tp("t", 7)]) == ErrorCode.unknown_topic_or_partition
    assert code(results[tp("x")]) == ErrorCode.unknown_topic_or_partition
    state = await cluster.state("t")
    assert state is not None and (state.leader, state.isr) == (1, (2, 1))
    # The preferred replica must be in the ISR.
    await cluster.stop(3)
    await cluster.wait_state("t", lambda s: s.leader == 2, partition=1)
    await cluster.start(3)
    active = await cluster.wait_active()
    results = await active.elect_leaders([tp("t", 1)], ElectionType.PREFERRED)
    assert code(results[tp("t", 1)]) == ErrorCode.preferred_leader_not_available


async def test_elect_leaders_unclean(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (2, 3), 1: (1, 2)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.set_isr("t", (2,))
    await cluster.stop(2)
    await cluster.wait_state("t", lambda s: s.leader == -1)
    active = await cluster.wait_active()
    results = await active.elect_leaders([tp("t", 0), tp("t", 1)], ElectionType.UNCLEAN)
    assert results[tp("t", 0)] == 3
    assert code(results[tp("t", 1)]) == ErrorCode.election_not_needed
    await cluster.stop(3)
    await cluster.wait_state("t", lambda s: s.leader == -1)
    results = await active.elect_leaders([tp("t", 0)], ElectionType.UNCLEAN)
    assert code(results[tp("t", 0)]) == ErrorCode.eligible_leaders_not_available


async def test_only_the_active_controller_elects(cluster: Cluster) -> None:
    await three_brokers(cluster)
    passive = cluster.controllers[2]
    assert not passive.is_active
    results = await passive.elect_leaders([tp("t")], ElectionType.PREFERRED)
    assert code(results[tp("t")]) == ErrorCode.not_controller


async def test_leadership_returns_to_the_preferred_replica_automatically(
    cluster: Cluster,
) -> None:
    rebalance = {"auto.leader.rebalance.enable": True, "leader.imbalance.check.interval.seconds": 1}
    await three_brokers(cluster, **rebalance)
    await cluster.create_topic("t", {0: (1, 2)})
    await cluster.wait_state("t", lambda s: s.leader == 1)
    await cluster.stop(1)
    await cluster.wait_state("t", lambda s: s.leader == 2)
    await cluster.start(1, **rebalance)
    await cluster.set_isr("t", (2, 1))
    state = await cluster.wait_state("t", lambda s: s.leader == 1)
    assert state.isr == (2, 1)


# -- controlled shutdown ---------------------------------------------------------------


async def test_controlled_shutdown_moves_leadership_and_leaves_isrs(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("led", {0: (1, 2, 3)})
    await cluster.create_topic("followed", {0: (2, 1)})
    await cluster.create_topic("alone", {0: (1,)})
    await cluster.create_topic("stuck", {0: (1, 3)})
    for name in ("led", "followed", "alone", "stuck"):
        await cluster.wait_state(name, lambda s: True)
    await cluster.set_isr("stuck", (1,))
    await cluster.request_shutdown(1)
    led = await cluster.wait_state("led", lambda s: s.leader != 1)
    assert (led.leader, led.isr, led.leader_epoch) == (2, (2, 3), 1)
    followed = await cluster.wait_state("followed", lambda s: 1 not in s.isr)
    assert (followed.leader, followed.isr) == (2, (2,))
    # One replica, or no other ISR member: nothing to move to.
    assert (await cluster.state("alone")) == PartitionState(1, 0, (1,), (), 0, 1)
    stuck = await cluster.state("stuck")
    assert stuck is not None and (stuck.leader, stuck.isr) == (1, (1,))
    # A shutting-down broker is no candidate for other elections either.
    await cluster.create_topic("new", {0: (1, 3)})
    new = await cluster.wait_state("new", lambda s: True)
    assert (new.leader, new.isr) == (3, (3,))


# -- deletion --------------------------------------------------------------------------


async def test_deletion_removes_the_topic_nodes(cluster: Cluster) -> None:
    await three_brokers(cluster)
    await cluster.create_topic("t", {0: (1, 2), 1: (2, 3)})
    await cluster.wait_state("t", lambda s: True, partition=1)
    await cluster.store.create(zk.delete_topic_path("t"))

    async def gone() -> bool:
        paths = (zk.topic_path("t"), zk.topic_config_path("t"), zk.delete_topic_path("t"))
        return all([await cluster.store.exists(p) is None for p in paths])

    await eventually(gone)
    # A request for a topic that does not exist is dropped.
    await cluster.store.create(zk.delete_topic_path("nope"))
    await eventually(lambda: _absent(cluster, zk.delete_topic_path("nope")))


async def _idle(cluster: Cluster) -> bool:
    active = cluster.active()
    return active is not None and not active._lock.locked() and not active._wake.is_set()


async def _absent(cluster: Cluster, path: str) -> bool:
    return await cluster.store.exists(path) is None


async def _true(value: bool) -> bool:
    return value


async def test_an_election_that_fails_on_a_store_error_is_retried(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZooKeeper reports /controller deleted once: an election cut off by a store error
    must be run again by the broker itself, or the cluster stays without a controller."""
    await cluster.start(1)
    second = await cluster.start(2)
    failures = 3
    real_get = cluster.store.get

    async def flaky_get(path: str) -> tuple[bytes, Stat]:
        nonlocal failures
        if path == zk.CONTROLLER_EPOCH_PATH and failures > 0:
            failures -= 1
            raise MetadataStoreError("connection loss")
        return await real_get(path)

    monkeypatch.setattr(cluster.store, "get", flaky_get)
    await cluster.stop(1)
    assert await cluster.wait_active() is second
    assert failures == 0
