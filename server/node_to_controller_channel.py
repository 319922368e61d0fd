"""Requests from a KRaft broker to the active controller (Kafka's
NodeToControllerChannelManager and NodeToControllerRequestThread).

The active controller moves: a request waits while no controller is known, and goes
again to the new one after a lost connection or an answer that says NOT_CONTROLLER
anywhere in it (Kafka's NodeToControllerRequestThread.handleResponse), until its retry
timeout. Each user (the lifecycle manager, AlterPartition, producer ids, forwarding)
has its own channel, as in Kafka, so a slow request of one never delays another's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tiercel.protocol.client_frames import FrameError
from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.broker_client import BrokerClient, BrokerUnavailableError

__all__ = ["ControllerInformation", "ControllerRequestTimeoutError", "NodeToControllerChannel"]

_NOT_CONTROLLER: Final = int(ErrorCode.not_controller)


@dataclass(frozen=True, slots=True)
class ControllerInformation:
    """The active controller and its endpoint on the controller listener."""

    node_id: int
    host: str
    port: int


class ControllerRequestTimeoutError(TimeoutError):
    """No active controller answered within the request's retry timeout."""


class NodeToControllerChannel:
    """Event-loop only. Requests go one at a time, in the order they were sent.

    Invariant: ``_client`` targets the controller the last request went to, or is None."""

    def __init__(
        self,
        controller_provider: Callable[[], ControllerInformation | None],
        client_id: str,
        request_timeout_s: float,
        retry_backoff_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._provider = controller_provider
        self._ssl_context = ssl_context
        self._client_id = client_id
        self._request_timeout_s = request_timeout_s
        self._retry_backoff_s = retry_backoff_s
        self._client: BrokerClient | None = None
        self._target: ControllerInformation | None = None
        self._lock = asyncio.Lock()

    async def send(
        self,
        api_key: int,
        versions: tuple[int, int],
        body: Mapping[str, Any],
        retry_timeout_s: float,
    ) -> Any:
        """The active controller's answer to ``body``. ControllerRequestTimeoutError when
        none answered within ``retry_timeout_s``; UnsupportedVersionError at once when the
        controller cannot take the request in ``versions``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_timeout_s
        async with self._lock:
            while True:
                client = self._client_for_controller()
                if client is not None:
                    try:
                        _, response = await client.request(api_key, versions, body)
                    except (OSError, EOFError, TimeoutError, FrameError, BrokerUnavailableError):
                        self._forget_controller()
                    else:
                        if not _says_not_controller(response):
                            return response
                        self._forget_controller()
                if loop.time() + self._retry_backoff_s >= deadline:
                    raise ControllerRequestTimeoutError(
                        f"api {api_key}: no active controller answered in {retry_timeout_s} s"
                    )
                await asyncio.sleep(self._retry_backoff_s)

    def _client_for_controller(self) -> BrokerClient | None:
        controller = self._provider()
        if controller != self._target:
            self._forget_controller()
        if controller is None:
            return None
        if self._client is None:
            endpoint = (controller.host, controller.port)
            self._client = BrokerClient(
                controller.node_id,
                lambda: endpoint,
                self._client_id,
                self._request_timeout_s,
                ssl_context=self._ssl_context,
            )
            self._target = controller
        return self._client

    def _forget_controller(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None
        self._target = None

    def close(self) -> None:
        self._forget_controller()


def _says_not_controller(response: Any) -> bool:
    """Whether any error code in ``response`` is NOT_CONTROLLER (Kafka's errorCounts)."""
    if isinstance(response, tuple):
        return any(_says_not_controller(item) for item in response)
    if not dataclasses.is_dataclass(response):
        return False
    for f in dataclasses.fields(response):
        value = getattr(response, f.name)
        if f.name == "error_code" and value == _NOT_CONTROLLER:
            return True
        nested = isinstance(value, tuple) or dataclasses.is_dataclass(value)
        if nested and _says_not_controller(value):
            return True
    return False
