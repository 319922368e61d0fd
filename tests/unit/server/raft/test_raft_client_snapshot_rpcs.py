"""FetchSnapshot and DescribeQuorum through the client: the leader serves a snapshot in
chunks; a follower told to start from one downloads it chunk by chunk, empties its log
at it and hands it to its listener; the leader describes its quorum, others refuse."""

from __future__ import annotations

from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from raft_client_context import RaftClientTestContext, node
from raft_rpcs import TP, answer, become_leader, fetch, fetch_snapshot, partition_of

from tiercel.protocol.entities import build_entity
from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raft_util import RESPONSE_TYPES


async def leader_with_snapshot(ctx: RaftClientTestContext) -> tuple[OffsetAndEpoch, bytes]:
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    ctx.client.schedule_atomic_append(epoch, [b"x", b"y"])
    await ctx.poll()
    end = ctx.client.log_end_offset
    ctx.deliver_request(fetch(2, epoch, end, epoch))
    await ctx.poll_until_idle()
    snapshot_id = OffsetAndEpoch(end, epoch)
    writer = ctx.client.create_snapshot(snapshot_id, 0)
    assert writer is not None
    writer.append([b"state-%d" % i for i in range(50)])
    await writer.freeze()
    writer.close()
    reader = ctx.log.read_snapshot(snapshot_id)
    assert reader is not None
    return snapshot_id, bytes(reader.slice(0, reader.size_in_bytes))


async def test_the_leader_serves_a_snapshot_in_chunks() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    snapshot_id, data = await leader_with_snapshot(ctx)
    epoch = ctx.quorum.epoch
    got = b""
    while len(got) < len(data):
        request = ctx.deliver_request(fetch_snapshot(3, epoch, snapshot_id, len(got), 100))
        await ctx.poll_until_idle()
        partition = answer(request).topics[0].partitions[0]
        assert partition.error_code == ErrorCode.none and partition.size == len(data)
        assert 0 < len(partition.unaligned_records) <= 100
        got += partition.unaligned_records
    assert got == data
    for snapshot, position, error in (
        (OffsetAndEpoch(1, epoch), 0, ErrorCode.snapshot_not_found),
        (snapshot_id, len(data), ErrorCode.position_out_of_range),
    ):
        request = ctx.deliver_request(fetch_snapshot(3, epoch, snapshot, position, 100))
        await ctx.poll_until_idle()
        assert answer(request).topics[0].partitions[0].error_code == error


async def test_a_follower_downloads_the_snapshot_and_loads_it() -> None:
    source = await RaftClientTestContext(1, [1, 2, 3]).start()
    snapshot_id, data = await leader_with_snapshot(source)
    election = ElectionState.with_elected_leader(snapshot_id.epoch, 1, None, [1, 2, 3])
    ctx = await RaftClientTestContext(2, [1, 2, 3], election=election).start()
    await ctx.poll()
    (request,) = ctx.sent(1)
    partition = {
        "partition_index": 0,
        "high_watermark": snapshot_id.offset,
        "current_leader": {"leader_epoch": snapshot_id.epoch, "leader_id": 1},
        "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
    }
    leader = node(1)
    response = ctx.response(
        1,
        {
            "responses": [{"topic_id": ctx.log.topic_id, "partitions": [partition]}],
            "node_endpoints": [{"node_id": 1, "host": leader.host, "port": leader.port}],
        },
    )
    ctx.deliver_response(request, response)
    await ctx.poll_until_idle()
    position = 0
    while position < len(data):
        await ctx.poll()
        (request,) = ctx.sent(59)
        asked = request.data.topics[0].partitions[0]
        assert asked.position == position
        chunk = data[position : position + 64]
        snapshot = {
            "index": 0,
            "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
            "current_leader": {"leader_epoch": snapshot_id.epoch, "leader_id": 1},
            "size": len(data),
            "position": position,
            "unaligned_records": chunk,
        }
        ctx.deliver_response(
            request,
            ctx.response(59, {"topics": [{"name": TP.topic, "partitions": [snapshot]}]}),
        )
        await ctx.poll_until_idle()
        position += len(chunk)
    assert ctx.log.latest_snapshot_id() == snapshot_id
    assert ctx.client.log_end_offset == snapshot_id.offset == ctx.log.start_offset
    (loaded_id, records) = ctx.listener.snapshots[-1]
    assert loaded_id == snapshot_id and records == [b"state-%d" % i for i in range(50)]


def describe_quorum() -> DescribeQuorumRequest:
    return build_entity(
        DescribeQuorumRequest,
        {"topics": [{"topic_name": TP.topic, "partitions": [{"partition_index": 0}]}]},
    )


async def test_the_leader_describes_its_quorum() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    request = ctx.deliver_request(describe_quorum())
    await ctx.poll_until_idle()
    assert partition_of(answer(request)).error_code == ErrorCode.not_leader_or_follower
    await become_leader(ctx)
    epoch = ctx.quorum.epoch
    end = ctx.client.log_end_offset
    for replica in (2, 7):
        ctx.deliver_request(fetch(replica, epoch, end, epoch))
    await ctx.poll_until_idle()
    request = ctx.deliver_request(describe_quorum())
    await ctx.poll_until_idle()
    response = answer(request)
    described = partition_of(response)
    assert (described.leader_id, described.leader_epoch) == (1, epoch)
    assert described.high_watermark == end
    ends = {v.replica_id: v.log_end_offset for v in described.current_voters}
    assert ends == {1: end, 2: end, 3: -1}
    assert [(o.replica_id, o.log_end_offset) for o in described.observers] == [(7, end)]
    assert sorted(n.node_id for n in response.nodes) == [1, 2, 3]
    assert type(response) is RESPONSE_TYPES[55]
