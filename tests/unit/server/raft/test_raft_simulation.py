"""Raft under a deterministic simulation: seeded message delays, drops, partitions and
crash-restarts of voters and observers, with the invariants of `raft_simulation` checked
after every event and progress required once a majority can talk again.

Each test prints its seeds. TIERCEL_RAFT_SIM_SEEDS=n runs n seeds per test (default 2);
TIERCEL_RAFT_SIM_SEED=s replays the one seed s.
"""

from __future__ import annotations

import os

import pytest
from raft_simulation import Cluster

BASE_SEED = 20_260_000


def seeds() -> list[int]:
    replay = os.environ.get("TIERCEL_RAFT_SIM_SEED")
    if replay:
        return [int(replay)]
    count = int(os.environ.get("TIERCEL_RAFT_SIM_SEEDS", "2"))
    return [BASE_SEED + i for i in range(count)]


async def started(voters: int, observers: int, seed: int) -> Cluster:
    print(f"simulation seed {seed} (replay with TIERCEL_RAFT_SIM_SEED={seed})")
    cluster = Cluster(voters, observers, seed)
    await cluster.start_all()
    cluster.schedule_polling()
    return cluster


async def wait_for_commits(cluster: Cluster, count: int, within_ms: int = 5000) -> None:
    """Every running node applies at least ``count`` more committed records."""
    targets = {
        node_id: len(node.machine.committed) + count for node_id, node in cluster.running.items()
    }

    def reached() -> bool:
        return all(
            len(node.machine.committed) >= targets.get(node_id, count)
            for node_id, node in cluster.running.items()
        )

    await cluster.run_until_true(reached, within_ms, f"{count} more commits on every node")


@pytest.mark.parametrize("seed", seeds())
async def test_elects_a_leader_and_replicates(seed: int) -> None:
    cluster = await started(3, 1, seed)
    cluster.schedule_appends()
    await cluster.run_until_true(lambda: cluster.leader() is not None, 2000, "a leader")
    await wait_for_commits(cluster, 20)
    cluster.invariants.check_logs()


@pytest.mark.parametrize("seed", seeds())
async def test_a_new_leader_after_the_leader_crashes(seed: int) -> None:
    cluster = await started(3, 1, seed)
    cluster.schedule_appends()
    await wait_for_commits(cluster, 10)
    for _ in range(3):
        leader = cluster.leader()
        assert leader is not None
        old_epoch = leader.client.quorum.epoch
        cluster.kill(leader.node_id)
        await cluster.run_until_true(
            lambda e=old_epoch: (n := cluster.leader()) is not None and n.client.quorum.epoch > e,
            3000,
            "a new leader",
        )
        await wait_for_commits(cluster, 5)
        await cluster.start(leader.node_id)
    await wait_for_commits(cluster, 10)
    cluster.invariants.check_logs()


@pytest.mark.parametrize("seed", seeds())
async def test_recovers_after_every_node_crashes(seed: int) -> None:
    cluster = await started(3, 1, seed)
    cluster.schedule_appends()
    await wait_for_commits(cluster, 10)
    for node_id in cluster.node_ids:
        cluster.kill(node_id)
    await cluster.run_for(500)
    await cluster.start_all()
    await wait_for_commits(cluster, 10)
    cluster.invariants.check_logs()


@pytest.mark.parametrize("seed", seeds())
async def test_progress_needs_a_majority(seed: int) -> None:
    cluster = await started(5, 1, seed)
    cluster.schedule_appends()
    await wait_for_commits(cluster, 10)
    leader = cluster.leader()
    assert leader is not None
    # Cut off the leader and one other voter: the other three elect and go on.
    minority = {leader.node_id, next(v for v in cluster.voter_ids if v != leader.node_id)}
    cluster.isolated = set(minority)
    majority_nodes = [n for n in cluster.node_ids if n not in minority]

    def majority_leads() -> bool:
        new = cluster.leader()
        return new is not None and new.node_id in majority_nodes

    await cluster.run_until_true(majority_leads, 3000, "a leader among the majority")
    # The observer may keep asking the cut-off voters (it picks a bootstrap voter at
    # random, and a lost request times out only after request.timeout.ms): a bound, not a
    # fixed time.
    before = {n: len(cluster.running[n].machine.committed) for n in majority_nodes}

    def majority_commits() -> bool:
        return all(len(cluster.running[n].machine.committed) > before[n] for n in majority_nodes)

    await cluster.run_until_true(majority_commits, 5000, "commits on every node of the majority")
    # Now only two voters of five can talk: nothing commits, and the two cut off meanwhile
    # cannot get elected either.
    cluster.isolated = set(cluster.voter_ids[2:])
    await cluster.run_for(300)
    # (A high watermark may become unknown meanwhile: a new state of a new epoch knows
    # none until it learns one, as Kafka's LeaderState; what is applied cannot grow.)
    frozen = {n: len(cluster.running[n].machine.committed) for n in cluster.node_ids}
    await cluster.run_for(1500)
    for node_id, applied in frozen.items():
        assert len(cluster.running[node_id].machine.committed) == applied
    cluster.isolated = set()
    await wait_for_commits(cluster, 10)
    cluster.invariants.check_logs()


@pytest.mark.parametrize("seed", seeds())
async def test_chaos_then_heal(seed: int) -> None:
    """Drops, delays, partitions and crash-restarts at random; once healed, the quorum
    commits again and every node agrees on what is committed."""
    cluster = await started(3, 2, seed)
    cluster.schedule_appends()
    cluster.schedule_snapshots()
    cluster.drop_probability = 0.05
    cluster.max_delay_ms = 20
    rng = cluster.random
    for _ in range(12):
        fault = rng.choice(["crash", "partition", "heal", "nothing"])
        if fault == "crash":
            victim = rng.choice(cluster.node_ids)
            cluster.kill(victim)
            await cluster.run_for(rng.randint(50, 400))
            await cluster.start(victim)
        elif fault == "partition":
            cluster.isolated = {rng.choice(cluster.node_ids)}
        elif fault == "heal":
            cluster.isolated = set()
        await cluster.run_for(rng.randint(100, 400))
    cluster.isolated = set()
    cluster.drop_probability = 0.0
    cluster.max_delay_ms = 5
    await wait_for_commits(cluster, 10, within_ms=10_000)
    cluster.invariants.check_logs()


@pytest.mark.parametrize("seed", seeds())
async def test_a_lagging_follower_catches_up_from_a_snapshot(seed: int) -> None:
    cluster = await started(3, 1, seed)
    cluster.schedule_appends()
    cluster.schedule_snapshots(period_ms=100)
    await wait_for_commits(cluster, 5)
    lagging = next(
        n for n in cluster.voter_ids if cluster.leader() and n != cluster.leader().node_id
    )
    cluster.kill(lagging)
    leader = cluster.leader()
    assert leader is not None

    def leader_log_moved_on() -> bool:
        return (
            leader.state.log.start_offset
            > cluster.persistent[lagging].log.end_offset.message_offset
        )

    await cluster.run_until_true(
        leader_log_moved_on, 5000, "the leader's log start to pass the follower"
    )
    await cluster.start(lagging)
    await wait_for_commits(cluster, 10)
    assert cluster.running[lagging].machine.snapshot_loads >= 1
    cluster.invariants.check_logs()
