"""What can go wrong between the metadata image and the records it is made of.

A record that does not apply to the image it is replayed on (a change to a partition
or a broker the image does not have, a broker epoch that is not the registered one, a
value no state has) is a `MetadataReplayError`: Kafka's deltas throw RuntimeException or
IllegalStateException there, and its MetadataLoader reports the record's offset as a
fault rather than publish an image built on a broken log.

An image that cannot be written at the metadata.version asked for without losing some
of it is an `UnwritableMetadataError` (Kafka's UnwritableMetadataException), unless the
writer's options handle the loss otherwise.
"""

from __future__ import annotations

__all__ = ["MetadataReplayError", "UnwritableMetadataError"]


class MetadataReplayError(RuntimeError):
    """A metadata record that cannot be applied to the image it was replayed on."""


class UnwritableMetadataError(RuntimeError):
    """Part of an image that the requested metadata.version has no record for."""
