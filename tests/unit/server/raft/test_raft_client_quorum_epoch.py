"""BeginQuorumEpoch and EndQuorumEpoch through the client (Kafka's KafkaRaftClientTest):
a new leader is followed at once; a resigning leader names its successors, and the first
of them stands for election without waiting for its fetch timeout."""

from __future__ import annotations

from raft_client_context import LISTENER, RaftClientTestContext, address
from raft_rpcs import (
    answer,
    become_leader,
    begin_quorum_epoch,
    end_quorum_epoch,
    fetch,
    partition_of,
)

from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints


def endpoints_of(node_id: int) -> Endpoints:
    return Endpoints.of({LISTENER: address(node_id)})


async def test_begin_quorum_epoch_makes_a_voter_follow_the_new_leader() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    request = ctx.deliver_request(begin_quorum_epoch(2, 5, voter=1, endpoints=endpoints_of(2)))
    await ctx.poll_until_idle()
    assert partition_of(answer(request)).error_code == ErrorCode.none
    assert ctx.quorum.is_follower and ctx.quorum.epoch == 5 and ctx.quorum.leader_id == 2
    assert ctx.store.writes[-1].leader_id == 2  # durable before it is acted on
    assert ctx.listener.leaders[-1].leader_id == 2
    stale = ctx.deliver_request(begin_quorum_epoch(3, 4, voter=1, endpoints=endpoints_of(3)))
    await ctx.poll_until_idle()
    assert partition_of(answer(stale)).error_code == ErrorCode.fenced_leader_epoch
    assert ctx.quorum.leader_id == 2


async def test_a_resigning_leader_names_its_most_caught_up_voter_first() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    ctx.client.schedule_atomic_append(epoch, [b"a"])
    await ctx.poll()
    end = ctx.client.log_end_offset
    for replica, offset in ((2, end - 1), (3, end)):
        ctx.deliver_request(fetch(replica, epoch, offset, epoch))
    await ctx.poll_until_idle()
    ctx.client.resign(epoch)
    await ctx.poll()
    assert ctx.quorum.is_resigned
    await ctx.poll()
    sent = ctx.sent(54)
    assert sorted(r.destination.id for r in sent) == [2, 3]
    successors = sent[0].data.topics[0].partitions[0].preferred_candidates
    assert [c.candidate_id for c in successors] == [3, 2]


async def test_the_first_successor_stands_for_election_at_once() -> None:
    election = ElectionState.with_elected_leader(4, 2, None, [1, 2, 3])
    ctx = await RaftClientTestContext(1, [1, 2, 3], election=election).start()
    assert ctx.quorum.is_follower
    request = ctx.deliver_request(end_quorum_epoch(2, 4, successors=[1, 3]))
    await ctx.poll_until_idle()
    assert partition_of(answer(request)).error_code == ErrorCode.none
    await ctx.poll()
    assert ctx.quorum.is_prospective  # long before its 2 s fetch timeout


async def test_a_later_successor_waits_its_turn() -> None:
    election = ElectionState.with_elected_leader(4, 2, None, [1, 2, 3])
    ctx = await RaftClientTestContext(1, [1, 2, 3], election=election).start()
    ctx.deliver_request(end_quorum_epoch(2, 4, successors=[3, 1]))
    await ctx.poll_until_idle()
    await ctx.poll()
    assert ctx.quorum.is_follower
    ctx.time.sleep(ctx.client.config.election_backoff_max_ms)
    await ctx.poll()
    assert ctx.quorum.is_prospective


async def test_a_leader_shutting_down_resigns_and_waits_for_a_successor() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    done = ctx.client.shutdown(5000)
    assert ctx.listener.shutting_down
    await ctx.poll(2)
    assert ctx.quorum.is_resigned and not done.done
    assert sorted(r.destination.id for r in ctx.sent(54)) == [2, 3]
    ctx.deliver_request(begin_quorum_epoch(2, epoch + 1, voter=1, endpoints=endpoints_of(2)))
    await ctx.poll_until_idle()
    await ctx.poll()
    assert done.done and not ctx.client.is_running
    assert ctx.quorum.leader_id == 2


async def test_a_shutdown_gives_up_waiting_after_its_timeout() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    done = ctx.client.shutdown(1000)
    await ctx.poll(2)
    assert not done.done
    ctx.time.sleep(1000)
    await ctx.poll()
    failures: list[BaseException | None] = []
    done.when_complete(lambda _, error: failures.append(error))
    assert isinstance(failures[0], TimeoutError) and not ctx.client.is_running
