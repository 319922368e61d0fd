"""The metadata records about the metadata log itself, as Kafka 4.0's schemas declare
them: the no-op the active controller appends when the log is idle (KIP-835), and the
markers of metadata transactions (KIP-868), whose records a reader applies only once
the transaction ends.

    20 NoOpRecord               v0: no fields
    23 BeginTransactionRecord   v0: Name nullable string (tag 0, null)
    24 EndTransactionRecord     v0: no fields
    25 AbortTransactionRecord   v0: Reason nullable string (tag 0, null)
"""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.protocol.metadata.field_types import STRING
from tiercel.protocol.metadata.message_schema import MetadataRecord, metadata_record, schema_field

__all__ = [
    "AbortTransactionRecord",
    "BeginTransactionRecord",
    "EndTransactionRecord",
    "NoOpRecord",
]


@metadata_record(api_key=20, versions="0")
@dataclass(frozen=True, kw_only=True)
class NoOpRecord(MetadataRecord):
    """Nothing: it advances the log so that brokers see the controller is alive."""


@metadata_record(api_key=23, versions="0")
@dataclass(frozen=True, kw_only=True)
class BeginTransactionRecord(MetadataRecord):
    """The start of a metadata transaction, with an optional description."""

    name: str | None = schema_field(STRING, nullable=True, tag=0, default=None)


@metadata_record(api_key=24, versions="0")
@dataclass(frozen=True, kw_only=True)
class EndTransactionRecord(MetadataRecord):
    """The end of a metadata transaction: its records take effect."""


@metadata_record(api_key=25, versions="0")
@dataclass(frozen=True, kw_only=True)
class AbortTransactionRecord(MetadataRecord):
    """The abort of a metadata transaction: its records are dropped."""

    reason: str | None = schema_field(STRING, nullable=True, tag=0, default=None)
