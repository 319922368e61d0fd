"""Vote through the client (Kafka's KafkaRaftClientTest vote cases): one vote per epoch,
durable before it is answered; a candidate whose log is behind loses; a PreVote bumps
nothing and is never persisted."""

from __future__ import annotations

from mock_raft_log import MockLog
from raft_client_context import RaftClientTestContext
from raft_rpcs import answer, become_leader, partition_of, vote
from raft_support import batch

from tiercel.protocol.errors import ErrorCode


async def test_a_voter_grants_one_vote_per_epoch() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    first = ctx.deliver_request(vote(2, 1, 0, 0, voter=1))
    await ctx.poll_until_idle()
    assert partition_of(answer(first)).vote_granted
    durable = ctx.store.writes[-1]
    assert durable.epoch == 1 and durable.voted_key is not None and durable.voted_key.id == 2
    # Another candidate of the same epoch is refused, the same one granted again.
    other = ctx.deliver_request(vote(3, 1, 0, 0, voter=1))
    again = ctx.deliver_request(vote(2, 1, 0, 0, voter=1))
    await ctx.poll_until_idle()
    assert not partition_of(answer(other)).vote_granted
    assert partition_of(answer(again)).vote_granted
    # A later epoch is a new election.
    later = ctx.deliver_request(vote(3, 2, 0, 0, voter=1))
    await ctx.poll_until_idle()
    assert partition_of(answer(later)).vote_granted
    assert ctx.store.writes[-1].voted_key.id == 3
    stale = ctx.deliver_request(vote(2, 1, 0, 0, voter=1))
    await ctx.poll_until_idle()
    assert partition_of(answer(stale)).error_code == ErrorCode.fenced_leader_epoch


async def test_a_candidate_whose_log_is_behind_loses() -> None:
    log = MockLog()
    log.append_as_leader(batch(0, 1, b"a", b"b", b"c"), 1)
    ctx = await RaftClientTestContext(1, [1, 2, 3], log=log).start()
    assert ctx.quorum.epoch == 1  # the log's epoch wins over an empty quorum-state
    shorter = ctx.deliver_request(vote(2, 2, 1, 2, voter=1))
    older_epoch = ctx.deliver_request(vote(2, 2, 0, 10, voter=1))
    await ctx.poll_until_idle()
    assert not partition_of(answer(shorter)).vote_granted
    assert not partition_of(answer(older_epoch)).vote_granted
    assert ctx.store.writes[-1].voted_key is None
    # As long as ours (last epoch first, then offset) wins.
    as_long = ctx.deliver_request(vote(3, 2, 1, 3, voter=1))
    await ctx.poll_until_idle()
    assert partition_of(answer(as_long)).vote_granted


async def test_a_prevote_changes_nothing_durable() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    writes = len(ctx.store.writes)
    request = ctx.deliver_request(vote(2, 0, 0, 0, voter=1, pre_vote=True))
    await ctx.poll_until_idle()
    assert partition_of(answer(request)).vote_granted
    assert ctx.quorum.epoch == 0 and len(ctx.store.writes) == writes


async def test_a_leader_refuses_votes_in_its_epoch() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    same = ctx.deliver_request(vote(2, ctx.quorum.epoch, 0, 0, voter=1))
    await ctx.poll_until_idle()
    refused = partition_of(answer(same))
    assert not refused.vote_granted and refused.leader_id == 1
