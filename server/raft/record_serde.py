"""How the Raft client turns the records it replicates into bytes and back (Kafka's
``RecordSerde``). Raft never looks inside a record: the metadata records' serde (Kafka's
MetadataRecordSerde) belongs to the controller and the broker's metadata loader."""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["IdentitySerde", "RecordSerde"]

T = TypeVar("T")


class RecordSerde(Protocol[T]):
    """Any thread; stateless."""

    def write(self, record: T) -> bytes:
        """The value bytes of one record."""

    def read(self, data: memoryview) -> T:
        """The record whose value bytes are ``data`` (valid only during the call)."""


class IdentitySerde:
    """Records that are their own bytes (Kafka's ``IdentitySerde``)."""

    def write(self, record: bytes) -> bytes:
        return record

    def read(self, data: memoryview) -> bytes:
        return bytes(data)
