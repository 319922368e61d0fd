"""The Raft client's outbound requests over TCP (Kafka's ``KafkaNetworkChannel`` over its
InterBrokerSendThread): one connection per destination, opened on first use with
ApiVersions and kept, each request sent in the highest version both sides speak.

The client sends at most one request to a destination at a time (its RequestManager),
so a connection carries one request after another. A request that cannot be sent or
answered completes with the error; the client turns it into BROKER_NOT_AVAILABLE or
REQUEST_TIMED_OUT and backs off, as Kafka's channel answers a disconnect or a timeout.
Event-loop only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from typing import Final

from tiercel.protocol.client_frames import FrameError
from tiercel.server.raft.endpoints import Node
from tiercel.server.raft.raft_message import InboundResponse, OutboundRequest, api_key_of
from tiercel.server.raft.raft_wire import RAFT_API_VERSIONS, fields_of, response_to_latest
from tiercel.server.replication.broker_client import BrokerClient

__all__ = ["KafkaNetworkChannel"]

_log: Final = logging.getLogger("tiercel.raft")


class _Destination:
    """The connection to one node, and the requests waiting for it, in order."""

    def __init__(self, node: Node, client: BrokerClient) -> None:
        self.node = node
        self.client = client
        self.lock = asyncio.Lock()


class KafkaNetworkChannel:
    """Event-loop only."""

    def __init__(
        self,
        listener_name: str,
        client_id: str,
        request_timeout_ms: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._listener_name = listener_name
        self._ssl_context = ssl_context
        self._client_id = client_id
        self._timeout_s = request_timeout_ms / 1000
        self._correlation_ids = itertools.count(1)
        self._destinations: dict[int, _Destination] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def listener_name(self) -> str:
        return self._listener_name

    def new_correlation_id(self) -> int:
        return next(self._correlation_ids)

    def send(self, request: OutboundRequest) -> None:
        task = asyncio.get_running_loop().create_task(
            self._send(request), name=f"raft request to {request.destination}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _destination(self, node: Node) -> _Destination:
        destination = self._destinations.get(node.id)
        if destination is None or destination.node != node:
            if destination is not None:
                destination.client.close()
            address = (node.host, node.port)
            client = BrokerClient(
                node.id,
                lambda: address,
                self._client_id,
                self._timeout_s,
                ssl_context=self._ssl_context,
            )
            destination = self._destinations[node.id] = _Destination(node, client)
        return destination

    async def _send(self, request: OutboundRequest) -> None:
        api_key = api_key_of(request.data)
        destination = self._destination(request.destination)
        try:
            async with destination.lock:
                _, response = await destination.client.request(
                    api_key, RAFT_API_VERSIONS[api_key], fields_of(request.data)
                )
        except TimeoutError as e:  # an OSError too, but Kafka answers REQUEST_TIMED_OUT
            _log.debug("request to %s timed out", request.destination)
            request.completion.complete_exceptionally(e)
            return
        except (OSError, EOFError, FrameError) as e:
            _log.debug("request to %s failed: %r", request.destination, e)
            request.completion.complete_exceptionally(ConnectionError(str(e) or repr(e)))
            return
        except Exception as e:  # an unsupported version, say: logged by the client
            _log.debug("request to %s failed: %r", request.destination, e)
            request.completion.complete_exceptionally(e)
            return
        request.completion.complete(
            InboundResponse(
                request.correlation_id, response_to_latest(api_key, response), request.destination
            )
        )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for destination in self._destinations.values():
            destination.client.close()
        self._destinations.clear()
