"""FetchSnapshot (KIP-630; Kafka's KafkaRaftClient.handleFetchSnapshotRequest and
handleFetchSnapshotResponse): a follower whose Fetch answer named a snapshot downloads
it in chunks, from position 0, into a ``.checkpoint.part`` file, freezes it once the
last byte arrived, and empties its log at the snapshot's end offset. The bootstrap
checkpoint (0, 0) is never sent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from kio.schema.fetch_snapshot.v1.request import FetchSnapshotRequest
from kio.schema.fetch_snapshot.v1.response import FetchSnapshotResponse

from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raft_message import InboundRequest, InboundResponse
from tiercel.server.raft.raft_util import (
    error_response,
    fetch_snapshot_request,
    fetch_snapshot_response,
)
from tiercel.server.raft.raw_snapshot import RawSnapshotWriter
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.snapshots import BOOTSTRAP_SNAPSHOT_ID

if TYPE_CHECKING:
    from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = [
    "FETCH_SNAPSHOT",
    "build_fetch_snapshot_request",
    "handle_fetch_snapshot_request",
    "handle_fetch_snapshot_response",
]

FETCH_SNAPSHOT: Final = 59
MAX_FETCH_SIZE_BYTES: Final = 8 * 1024 * 1024
_log: Final = logging.getLogger("tiercel.raft")


def build_fetch_snapshot_request(
    client: KafkaRaftClient[Any], snapshot: RawSnapshotWriter
) -> FetchSnapshotRequest:
    """The next chunk: from what the partial file already holds."""
    quorum = client.quorum
    return fetch_snapshot_request(
        client.cluster_id,
        ReplicaKey(quorum.local_id_or_sentinel, quorum.local_directory_id),
        client.log.topic_partition,
        quorum.epoch,
        snapshot.snapshot_id,
        MAX_FETCH_SIZE_BYTES,
        snapshot.size_in_bytes,
    )


async def handle_fetch_snapshot_request(
    client: KafkaRaftClient[Any], request: InboundRequest, now: int
) -> FetchSnapshotResponse:
    data: FetchSnapshotRequest = request.data
    tp = client.log.topic_partition
    quorum = client.quorum
    if not client.has_valid_cluster_id(data.cluster_id):
        return error_response(FETCH_SNAPSHOT, ErrorCode.inconsistent_cluster_id)  # type: ignore[no-any-return]
    if len(data.topics) != 1 or len(data.topics[0].partitions) != 1:
        return error_response(FETCH_SNAPSHOT, ErrorCode.invalid_request)  # type: ignore[no-any-return]
    topic = data.topics[0]
    snapshot_request = topic.partitions[0]

    def respond(error: ErrorCode, **fields: Any) -> FetchSnapshotResponse:
        partition = {
            "error_code": error,
            "current_leader": {
                "leader_epoch": quorum.epoch,
                "leader_id": quorum.leader_id_or_sentinel,
            },
            **fields,
        }
        return fetch_snapshot_response(
            request.listener_name,
            tp,
            quorum.leader_id_or_sentinel,
            quorum.leader_endpoints,
            partition,
        )

    if topic.name != tp.topic or snapshot_request.partition != tp.partition:
        return respond(ErrorCode.unknown_topic_or_partition)
    error = client.validate_leader_only_request(snapshot_request.current_leader_epoch)
    if error != ErrorCode.none:
        return respond(error)
    requested = snapshot_request.snapshot_id
    snapshot_id = OffsetAndEpoch(requested.end_offset, requested.epoch)
    snapshot = client.log.read_snapshot(snapshot_id)
    if snapshot is None or snapshot_id == BOOTSTRAP_SNAPSHOT_ID:
        # The first leader put the bootstrap checkpoint's content in the log.
        return respond(ErrorCode.snapshot_not_found)
    size = snapshot.size_in_bytes
    position = snapshot_request.position
    if position < 0 or position >= size:
        return respond(ErrorCode.position_out_of_range)
    chunk = snapshot.slice(position, min(data.max_bytes, size))
    client.quorum.leader_state().update_check_quorum_for_following_voter(
        ReplicaKey.of(data.replica_id, snapshot_request.replica_directory_id), now
    )
    return respond(
        ErrorCode.none,
        snapshot_id={"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
        size=size,
        position=position,
        unaligned_records=chunk,
    )


async def handle_fetch_snapshot_response(
    client: KafkaRaftClient[Any], response: InboundResponse, now: int
) -> bool:
    data: FetchSnapshotResponse = response.data
    tp = client.log.topic_partition
    if data.error_code != ErrorCode.none:
        return client.handle_top_level_error(data.error_code, response)
    if len(data.topics) != 1 or len(data.topics[0].partitions) != 1:
        return False
    topic = data.topics[0]
    partition = topic.partitions[0]
    if topic.name != tp.topic or partition.index != tp.partition:
        return False
    leader = partition.current_leader
    leader_id = leader.leader_id if leader.leader_id >= 0 else None
    endpoints = Endpoints()
    if leader_id is not None:
        endpoints = client.leader_endpoints_from(leader_id, data.node_endpoints)
    handled = await client.maybe_handle_common_response(
        partition.error_code, leader_id, leader.leader_epoch, endpoints, now
    )
    if handled is not None:
        return handled
    state = client.quorum.follower_state()
    snapshot_id = partition.snapshot_id
    if (
        partition.error_code == ErrorCode.snapshot_not_found
        or snapshot_id.end_offset < 0
        or snapshot_id.epoch < 0
    ):
        # The leader deleted it meanwhile: start over with a Fetch.
        _log.info("leader no longer has snapshot %s (%s)", snapshot_id, partition.error_code.name)
        state.set_fetching_snapshot(None)
        state.reset_fetch_timeout_for_successful_fetch(now)
        return True
    if partition.error_code != ErrorCode.none:
        return client.handle_unexpected_error(partition.error_code, response)
    await _append_chunk(
        client, partition, OffsetAndEpoch(snapshot_id.end_offset, snapshot_id.epoch)
    )
    state.reset_fetch_timeout_for_successful_fetch(now)
    return True


async def _append_chunk(
    client: KafkaRaftClient[Any], partition: Any, snapshot_id: OffsetAndEpoch
) -> None:
    state = client.quorum.follower_state()
    snapshot = state.fetching_snapshot
    if snapshot is None:
        raise RuntimeError(f"Received unexpected fetch snapshot response: {partition}")
    if snapshot.snapshot_id != snapshot_id:
        raise RuntimeError(
            "Received fetch snapshot response with an invalid id. Expected "
            f"{snapshot.snapshot_id}; Received {snapshot_id}"
        )
    if snapshot.size_in_bytes != partition.position:
        raise RuntimeError(
            "Received fetch snapshot response with an invalid position. Expected "
            f"{snapshot.size_in_bytes}; Received {partition.position}"
        )
    snapshot.append(partition.unaligned_records or b"")
    if snapshot.size_in_bytes != partition.size:
        return
    await snapshot.freeze()
    state.set_fetching_snapshot(None)
    if not client.log.truncate_to_latest_snapshot():
        raise RuntimeError(
            f"Full log truncation expected but didn't happen. Snapshot of {snapshot_id}, log "
            f"end offset {client.log.end_offset.message_offset}, last fetched "
            f"{client.log.last_fetched_epoch}"
        )
    _log.info("emptied the log at downloaded snapshot %s", snapshot_id)
    # The log now starts past the control records read so far: reload them from the
    # snapshot (Kafka's handleFetchSnapshotResponse calls partitionState.updateState).
    client.partition_state.update_state()
    client.update_follower_high_watermark(client.log.high_watermark.message_offset)
