"""Where a metadata image comes from: the last log offset (and its leader epoch and
append time) whose record it contains (Kafka's MetadataProvenance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["MetadataProvenance"]


@dataclass(frozen=True, slots=True)
class MetadataProvenance:
    """The log position an image reflects. ``is_offset_batch_aligned``: the offset is
    the last of its record batch, so a snapshot may be taken there. A value; any
    thread."""

    EMPTY: ClassVar[MetadataProvenance]

    last_contained_offset: int = -1
    last_contained_epoch: int = -1
    last_contained_log_time_ms: int = -1
    is_offset_batch_aligned: bool = False


MetadataProvenance.EMPTY = MetadataProvenance()
