"""Fetch through the client (Kafka's KafkaRaftClientTest fetch cases): the leader's high
watermark rule, divergence and truncation, the snapshot id below the log start, the long
poll, and a closing client's answers."""

from __future__ import annotations

from mock_raft_log import MockLog
from raft_client_context import (
    ELECTION_TIMEOUT_MS,
    FETCH_MAX_WAIT_MS,
    RaftClientTestContext,
    node,
)
from raft_rpcs import answer, become_leader, fetch, partition_of
from raft_support import batch

from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raft_poll import poll_current_state
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_iterator import iter_decoded_batches


async def fetched(ctx: RaftClientTestContext, replica: int, offset: int, epoch: int) -> object:
    request = ctx.deliver_request(fetch(replica, ctx.quorum.epoch, offset, epoch))
    await ctx.poll_until_idle()
    return partition_of(answer(request))


async def test_the_high_watermark_needs_a_majority_on_an_entry_of_the_leaders_epoch() -> None:
    log = MockLog()
    log.append_as_leader(batch(0, 1, b"old-0", b"old-1", b"old-2"), 1)
    ctx = await RaftClientTestContext(1, [1, 2, 3], log=log).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    assert epoch == 2 and ctx.client.log_end_offset == 4  # LeaderChangeMessage at 3
    # Voter 2 has all of epoch 1: a majority has offset 3, but no entry of epoch 2 yet.
    assert (await fetched(ctx, 2, 3, 1)).high_watermark == -1
    assert ctx.client.high_watermark is None and ctx.listener.records == []
    # An observer's progress never counts.
    assert (await fetched(ctx, 7, 4, 2)).high_watermark == -1
    # Voter 3 has the epoch's first entry: committed, with everything before it.
    assert (await fetched(ctx, 3, 4, 2)).high_watermark == 4
    assert ctx.client.high_watermark == 4
    assert ctx.listener.records == [b"old-0", b"old-1", b"old-2"]


async def test_a_diverging_follower_is_told_the_end_of_the_epoch_they_share() -> None:
    log = MockLog()
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    log.append_as_leader(batch(2, 3, b"c"), 3)
    ctx = await RaftClientTestContext(1, [1, 2, 3], log=log).start()
    await become_leader(ctx)
    # The follower's offset 5 was written in epoch 2, which this leader never had.
    diverging = (await fetched(ctx, 2, 5, 2)).diverging_epoch
    assert (diverging.epoch, diverging.end_offset) == (1, 2)
    beyond = (await fetched(ctx, 2, 9, 3)).diverging_epoch
    assert (beyond.epoch, beyond.end_offset) == (3, 3)
    valid = await fetched(ctx, 2, 2, 1)
    assert valid.diverging_epoch.epoch == -1 and valid.records


async def test_a_follower_truncates_where_the_leader_says_and_appends_what_it_sends() -> None:
    log = MockLog()
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    log.append_as_leader(batch(2, 2, b"stale-2", b"stale-3"), 2)
    election = ElectionState.with_elected_leader(3, 2, None, [1, 2, 3])
    ctx = await RaftClientTestContext(1, [1, 2, 3], log=log, election=election).start()
    assert ctx.quorum.is_follower
    await ctx.poll()
    (request,) = ctx.sent(1)
    sent = request.data.topics[0].partitions[0]
    assert (sent.fetch_offset, sent.last_fetched_epoch) == (4, 2)
    assert sent.high_watermark == -1  # not known yet (KIP-1166)
    ctx.deliver_response(request, _fetch_response(ctx, 3, 2, diverging=(1, 2)))
    await ctx.poll_until_idle()
    assert ctx.client.log_end_offset == 2 and log.last_fetched_epoch == 1
    await ctx.poll()
    (request,) = ctx.sent(1)
    assert request.data.topics[0].partitions[0].fetch_offset == 2
    ctx.deliver_response(request, _fetch_response(ctx, 3, 2, records=batch(2, 3, b"new"), hw=3))
    await ctx.poll_until_idle()
    assert ctx.client.log_end_offset == 3 and ctx.client.high_watermark == 3
    assert ctx.listener.records == [b"a", b"b", b"new"]
    await ctx.poll()
    (request,) = ctx.sent(1)
    assert request.data.topics[0].partitions[0].high_watermark == 3


def _fetch_response(
    ctx: RaftClientTestContext,
    epoch: int,
    leader: int,
    diverging: tuple[int, int] | None = None,
    records: bytes = b"",
    hw: int = -1,
) -> object:
    partition: dict[str, object] = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "high_watermark": hw,
        "records": records,
        "current_leader": {"leader_epoch": epoch, "leader_id": leader},
    }
    if diverging is not None:
        partition["diverging_epoch"] = {"epoch": diverging[0], "end_offset": diverging[1]}
    return ctx.response(
        1,
        {
            "error_code": ErrorCode.none,
            "responses": [{"topic_id": ctx.log.topic_id, "partitions": [partition]}],
            "node_endpoints": [
                {"node_id": leader, "host": node(leader).host, "port": node(leader).port}
            ],
        },
    )


