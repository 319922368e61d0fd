"""ProducerIdManager: producer ids unique across brokers and restarts, handed out in blocks.

Kafka's ZooKeeper-mode manager, on the `MetadataStore`: the latest block taken by any
broker is the node ``/latest_producer_id_block``,

    {"version":1,"broker":<broker id>,"block_start":"<first id>","block_end":"<last id>"}

(ids as strings, as Kafka writes them). A broker takes the next block of 1000 ids with a
compare-and-set on the node's version (a create when the node does not exist yet, or
holds no data), retrying when another broker won the race, so no two brokers — and no
two runs of one broker — ever share a block. Ids left in a block when a broker stops are
never handed out again.

Event-loop only. The first block is taken on the first request, not at start-up.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import CoordinatorLoadInProgressError, KafkaError
from tiercel.server.metadata.store import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
)

__all__ = [
    "PRODUCER_ID_BLOCK_PATH",
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdManager",
    "ProducerIdsBlock",
]

PRODUCER_ID_BLOCK_PATH: Final = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_CURRENT_VERSION: Final = 1
_LONG_MAX: Final = 2**63 - 1
_log: Final = logging.getLogger("tiercel.producer_id_manager")


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """Ids ``first_producer_id .. first_producer_id + size - 1``, taken by one broker.
    A value; safe anywhere."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size

    def encode(self) -> bytes:
        doc = {
            "version": _CURRENT_VERSION,
            "broker": self.assigned_broker_id,
            "block_start": str(self.first_producer_id),
            "block_end": str(self.last_producer_id),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdsBlock:
        """ValueError when ``data`` is not a block document."""
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError(f"producer id block is not a JSON object: {data[:60]!r}")
        start, end = int(doc["block_start"]), int(doc["block_end"])
        return cls(int(doc["broker"]), start, end - start + 1)


class ProducerIdManager:
    """Hands out producer ids from the block this broker holds, taking a new one from
    the store when it is used up.

    Invariants: ids handed out grow strictly and all lie in blocks this broker won in
    the store; at most one block request is in flight (concurrent callers wait for it).
    """

    def __init__(self, broker_id: int, store: MetadataStore) -> None:
        self._broker_id = broker_id
        self._store = store
        self._block: ProducerIdsBlock | None = None
        self._next_id = 0
        self._lock = asyncio.Lock()

    async def generate_producer_id(self) -> int:
        """A producer id no broker has handed out before. CoordinatorLoadInProgressError
        (retriable) if the store cannot be written now; KafkaError once every id is
        used."""
        async with self._lock:
            if self._block is None or self._next_id > self._block.last_producer_id:
                self._block = await self._allocate_block()
                self._next_id = self._block.first_producer_id
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    async def _allocate_block(self) -> ProducerIdsBlock:
        while True:
            try:
                block = await self._try_allocate_block()
            except MetadataStoreError as e:
                raise CoordinatorLoadInProgressError(
                    f"the producer id block could not be written: {e}"
                ) from e
            if block is not None:
                log_event(
                    _log,
                    logging.INFO,
                    "producer_id_block_acquired",
                    broker=self._broker_id,
                    block_start=block.first_producer_id,
                    block_end=block.last_producer_id,
                )
                return block

    async def _try_allocate_block(self) -> ProducerIdsBlock | None:
        """The next block if this broker's conditional write of it won, else None."""
        store = self._store
        try:
            data, stat = await store.get(PRODUCER_ID_BLOCK_PATH)
        except NoNodeError:
            data, stat = b"", None
        if data:
            current = ProducerIdsBlock.decode(data)
            if current.last_producer_id > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
                raise KafkaError("Have exhausted all producerIds.")
            first = current.next_block_first_id
        else:
            first = 0
        block = ProducerIdsBlock(self._broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        try:
            if stat is None:
                await store.create(PRODUCER_ID_BLOCK_PATH, block.encode())
            else:
                await store.set(
                    PRODUCER_ID_BLOCK_PATH, block.encode(), expected_version=stat.version
                )
        except (NodeExistsError, BadVersionError, NoNodeError):
            return None  # another broker took a block meanwhile: read it and try again
        return block
