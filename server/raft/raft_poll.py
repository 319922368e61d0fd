"""What each state does when the Raft client polls (Kafka's KafkaRaftClient.pollLeader,
pollCandidate, pollProspective, pollFollower, pollUnattached, pollResigned): send the
requests the state needs, time out elections and fetches. Each returns how long the
client may wait before polling again.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

from tiercel.server.raft.batch import Batch
from tiercel.server.raft.batch_accumulator import CompletedBatch
from tiercel.server.raft.endpoints import Node
from tiercel.server.raft.follower_state import FollowerState
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.nominee_state import NomineeState
from tiercel.server.raft.raft_fetch import build_fetch_request
from tiercel.server.raft.raft_fetch_snapshot import build_fetch_snapshot_request
from tiercel.server.raft.raft_quorum_epoch import (
    build_begin_quorum_epoch_request,
    build_end_quorum_epoch_request,
)
from tiercel.server.raft.raft_vote import build_vote_request
from tiercel.server.raft.threshold_purgatory import NO_DEADLINE

if TYPE_CHECKING:
    from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = ["poll_current_state"]

_NEVER: Final = NO_DEADLINE


async def poll_current_state(client: KafkaRaftClient[Any], now: int) -> int:
    quorum = client.quorum
    if quorum.is_leader:
        return await _poll_leader(client, now)
    if quorum.is_candidate:
        return await _poll_nominee(client, now, pre_vote=False)
    if quorum.is_prospective:
        return await _poll_nominee(client, now, pre_vote=True)
    if quorum.is_follower:
        return await _poll_follower(client, now)
    if quorum.is_unattached:
        return await _poll_unattached(client, now)
    if quorum.is_resigned:
        return await _poll_resigned(client, now)
    raise RuntimeError(f"Unexpected quorum state {quorum.state}")


# -- leader ------------------------------------------------------------------------------


async def _poll_leader(client: KafkaRaftClient[Any], now: int) -> int:
    state: LeaderState[Any] = client.quorum.leader_state()
    client.maybe_fire_leader_change(state)
    check_quorum = state.time_until_check_quorum_expires(now)
    if client.shutdown_state is not None or state.resign_requested or check_quorum == 0:
        client.transition_to_resigned(state.non_leader_voters_by_descending_fetch_offset())
        return 0
    until_drain = await _maybe_append_batches(client, state, now)
    until_begin_epoch = _maybe_send_begin_quorum_epoch_requests(client, state, now)
    return min(until_drain, until_begin_epoch, check_quorum)


async def _maybe_append_batches(
    client: KafkaRaftClient[Any], state: LeaderState[Any], now: int
) -> int:
    accumulator = state.accumulator
    if accumulator.time_until_drain(now) <= 0:
        batches = accumulator.drain()
        for batch in batches:
            _append_batch(client, state, batch)
        if batches:
            # Parked fetches may go as soon as the end moves; the flush follows, and no
            # follower's acknowledgement is handled before it completes.
            client.update_leader_end_offset(state, now)
            await client.log.flush(False)
    return accumulator.time_until_drain(now)


def _append_batch(
    client: KafkaRaftClient[Any], state: LeaderState[Any], batch: CompletedBatch[Any]
) -> None:
    info = client.log.append_as_leader(batch.data, state.epoch)
    records = batch.records
    if records is None:
        # A control batch may hold a KRaftVersionRecord or a VotersRecord, which count
        # from their append (Kafka's appendAsLeader updates partitionState); data
        # batches are read past lazily, on the next update.
        client.partition_state.update_state()
        return
    committed = Batch(
        batch.base_offset,
        state.epoch,
        batch.append_timestamp,
        batch.size_in_bytes,
        info.last_offset,
        records,
    )

    def on_commit(_: int | None, error: BaseException | None) -> None:
        if error is None:
            client.maybe_fire_handle_commit(committed)

    client.append_purgatory.await_(info.last_offset + 1, _NEVER, on_commit)


def _maybe_send_begin_quorum_epoch_requests(
    client: KafkaRaftClient[Any], state: LeaderState[Any], now: int
) -> int:
    until = state.time_until_begin_quorum_epoch_timer_expires(now)
    if until == 0:
        until = _NEVER
        local_id = client.quorum.local_replica_key.id
        for key in client.voters.voter_keys:
            if key.id == local_id:
                continue
            node = _voter_node(client, key.id)
            request = functools.partial(build_begin_quorum_epoch_request, client, key)
            until = min(until, client.maybe_send_request(now, node, request))
        state.reset_begin_quorum_epoch_timer(now)
    return until


def _voter_node(client: KafkaRaftClient[Any], voter_id: int) -> Node:
    node = client.voters.voter_node(voter_id, client.channel.listener_name)
    if node is None:
        raise RuntimeError(
            f"Unknown endpoint for voter id {voter_id} for listener name "
            f"{client.channel.listener_name}"
        )
    return node


async def _poll_resigned(client: KafkaRaftClient[Any], now: int) -> int:
    quorum = client.quorum
    state = quorum.resigned_state()
    until_end_epoch = _NEVER
    for node in client.voters.voter_nodes(state.unacked_voters, client.channel.listener_name):
        until_end_epoch = min(
            until_end_epoch,
            client.maybe_send_request(
                now,
                node,
                lambda: build_end_quorum_epoch_request(client, state.preferred_successors),
            ),
        )
    shutdown = client.shutdown_state
    if shutdown is not None:
        # Resigned until the shutdown times out or an election bumps the epoch.
        timeout = shutdown.remaining_time_ms(now)
    elif state.has_election_timeout_expired(now):
        await client.transition_to_unattached(quorum.epoch + 1)
        timeout = 0
    else:
        timeout = state.remaining_election_time_ms(now)
    return min(timeout, until_end_epoch)


# -- nominees ----------------------------------------------------------------------------


async def _poll_nominee(client: KafkaRaftClient[Any], now: int, pre_vote: bool) -> int:
    """A prospective asks for PreVotes, a candidate for votes, until a majority grants
    or it loses or times out."""
    state: NomineeState = client.quorum.nominee_state()
    shutdown = client.shutdown_state
    if shutdown is not None:
        # Carry on with the election: elected, it can resign; another may win meanwhile.
        return min(
            shutdown.remaining_time_ms(now), _send_vote_requests(client, state, now, pre_vote)
        )
    if state.epoch_election.is_vote_rejected or state.has_election_timeout_expired(now):
        if pre_vote:
            await client.prospective_transition_after_election_loss(
                client.quorum.prospective_state(), now
            )
        else:
            await client.transition_to_prospective(now)
        return 0
    backoff = _send_vote_requests(client, state, now, pre_vote)
    return min(backoff, state.remaining_election_time_ms(now))


def _send_vote_requests(
    client: KafkaRaftClient[Any], state: NomineeState, now: int, pre_vote: bool
) -> int:
    if state.epoch_election.is_vote_rejected:
        return _NEVER
    until = _NEVER
    for key in state.epoch_election.unrecorded_voters:
        node = _voter_node(client, key.id)
        request = functools.partial(build_vote_request, client, key, pre_vote)
        until = min(until, client.maybe_send_request(now, node, request))
    return until


# -- followers and unattached --------------------------------------------------------------


async def _poll_follower(client: KafkaRaftClient[Any], now: int) -> int:
    quorum = client.quorum
    state = quorum.follower_state()
    if not quorum.is_voter:
        if state.has_fetch_timeout_expired(now):
            return _send_fetch_to_any_bootstrap(client, now)
        return _send_fetch_to_best_node(client, state, now)
    if client.shutdown_state is not None:
        return 0  # a follower shuts down at once
    if state.has_fetch_timeout_expired(now):
        await client.transition_to_prospective(now)
        return 0
    backoff = _send_fetch_to_best_node(client, state, now)
    return min(backoff, state.remaining_fetch_time_ms(now))


def _send_fetch_to_best_node(client: KafkaRaftClient[Any], state: FollowerState, now: int) -> int:
    """Fetch from the leader; while it times out or backs off, ask a bootstrap server
    whether the leader changed."""
    manager = client.request_manager
    leader = state.leader_node(client.channel.listener_name)
    if manager.has_request_timed_out(leader, now):
        manager.reset(leader)
        backoff = _send_fetch_to_any_bootstrap(client, now)
    elif manager.is_backing_off(leader, now):
        backoff = _send_fetch_to_any_bootstrap(client, now)
    elif not manager.has_any_inflight_request(now):
        snapshot = state.fetching_snapshot
        if snapshot is not None:
            backoff = client.maybe_send_request(
                now, leader, lambda: build_fetch_snapshot_request(client, snapshot)
            )
        else:
            backoff = client.maybe_send_request(now, leader, lambda: build_fetch_request(client))
    else:
        backoff = manager.backoff_before_available_bootstrap_server(now)
    return min(backoff, state.remaining_fetch_time_ms(now))


def _send_fetch_to_any_bootstrap(client: KafkaRaftClient[Any], now: int) -> int:
    node = client.request_manager.find_ready_bootstrap_server(now)
    if node is None:
        return client.request_manager.backoff_before_available_bootstrap_server(now)
    return client.maybe_send_request(now, node, lambda: build_fetch_request(client))


async def _poll_unattached(client: KafkaRaftClient[Any], now: int) -> int:
    quorum = client.quorum
    state = quorum.unattached_state()
    if quorum.is_voter:
        shutdown = client.shutdown_state
        if shutdown is not None:
            return shutdown.remaining_time_ms(now)
        if state.has_election_timeout_expired(now):
            await client.transition_to_prospective(now)
            return 0
        backoff = _send_fetch_to_any_bootstrap(client, now)
        return min(backoff, state.remaining_election_time_ms(now))
    # An observer never acts on its election timer (Kafka's pollUnattachedAsObserver
    # still waits for it, which, once it has run out at start, polls without waiting
    # until a leader is known): only its fetch backoff.
    return _send_fetch_to_any_bootstrap(client, now)
