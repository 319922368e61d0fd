"""Fetch of ``__cluster_metadata-0`` (Kafka's KafkaRaftClient.handleFetchRequest,
tryCompleteFetchRequest, handleFetchResponse, buildFetchRequest).

The leader checks the follower's fetch offset and last fetched epoch against its log:
valid, the records from there; diverging, the epoch and end offset to truncate to; below
the log start (or an empty follower and a snapshot to start from), the snapshot id to
fetch. Its high watermark rides on every answer, and a fetch at the log end waits up to
``max_wait_ms`` in the fetch purgatory for new data or, when the fetcher said which high
watermark it knows, for a newer one (KIP-1166, Kafka 4.1): without it a broker learned of
a commit up to a whole wait later, and a broker just unfenced answered Metadata with no
broker at all for as long.

The follower appends what it gets and, a voter always, flushes it before its next Fetch
reports it as received: the leader counts it towards the high watermark from then on.
It never truncates below its high watermark: the leader cannot ask for that.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from kio.schema.fetch.v18.request import FetchRequest
from kio.schema.fetch.v18.response import FetchResponse

from tiercel.protocol.errors import ErrorCode, RequestTimedOutError
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch, ValidOffsetAndEpoch
from tiercel.server.raft.raft_message import InboundRequest, InboundResponse
from tiercel.server.raft.raft_util import error_response, fetch_request, fetch_response
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.replicated_log import (
    Isolation,
    truncate_to_end_offset,
    validate_offset_and_epoch,
)
from tiercel.server.raft.snapshots import BOOTSTRAP_SNAPSHOT_ID
from tiercel.storage.log_values import LogOffsetMetadata

if TYPE_CHECKING:
    from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = ["FETCH", "build_fetch_request", "handle_fetch_request", "handle_fetch_response"]

FETCH: Final = 1
MAX_FETCH_SIZE_BYTES: Final = 8 * 1024 * 1024
# What a Fetch says of the replica's high watermark (FetchRequest v18): not known yet; the
# schema's default, "not supported", is the largest int64 and never behind the leader's.
UNKNOWN_HIGH_WATERMARK: Final = -1
_log: Final = logging.getLogger("tiercel.raft")


def build_fetch_request(client: KafkaRaftClient[Any]) -> FetchRequest:
    quorum = client.quorum
    return fetch_request(
        client.log.topic_partition,
        client.log.topic_id,
        client.cluster_id,
        quorum.local_id_or_sentinel,
        quorum.local_directory_id,
        quorum.epoch,
        client.log.end_offset.message_offset,
        client.log.last_fetched_epoch,
        MAX_FETCH_SIZE_BYTES,
        client.fetch_max_wait_ms,
        UNKNOWN_HIGH_WATERMARK if client.high_watermark is None else client.high_watermark,
    )


def _response(
    client: KafkaRaftClient[Any],
    listener_name: str,
    error: ErrorCode,
    records: bytes | bytearray | memoryview = b"",
    valid: ValidOffsetAndEpoch | None = None,
    high_watermark: LogOffsetMetadata | None = None,
) -> FetchResponse:
    quorum = client.quorum
    partition: dict[str, Any] = {
        "error_code": error,
        "records": bytes(records),
        "log_start_offset": client.log.start_offset,
        "high_watermark": -1 if high_watermark is None else high_watermark.message_offset,
        "aborted_transactions": None,
        "current_leader": {"leader_epoch": quorum.epoch, "leader_id": quorum.leader_id_or_sentinel},
    }
    if valid is not None and valid.kind is ValidOffsetAndEpoch.Kind.DIVERGING:
        end = valid.offset_and_epoch
        partition["diverging_epoch"] = {"epoch": end.epoch, "end_offset": end.offset}
    elif valid is not None and valid.kind is ValidOffsetAndEpoch.Kind.SNAPSHOT:
        snapshot = valid.offset_and_epoch
        partition["snapshot_id"] = {"epoch": snapshot.epoch, "end_offset": snapshot.offset}
    return fetch_response(
        listener_name,
        client.log.topic_partition,
        client.log.topic_id,
        quorum.leader_id_or_sentinel,
        quorum.leader_endpoints,
        partition,
    )


async def handle_fetch_request(
    client: KafkaRaftClient[Any], request: InboundRequest, now: int
) -> FetchResponse | None:
    """The answer, or None when the fetch is parked (its completion answers later)."""
    data: FetchRequest = request.data
    if not client.has_valid_cluster_id(data.cluster_id):
        return error_response(FETCH, ErrorCode.inconsistent_cluster_id)  # type: ignore[no-any-return]
    topics = data.topics
    if (
        len(topics) != 1
        or topics[0].topic_id != client.log.topic_id
        or len(topics[0].partitions) != 1
        or topics[0].partitions[0].partition != client.log.topic_partition.partition
    ):
        return error_response(FETCH, ErrorCode.invalid_request)  # type: ignore[no-any-return]
    fetch = topics[0].partitions[0]
    max_wait_ms = int(data.max_wait.total_seconds() * 1000)
    if (
        max_wait_ms < 0
        or fetch.fetch_offset < 0
        or fetch.last_fetched_epoch < 0
        or fetch.last_fetched_epoch > fetch.current_leader_epoch
    ):
        return _response(client, request.listener_name, ErrorCode.invalid_request)
    replica_key = ReplicaKey.of(data.replica_state.replica_id, fetch.replica_directory_id)
    response = try_complete_fetch_request(client, request.listener_name, replica_key, fetch, now)
    partition = response.responses[0].partitions[0]
    if (
        partition.error_code != ErrorCode.none
        or partition.records
        or max_wait_ms == 0
        or partition.diverging_epoch.epoch != -1
        or partition.diverging_epoch.end_offset != -1
        or partition.snapshot_id.epoch != -1
        or partition.snapshot_id.end_offset != -1
        or fetch.high_watermark < partition.high_watermark
    ):
        return response

    def completed(_: int | None, error: BaseException | None) -> None:
        if isinstance(error, RequestTimedOutError):
            # Nothing new arrived in time: the answer computed when the fetch came.
            request.completion.complete(response)
        elif error is not None:
            code = getattr(error, "error_code", ErrorCode.unknown_server_error)
            _log.info("fetch from %s at %d failed: %s", replica_key, fetch.fetch_offset, code)
            request.completion.complete(_response(client, request.listener_name, code))
        else:
            request.completion.complete(
                try_complete_fetch_request(
                    client, request.listener_name, replica_key, fetch, client.time.milliseconds()
                )
            )

    client.fetch_purgatory.await_(fetch.fetch_offset, now + max_wait_ms, completed)
    return None


def try_complete_fetch_request(
    client: KafkaRaftClient[Any], listener_name: str, replica_key: ReplicaKey, fetch: Any, now: int
) -> FetchResponse:
    try:
        error = client.validate_leader_only_request(fetch.current_leader_epoch)
        if error != ErrorCode.none:
            return _response(client, listener_name, error)
        state: LeaderState[Any] = client.quorum.leader_state()
        latest = client.log.latest_snapshot_id()
        if fetch.fetch_offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
            # An empty follower starts faster from the snapshot than from the log.
            valid = ValidOffsetAndEpoch.snapshot(latest)
        else:
            valid = validate_offset_and_epoch(
                client.log, fetch.fetch_offset, fetch.last_fetched_epoch
            )
        records: bytes | bytearray | memoryview = b""
        if valid.kind is ValidOffsetAndEpoch.Kind.VALID:
            info = client.log.read(fetch.fetch_offset, Isolation.UNCOMMITTED)
            if state.update_replica_state(replica_key, now, info.start_offset_metadata):
                client.on_update_leader_high_watermark(state, now)
            records = info.records
        return _response(
            client, listener_name, ErrorCode.none, records, valid, state.high_watermark
        )
    except Exception as e:
        _log.error("unexpected error completing a fetch from %s", replica_key, exc_info=e)
        return _response(client, listener_name, ErrorCode.unknown_server_error)


async def handle_fetch_response(
    client: KafkaRaftClient[Any], response: InboundResponse, now: int
) -> bool:
    data: FetchResponse = response.data
    if data.error_code != ErrorCode.none:
        return client.handle_top_level_error(data.error_code, response)
    responses = data.responses
    if (
        len(responses) != 1
        or responses[0].topic_id != client.log.topic_id
        or len(responses[0].partitions) != 1
        or responses[0].partitions[0].partition_index != client.log.topic_partition.partition
    ):
        return False
    partition = responses[0].partitions[0]
    leader = partition.current_leader
    leader_id = leader.leader_id if leader.leader_id >= 0 else None
    endpoints = client.leader_endpoints_from(leader_id, data.node_endpoints)
    handled = await client.maybe_handle_common_response(
        partition.error_code, leader_id, leader.leader_epoch, endpoints, now
    )
    if handled is not None:
        return handled
    if partition.error_code != ErrorCode.none:
        return client.handle_unexpected_error(partition.error_code, response)
    state = client.quorum.follower_state()
    diverging = partition.diverging_epoch
    snapshot_id = partition.snapshot_id
    if diverging.epoch >= 0:
        end = OffsetAndEpoch(diverging.end_offset, diverging.epoch)
        high_watermark = state.high_watermark
        if high_watermark is not None and end.offset < high_watermark.message_offset:
            raise RuntimeError(
                f"The leader requested truncation to offset {end.offset}, which is below the "
                f"current high watermark {high_watermark.message_offset}"
            )
        truncated = truncate_to_end_offset(client.log, end)
        # A VotersRecord of the dropped suffix no longer counts (Kafka's
        # handleFetchResponse truncates partitionState with the log).
        client.partition_state.truncate_new_entries(truncated)
        _log.info("truncated to offset %d from the Fetch answer of %s", truncated, leader_id)
    elif snapshot_id.epoch >= 0 or snapshot_id.end_offset >= 0:
        if snapshot_id.epoch < 0 or snapshot_id.end_offset < 0:
            _log.error("the leader sent an invalid snapshot id %s", snapshot_id)
            return False
        target = OffsetAndEpoch(snapshot_id.end_offset, snapshot_id.epoch)
        # Not validated against the log: it is past this log's end by design.
        state.set_fetching_snapshot(client.log.create_new_snapshot_unchecked(target))
        _log.info("fetching snapshot %s from leader %s", target, leader_id)
    else:
        records = partition.records or b""
        if records:
            await _append_as_follower(client, records)
        high_watermark_value = partition.high_watermark
        client.update_follower_high_watermark(
            high_watermark_value if high_watermark_value >= 0 else None
        )
    state.reset_fetch_timeout_for_successful_fetch(now)
    return True


async def _append_as_follower(client: KafkaRaftClient[Any], records: bytes) -> None:
    """A voter flushes before its next Fetch tells the leader it has these records (the
    leader counts them towards the high watermark); observers need not, unless told to."""
    client.log.append_as_follower(records)
    if client.quorum.is_voter or client.followers_always_flush:
        await client.log.flush(False)
    # A VotersRecord counts from its append, committed or not (Kafka's appendAsFollower).
    client.partition_state.update_state()
