"""RemoteLogMetadataTopicPartitioner against Kafka's algorithm.

The ``objects_hash`` column is what the JDK's
``java.util.Objects.hash(id.getLeastSignificantBits(), id.getMostSignificantBits(),
partition)`` printed for these ids (jshell, OpenJDK 17): the value Kafka's partitioner
feeds to murmur2. The partitions follow as toPositive(murmur2(4 big-endian bytes)) % n,
murmur2 being checked on its own against Kafka's test vectors (test_murmur2)."""

import struct
import uuid

import pytest

from tiercel.protocol.murmur2 import murmur2, to_positive
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm import remote_log_metadata_topic_partitioner as partitioner_module
from tiercel.tiered.rlmm.remote_log_metadata_topic_partitioner import (
    RemoteLogMetadataTopicPartitioner,
)

_ZERO = "00000000-0000-0000-0000-000000000000"
_SOME = "8f0a3b6e-2c41-4d7e-9a55-0b1c2d3e4f60"
_ONES = "ffffffff-ffff-ffff-ffff-ffffffffffff"

# (topic id, partition, Objects.hash from the JDK, metadata partition of 50, of 7)
CASES = [
    (_ZERO, 0, 29791, 6, 2),
    (_ZERO, 7, 29798, 31, 6),
    (_ZERO, 2147483647, -2147453858, 10, 5),
    (_SOME, 0, 1339020747, 24, 2),
    (_SOME, 7, 1339020754, 10, 3),
    (_SOME, 2147483647, -808462902, 30, 3),
    (_ONES, 0, 29791, 6, 2),
]


def _tp(topic_id: str, partition: int) -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(topic_id), TopicPartition("orders", partition))


@pytest.mark.parametrize(("topic_id", "partition", "objects_hash", "of_50", "of_7"), CASES)
def test_metadata_partition_matches_kafka(
    topic_id: str, partition: int, objects_hash: int, of_50: int, of_7: int
) -> None:
    bits = uuid.UUID(topic_id).int
    own_hash = partitioner_module._objects_hash(
        partitioner_module._long_hash_code(bits & (2**64 - 1)),
        partitioner_module._long_hash_code(bits >> 64),
        partition,
    )
    assert struct.unpack(">i", struct.pack(">I", own_hash))[0] == objects_hash
    assert to_positive(murmur2(struct.pack(">i", objects_hash))) % 50 == of_50
    assert (
        RemoteLogMetadataTopicPartitioner(50).metadata_partition(_tp(topic_id, partition)) == of_50
    )
    assert RemoteLogMetadataTopicPartitioner(7).metadata_partition(_tp(topic_id, partition)) == of_7


def test_the_topic_name_takes_no_part() -> None:
    partitioner = RemoteLogMetadataTopicPartitioner(50)
    a = TopicIdPartition(uuid.UUID(_SOME), TopicPartition("a", 3))
    b = TopicIdPartition(uuid.UUID(_SOME), TopicPartition("b", 3))
    assert partitioner.metadata_partition(a) == partitioner.metadata_partition(b)


def test_a_partition_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        RemoteLogMetadataTopicPartitioner(0)
