"""Leader election algorithms, ISR removal, reassignment arithmetic and leader balance as
pure functions: Kafka's rules, checked on examples and as properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.server.controller import election
from tiercel.server.controller.leader_balance import partitions_to_rebalance
from tiercel.server.controller.replica_assignment import ReplicaAssignment
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

BROKERS = st.integers(min_value=1, max_value=6)


def state(leader: int, isr: tuple[int, ...], epoch: int = 3) -> PartitionState:
    return PartitionState(leader, epoch, isr, (), partition_epoch=7, controller_epoch=1)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[tuple[int, ...], PartitionState, frozenset[int]]:
    """An assignment, a state whose ISR is a non-empty subset of it, and live brokers."""
    assignment = tuple(draw(st.lists(BROKERS, min_size=1, max_size=5, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(assignment), min_size=1, unique=True)))
    leader = draw(st.sampled_from((*isr, -1)))
    live = frozenset(draw(st.lists(BROKERS, unique=True)))
    return assignment, state(leader, isr), live


# -- offline election ------------------------------------------------------------------


def test_offline_election_takes_the_first_live_isr_member_in_assignment_order() -> None:
    result = election.elect_offline(state(1, (3, 1, 2)), (1, 2, 3), {2, 3}, unclean=False)
    assert result == state(2, (3, 2), epoch=4)


def test_offline_election_without_live_isr_member_fails_unless_unclean() -> None:
    old = state(1, (1,))
    assert election.elect_offline(old, (1, 2, 3), {3, 2}, unclean=False) is None
    assert election.elect_offline(old, (1, 2, 3), {3, 2}, unclean=True) == state(2, (2,), 4)
    assert election.elect_offline(old, (1, 2, 3), set(), unclean=True) is None


@settings(max_examples=200)
@given(partitions(), st.booleans())
def test_offline_election_properties(
    p: tuple[tuple[int, ...], PartitionState, frozenset[int]], unclean: bool
) -> None:
    assignment, old, live = p
    new = election.elect_offline(old, assignment, live, unclean)
    live_isr = [r for r in assignment if r in live and r in old.isr]
    if new is None:
        assert not live_isr
        assert not unclean or not any(r in live for r in assignment)
        return
    assert new.leader in live and new.leader_epoch == old.leader_epoch + 1
    assert new.leader in new.isr and set(new.isr) <= live
    if live_isr:
        assert new.leader == live_isr[0]
        assert new.isr == tuple(r for r in old.isr if r in live)
    else:
        assert unclean and new.isr == (new.leader,)
        assert new.leader == next(r for r in assignment if r in live)


# -- other strategies ------------------------------------------------------------------


def test_preferred_election_needs_the_first_replica_live_and_in_sync() -> None:
    assert election.elect_preferred(state(2, (1, 2)), (1, 2), {1, 2}) == state(1, (1, 2), 4)
    assert election.elect_preferred(state(2, (2,)), (1, 2), {1, 2}) is None
    assert election.elect_preferred(state(2, (1, 2)), (1, 2), {2}) is None


def test_reassignment_election_picks_from_the_target_and_keeps_the_isr() -> None:
    old = state(1, (1, 2, 3, 4))
    assert election.elect_reassigned(old, (4, 3), {1, 2, 3, 4}) == state(4, (1, 2, 3, 4), 4)
    assert election.elect_reassigned(old, (5, 3), {1, 2, 3}) == state(3, (1, 2, 3, 4), 4)
    assert election.elect_reassigned(state(1, (1,)), (5,), {1, 5}) is None


@settings(max_examples=200)
@given(partitions(), st.sets(BROKERS, min_size=1))
def test_controlled_shutdown_election_properties(
    p: tuple[tuple[int, ...], PartitionState, frozenset[int]], shutting_down: set[int]
) -> None:
    assignment, old, live = p
    registered = live | shutting_down
    new = election.elect_controlled_shutdown(old, assignment, registered, shutting_down)
    eligible = [
        r for r in assignment if r in registered and r in old.isr and r not in shutting_down
    ]
    if new is None:
        assert not eligible
        return
    assert new.leader == eligible[0] and new.leader_epoch == old.leader_epoch + 1
    assert new.isr == tuple(r for r in old.isr if r not in shutting_down)


# -- ISR removal -----------------------------------------------------------------------


def test_removing_the_leader_leaves_the_partition_leaderless() -> None:
    assert election.remove_replicas_from_isr(state(1, (1, 2)), [1]) == state(-1, (2,), 4)


def test_the_last_isr_member_stays() -> None:
    assert election.remove_replicas_from_isr(state(1, (1,)), [1]) == state(-1, (1,), 4)
    assert election.remove_replicas_from_isr(state(1, (1, 2)), [1, 2]) == state(-1, (2,), 4)


def test_removing_a_replica_outside_the_isr_changes_nothing() -> None:
    assert election.remove_replicas_from_isr(state(1, (1, 2)), [3]) is None
    assert election.remove_replicas_from_isr(state(-1, (2,)), [2]) is None


@settings(max_examples=200)
@given(partitions(), st.lists(BROKERS, unique=True))
def test_isr_removal_properties(
    p: tuple[tuple[int, ...], PartitionState, frozenset[int]], removed: list[int]
) -> None:
    _, old, _ = p
    new = election.remove_replicas_from_isr(old, removed) or old
    assert new.isr and set(new.isr) <= set(old.isr)
    assert new.leader in (old.leader, -1) and new.leader not in removed
    survivors = [r for r in old.isr if r not in removed]
    assert list(new.isr) == survivors or (not survivors and len(new.isr) == 1)
    assert new.leader_epoch in (old.leader_epoch, old.leader_epoch + 1)


# -- reassignment arithmetic -----------------------------------------------------------


def test_reassign_to_lists_the_target_first_then_the_originals() -> None:
    moving = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 5))
    assert moving == ReplicaAssignment((4, 2, 5, 1, 3), adding=(4, 5), removing=(1, 3))
    assert moving.origin_replicas == (2, 1, 3)
    assert moving.target_replicas == (4, 2, 5)
    # A new target replaces the old one; the originals stay the originals.
    again = moving.reassign_to((6,))
    assert again == ReplicaAssignment((6, 2, 1, 3), adding=(6,), removing=(2, 1, 3))
    assert not ReplicaAssignment((1, 2)).reassign_to((2, 1)).is_being_reassigned


@settings(max_examples=200)
@given(
    st.lists(BROKERS, min_size=1, max_size=4, unique=True),
    st.lists(BROKERS, min_size=1, max_size=4, unique=True),
)
def test_reassign_to_properties(origin: list[int], target: list[int]) -> None:
    moving = ReplicaAssignment(tuple(origin)).reassign_to(tuple(target))
    assert moving.target_replicas == tuple(target)
    assert set(moving.origin_replicas) == set(origin)
    assert not set(moving.adding) & set(moving.removing)
    assert moving.replicas[: len(target)] == tuple(target)


# -- leader balance --------------------------------------------------------------------


def test_rebalance_moves_a_brokers_partitions_back_past_the_imbalance_threshold() -> None:
    tps = [TopicPartition("t", p) for p in range(4)]
    assignments = {tp: (1, 2) for tp in tps}
    led_by_2 = {tp: state(2, (1, 2)) for tp in tps[:1]}
    led_by_1 = {tp: state(1, (1, 2)) for tp in tps[1:]}
    states = {**led_by_2, **led_by_1}
    # 1 of 4 (25 %) elsewhere: above 10 %, below 30 %.
    assert partitions_to_rebalance(assignments, states, {1, 2}, 10) == {tps[0]: (1, 2)}
    assert partitions_to_rebalance(assignments, states, {1, 2}, 30) == {}
    # The preferred replica must be live and in the ISR.
    assert partitions_to_rebalance(assignments, states, {2}, 10) == {}
    out_of_sync = {**states, tps[0]: state(2, (2,))}
    assert partitions_to_rebalance(assignments, out_of_sync, {1, 2}, 10) == {}
