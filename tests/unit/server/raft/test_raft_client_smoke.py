from __future__ import annotations

from raft_client_context import RaftClientTestContext


async def test_single_voter_elects_itself_and_commits() -> None:
    ctx = await RaftClientTestContext(1, [1]).start()
    assert ctx.quorum.is_leader and ctx.quorum.epoch == 1
    await ctx.poll(2)
    offset = ctx.client.schedule_atomic_append(1, [b"a", b"b"])
    assert offset == 2
    await ctx.poll(3)
    assert ctx.client.high_watermark == 3
    assert ctx.listener.records == [b"a", b"b"]
