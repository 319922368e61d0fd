"""The Raft RPCs as a request handler: what a KafkaApis-style dispatcher calls with the
decoded request of the version the peer sent, to get the response in that version
(Kafka's ``RaftManager.handleRequest``, which ``ControllerApis.handleRaftRequest`` and
the broker's ``KafkaApis`` call for Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of
``__cluster_metadata``, FetchSnapshot and DescribeQuorum).

The request joins the client's message queue and is answered at one of its polls; a
Fetch at the log end is answered when data comes or its ``max_wait_ms`` runs out.
Event-loop only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.raft.raft_message import InboundRequest
from tiercel.server.raft.raft_wire import RAFT_API_VERSIONS, request_to_latest, response_to_version

__all__ = ["handle_raft_request", "is_raft_request"]


def is_raft_request(api_key: int, api_version: int) -> bool:
    """Whether ``api_key`` is a Raft RPC and the version one this client serves."""
    versions = RAFT_API_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


async def handle_raft_request(
    client: KafkaRaftClient[Any],
    api_key: int,
    api_version: int,
    correlation_id: int,
    request: Any,
    listener_name: str,
) -> Any:
    """The response to ``request`` (a kio entity of ``api_version``), in that version."""
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[Any] = loop.create_future()
    inbound = InboundRequest(
        correlation_id,
        api_version,
        request_to_latest(api_key, request),
        listener_name,
        client.time.milliseconds(),
    )

    def completed(response: Any, error: BaseException | None) -> None:
        if answered.done():
            return
        if error is not None:
            answered.set_exception(error)
        else:
            answered.set_result(response)

    inbound.completion.when_complete(completed)
    client.handle(inbound)
    return response_to_version(api_key, await answered, api_version)
