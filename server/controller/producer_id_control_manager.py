"""Producer id blocks handed to brokers (Kafka's ``ProducerIdControlManager``, KIP-730):
AllocateProducerIds gets the next block of 1000 ids, recorded as a ProducerIdsRecord
naming the first id of the block after it, so no id is ever handed out twice."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import UnknownServerError
from tiercel.protocol.metadata.cluster_records import ProducerIdsRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.controller.cluster_control_manager import ClusterControlManager
from tiercel.server.controller.controller_result import ControllerResult

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdControlManager", "ProducerIdsBlock"]

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_LONG_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """Ids ``first_producer_id`` .. ``first_producer_id + size - 1`` for ``broker_id``."""

    broker_id: int
    first_producer_id: int
    size: int


class ProducerIdControlManager:
    """Event-loop only."""

    def __init__(self, cluster_control: ClusterControlManager) -> None:
        self._cluster_control = cluster_control
        self._next_producer_id = 0

    @property
    def next_producer_id(self) -> int:
        return self._next_producer_id

    def generate_next_producer_id(
        self, broker_id: int, broker_epoch: int
    ) -> ControllerResult[ProducerIdsBlock]:
        """Kafka's ``generateNextProducerId``; STALE_BROKER_EPOCH from an unregistered
        broker or an old incarnation."""
        self._cluster_control.check_broker_epoch(broker_id, broker_epoch)
        first = self._next_producer_id
        if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
            raise UnknownServerError(
                "Exhausted all producerIds as the next block's end producerId has exceeded "
                "the int64 type limit"
            )
        block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        record = ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=first + block.size
        )
        return ControllerResult([ApiMessageAndVersion(record, 0)], block)

    def replay(self, record: ProducerIdsRecord) -> None:
        if record.next_producer_id <= self._next_producer_id:
            raise RuntimeError(
                f"Next producer ID from replayed record ({record.next_producer_id}) is not "
                f"greater than the current next producer ID ({self._next_producer_id})"
            )
        self._next_producer_id = record.next_producer_id

    def records(self) -> Iterator[ApiMessageAndVersion]:
        if self._next_producer_id > 0:
            record = ProducerIdsRecord(
                broker_id=-1, broker_epoch=-1, next_producer_id=self._next_producer_id
            )
            yield ApiMessageAndVersion(record, 0)
