"""The metadata image: everything the metadata log says, as of one offset (Kafka's
MetadataImage, org.apache.kafka.image).

An image is immutable: a `MetadataDelta` replays records on top of one and applies them
into the next, sharing whatever did not change. Brokers publish each new image to
ReplicaManager, the coordinators, the tiered layer and the metadata cache; a controller
keeps one to write snapshots from (``write``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tiercel.server.metadata.image.acls import AclsImage
from tiercel.server.metadata.image.client_quotas import ClientQuotasImage
from tiercel.server.metadata.image.cluster import ClusterImage
from tiercel.server.metadata.image.configurations import ConfigurationsImage
from tiercel.server.metadata.image.delegation_tokens import DelegationTokenImage
from tiercel.server.metadata.image.features import FeaturesImage
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance
from tiercel.server.metadata.image.producer_ids import ProducerIdsImage
from tiercel.server.metadata.image.scram import ScramImage
from tiercel.server.metadata.image.topics_image import TopicsImage

__all__ = ["MetadataImage"]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster's metadata at ``provenance``. A value; any thread."""

    EMPTY: ClassVar[MetadataImage]

    provenance: MetadataProvenance
    features: FeaturesImage
    cluster: ClusterImage
    topics: TopicsImage
    configs: ConfigurationsImage
    client_quotas: ClientQuotasImage
    producer_ids: ProducerIdsImage
    acls: AclsImage
    scram: ScramImage
    delegation_tokens: DelegationTokenImage

    def is_empty(self) -> bool:
        return (
            self.features.is_empty()
            and self.cluster.is_empty()
            and self.topics.is_empty()
            and self.configs.is_empty()
            and self.client_quotas.is_empty()
            and self.producer_ids.is_empty()
            and self.acls.is_empty()
            and self.scram.is_empty()
            and self.delegation_tokens.is_empty()
        )

    @property
    def offset(self) -> int:
        """The offset of the last record the image contains."""
        return self.provenance.last_contained_offset

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """The image as records (a snapshot's), features first: the metadata.version
        record tells how every record after it is written."""
        self.features.write(writer, options)
        self.cluster.write(writer, options)
        self.topics.write(writer, options)
        self.configs.write(writer, options)
        self.client_quotas.write(writer, options)
        self.producer_ids.write(writer, options)
        self.acls.write(writer, options)
        self.scram.write(writer, options)
        self.delegation_tokens.write(writer, options)


MetadataImage.EMPTY = MetadataImage(
    MetadataProvenance.EMPTY,
    FeaturesImage.EMPTY,
    ClusterImage.EMPTY,
    TopicsImage.EMPTY,
    ConfigurationsImage.EMPTY,
    ClientQuotasImage.EMPTY,
    ProducerIdsImage.EMPTY,
    AclsImage.EMPTY,
    ScramImage.EMPTY,
    DelegationTokenImage.EMPTY,
)
