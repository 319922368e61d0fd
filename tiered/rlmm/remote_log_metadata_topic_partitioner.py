"""Which ``__remote_log_metadata`` partition holds a user partition's events (Kafka's
RemoteLogMetadataTopicPartitioner.metadataPartition).

Kafka does not hash the Uuid's own hash code (it may change between versions) but
Java's ``Objects.hash(leastSignificantBits, mostSignificantBits, partition)``: the
31-based polynomial over ``Long.hashCode`` of each half and the partition number, in
32-bit int arithmetic, then murmur2 over that int's four big-endian bytes, made positive,
modulo the partition count. The topic name takes no part: a topic recreated under the
same name (new id) maps elsewhere.
"""

from __future__ import annotations

import struct
from typing import Final

from tiercel.protocol.murmur2 import murmur2, to_positive
from tiercel.storage.topic_partition import TopicIdPartition

__all__ = ["RemoteLogMetadataTopicPartitioner"]

_MASK: Final = 0xFFFFFFFF
_UINT32: Final = struct.Struct(">I")


def _long_hash_code(value: int) -> int:
    """Java's Long.hashCode of the 64-bit value (as unsigned bits here): the xor of its
    two halves."""
    return ((value >> 32) ^ value) & _MASK


def _objects_hash(*hash_codes: int) -> int:
    """Java's Arrays.hashCode over already computed element hash codes, as 32 bits."""
    result = 1
    for code in hash_codes:
        result = (31 * result + code) & _MASK
    return result


class RemoteLogMetadataTopicPartitioner:
    """A value: any thread."""

    __slots__ = ("num_partitions",)

    def __init__(self, num_partitions: int) -> None:
        if num_partitions <= 0:
            raise ValueError(f"the metadata topic needs partitions, not {num_partitions}")
        self.num_partitions = num_partitions

    def metadata_partition(self, partition: TopicIdPartition) -> int:
        bits = partition.topic_id.int
        most, least = bits >> 64, bits & ((1 << 64) - 1)
        hash_code = _objects_hash(
            _long_hash_code(least),
            _long_hash_code(most),
            partition.topic_partition.partition & _MASK,  # Integer.hashCode: the int itself
        )
        return to_positive(murmur2(_UINT32.pack(hash_code))) % self.num_partitions