async def test_a_fetch_below_the_log_start_gets_the_snapshot_id() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    ctx.client.schedule_atomic_append(epoch, [b"x", b"y"])
    await ctx.poll()
    await fetched(ctx, 2, ctx.client.log_end_offset, epoch)
    assert ctx.client.high_watermark == 3
    writer = ctx.client.create_snapshot(OffsetAndEpoch(3, epoch), 0)
    assert writer is not None
    writer.append([b"state"])
    await writer.freeze()
    writer.close()
    assert ctx.log.delete_before_snapshot(OffsetAndEpoch(3, epoch))
    # Below the log start, or empty: start from the snapshot.
    for offset, last_epoch in ((1, epoch), (0, 0)):
        snapshot_id = (await fetched(ctx, 3, offset, last_epoch)).snapshot_id
        assert (snapshot_id.end_offset, snapshot_id.epoch) == (3, epoch)


async def test_a_fetch_at_the_log_end_waits_for_data_or_its_max_wait() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    end = ctx.client.log_end_offset
    parked = ctx.deliver_request(fetch(2, epoch, end, epoch, wait_ms=FETCH_MAX_WAIT_MS))
    await ctx.poll_until_idle()
    assert not parked.completion.done
    ctx.client.schedule_atomic_append(epoch, [b"news"])
    await ctx.poll_until_idle()
    records = partition_of(answer(parked)).records
    assert [r for b in iter_decoded_batches(records, IdentitySerde()) for r in b.records] == [
        b"news"
    ]
    idle = ctx.deliver_request(fetch(3, epoch, end + 1, epoch, wait_ms=FETCH_MAX_WAIT_MS))
    await ctx.poll_until_idle()
    assert not idle.completion.done
    ctx.time.sleep(FETCH_MAX_WAIT_MS)
    await ctx.poll()
    assert partition_of(answer(idle)).error_code == ErrorCode.none


async def test_a_fetch_waits_only_while_its_replica_knows_the_leaders_high_watermark() -> None:
    # KIP-1166: a replica learns a commit at once, not a max wait later. A broker just
    # unfenced otherwise answered Metadata with no broker until its next fetch returned.
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    end = ctx.client.log_end_offset
    assert (await fetched(ctx, 2, end, epoch)).high_watermark == end
    behind = ctx.deliver_request(fetch(7, epoch, end, epoch, FETCH_MAX_WAIT_MS, -1))
    await ctx.poll_until_idle()
    assert partition_of(answer(behind)).high_watermark == end
    # An uncommitted append answers the parked fetches at the old log end with it; the
    # observer, which has it too, waits for the commit.
    ctx.client.schedule_atomic_append(epoch, [b"news"])
    await ctx.poll_until_idle()
    observer = ctx.deliver_request(fetch(7, epoch, end + 1, epoch, FETCH_MAX_WAIT_MS, end))
    unsupported = ctx.deliver_request(fetch(8, epoch, end + 1, epoch, FETCH_MAX_WAIT_MS))
    await ctx.poll_until_idle()
    assert not observer.completion.done and not unsupported.completion.done
    assert (await fetched(ctx, 2, end + 1, epoch)).high_watermark == end + 1
    assert partition_of(answer(observer)).high_watermark == end + 1
    assert partition_of(answer(observer)).records == b""


async def test_a_closing_client_answers_what_it_will_not_handle() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    end = ctx.client.log_end_offset
    parked = ctx.deliver_request(fetch(2, epoch, end, epoch, wait_ms=FETCH_MAX_WAIT_MS))
    await ctx.poll_until_idle()
    queued = ctx.deliver_request(fetch(3, epoch, end, epoch))
    await ctx.client.close()
    assert partition_of(answer(parked)).error_code == ErrorCode.broker_not_available
    assert answer(queued).error_code == ErrorCode.broker_not_available
    late = ctx.deliver_request(fetch(3, epoch, end, epoch))
    assert answer(late).error_code == ErrorCode.broker_not_available


async def test_an_observer_without_a_leader_waits_for_its_fetch_not_its_election_timer() -> None:
    ctx = await RaftClientTestContext(4, [1, 2, 3]).start()
    assert ctx.quorum.is_observer and ctx.quorum.is_unattached
    ctx.time.sleep(10 * ELECTION_TIMEOUT_MS)
    assert await poll_current_state(ctx.client, ctx.time.milliseconds()) > 0
    (request,) = ctx.sent(1)
    assert request.destination.id in (1, 2, 3)
    assert await poll_current_state(ctx.client, ctx.time.milliseconds()) > 0
    assert ctx.quorum.is_unattached
