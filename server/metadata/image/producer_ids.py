"""The next producer id the controller will hand out, in the metadata image (Kafka's
ProducerIdsImage and ProducerIdsDelta; KIP-730's AllocateProducerIds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tiercel.protocol.metadata.cluster_records import ProducerIdsRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions

__all__ = ["ProducerIdsDelta", "ProducerIdsImage"]


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The first id of the next block, -1 while no block was ever handed out. A value;
    any thread."""

    EMPTY: ClassVar[ProducerIdsImage]

    next_producer_id: int = -1

    def is_empty(self) -> bool:
        return self.next_producer_id == -1

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        if self.next_producer_id >= 0:
            record = ProducerIdsRecord(
                broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id
            )
            writer.write(ApiMessageAndVersion(record, 0))


ProducerIdsImage.EMPTY = ProducerIdsImage()


class ProducerIdsDelta:
    """The next producer id as of the records replayed. Not thread-safe."""

    def __init__(self, image: ProducerIdsImage) -> None:
        self.next_producer_id = image.next_producer_id

    def replay(self, record: ProducerIdsRecord) -> None:
        self.next_producer_id = record.next_producer_id

    def apply(self) -> ProducerIdsImage:
        return ProducerIdsImage(self.next_producer_id)
