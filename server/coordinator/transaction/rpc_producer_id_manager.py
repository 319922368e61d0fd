"""Producer ids of a KRaft broker, in blocks the active controller allocates
(AllocateProducerIds; Kafka's RPCProducerIdManager).

The controller hands out consecutive blocks from its ProducerIdsRecord, so no two
brokers ever share an id. The next block is requested once 90 % of the current one is
handed out, so that InitProducerId rarely waits; when no block is left the caller waits
for one, and gets COORDINATOR_LOAD_IN_PROGRESS (retriable) if the controller cannot be
reached in the retry timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import CoordinatorLoadInProgressError, ErrorCode
from tiercel.server.coordinator.transaction.producer_id_manager import ProducerIdsBlock
from tiercel.server.node_to_controller_channel import NodeToControllerChannel

__all__ = ["RpcProducerIdManager"]

_ALLOCATE_PRODUCER_IDS: Final = 67
_VERSIONS: Final = (0, 0)
_PREFETCH_FRACTION: Final = 0.9
_log: Final = logging.getLogger("tiercel.producer_id_manager")


class RpcProducerIdManager:
    """Event-loop only. Invariants: ids handed out grow strictly; at most one
    AllocateProducerIds request is in flight (``_request``)."""

    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        channel: NodeToControllerChannel,
        retry_timeout_s: float,
    ) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._channel = channel
        self._retry_timeout_s = retry_timeout_s
        self._block: ProducerIdsBlock | None = None
        self._next_block: ProducerIdsBlock | None = None
        self._next_id = 0
        self._request: asyncio.Task[ProducerIdsBlock] | None = None

    async def generate_producer_id(self) -> int:
        while self._block is None or self._next_id > self._block.last_producer_id:
            if self._next_block is not None:
                self._block, self._next_block = self._next_block, None
                self._next_id = self._block.first_producer_id
                continue
            await self._wait_for_next_block()
        producer_id = self._next_id
        self._next_id += 1
        block = self._block
        if self._next_id >= block.first_producer_id + block.size * _PREFETCH_FRACTION:
            self._request_next_block()
        return producer_id

    def _request_next_block(self) -> asyncio.Task[ProducerIdsBlock] | None:
        if self._next_block is not None:
            return None
        if self._request is None:
            self._request = asyncio.get_running_loop().create_task(
                self._allocate(), name="allocate-producer-ids"
            )
            self._request.add_done_callback(self._on_allocated)
        return self._request

    def _on_allocated(self, task: asyncio.Task[ProducerIdsBlock]) -> None:
        self._request = None
        if not task.cancelled() and task.exception() is None:
            self._next_block = task.result()

    async def _wait_for_next_block(self) -> None:
        request = self._request_next_block()
        if request is None:
            return
        try:
            await asyncio.shield(request)
        except (TimeoutError, OSError, CoordinatorLoadInProgressError) as e:
            raise CoordinatorLoadInProgressError(
                f"no producer id block from the controller: {e}"
            ) from e

    async def _allocate(self) -> ProducerIdsBlock:
        body = {"broker_id": self._broker_id, "broker_epoch": self._broker_epoch()}
        response = await self._channel.send(
            _ALLOCATE_PRODUCER_IDS, _VERSIONS, body, self._retry_timeout_s
        )
        if response.error_code != ErrorCode.none or response.producer_id_len <= 0:
            raise CoordinatorLoadInProgressError(
                f"AllocateProducerIds answered error {int(response.error_code)}"
            )
        block = ProducerIdsBlock(
            self._broker_id, int(response.producer_id_start), int(response.producer_id_len)
        )
        log_event(
            _log,
            logging.INFO,
            "producer_id_block_acquired",
            broker=self._broker_id,
            block_start=block.first_producer_id,
            block_end=block.last_producer_id,
        )
        return block

    def close(self) -> None:
        if self._request is not None:
            self._request.cancel()
