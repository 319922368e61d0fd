"""KIP-848 consumer group records in __consumer_offsets: Kafka's byte layouts, every key
and value type round-tripping, tagged fields of newer writers skipped, corrupt input
rejected."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.message_codec import MessageFormatError
from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicMetadataValue,
    TopicPartitionsValue,
    decode_consumer_group_key,
    decode_consumer_group_value,
    encode_consumer_group_key,
    encode_consumer_group_value,
)
from tiercel.server.coordinator.group.coordinator_records import (
    GroupMetadataKey,
    UnknownKey,
    decode_key,
    encode_key,
)

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")

names = st.text(max_size=12)
nullable_names = st.none() | names
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
uuids = st.uuids()
partition_lists = st.lists(st.integers(0, 2**31 - 1), max_size=8).map(tuple)
topic_partitions = st.lists(
    st.builds(TopicPartitionsValue, uuids, partition_lists), max_size=4
).map(tuple)

keys = st.one_of(
    st.builds(ConsumerGroupMetadataKey, names),
    st.builds(ConsumerGroupPartitionMetadataKey, names),
    st.builds(ConsumerGroupMemberMetadataKey, names, names),
    st.builds(ConsumerGroupTargetAssignmentMetadataKey, names),
    st.builds(ConsumerGroupTargetAssignmentMemberKey, names, names),
    st.builds(ConsumerGroupCurrentMemberAssignmentKey, names, names),
    st.builds(ConsumerGroupRegularExpressionKey, names, names),
)

VALUE_STRATEGIES: dict[type[ConsumerGroupValue], st.SearchStrategy[ConsumerGroupValue]] = {
    ConsumerGroupMetadataValue: st.builds(ConsumerGroupMetadataValue, int32s),
    ConsumerGroupPartitionMetadataValue: st.builds(
        ConsumerGroupPartitionMetadataValue,
        st.lists(st.builds(TopicMetadataValue, uuids, names, int32s), max_size=4).map(tuple),
    ),
    ConsumerGroupMemberMetadataValue: st.builds(
        ConsumerGroupMemberMetadataValue,
        nullable_names,
        nullable_names,
        names,
        names,
        st.lists(names, max_size=4).map(tuple),
        nullable_names,
        int32s,
        nullable_names,
    ),
    ConsumerGroupTargetAssignmentMetadataValue: st.builds(
        ConsumerGroupTargetAssignmentMetadataValue, int32s
    ),
    ConsumerGroupTargetAssignmentMemberValue: st.builds(
        ConsumerGroupTargetAssignmentMemberValue, topic_partitions
    ),
    ConsumerGroupCurrentMemberAssignmentValue: st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        int32s,
        int32s,
        st.integers(-128, 127),
        topic_partitions,
        topic_partitions,
    ),
    ConsumerGroupRegularExpressionValue: st.builds(
        ConsumerGroupRegularExpressionValue, st.lists(names, max_size=4).map(tuple), int64s, int64s
    ),
}
KEY_FOR_VALUE: dict[type[ConsumerGroupValue], ConsumerGroupKey] = {
    ConsumerGroupMetadataValue: ConsumerGroupMetadataKey("g"),
    ConsumerGroupPartitionMetadataValue: ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataValue: ConsumerGroupMemberMetadataKey("g", "m"),
    ConsumerGroupTargetAssignmentMetadataValue: ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupTargetAssignmentMemberValue: ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentValue: ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    ConsumerGroupRegularExpressionValue: ConsumerGroupRegularExpressionKey("g", "t.*"),
}


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


@pytest.mark.parametrize(
    ("key", "version"),
    [
        (ConsumerGroupMetadataKey("grp"), 3),
        (ConsumerGroupPartitionMetadataKey("grp"), 4),
        (ConsumerGroupTargetAssignmentMetadataKey("grp"), 6),
    ],
)
def test_group_keys_are_the_record_type_and_the_group_id(
    key: ConsumerGroupKey, version: int
) -> None:
    assert encode_consumer_group_key(key) == struct.pack(">h", version) + _string("grp")


@pytest.mark.parametrize(
    ("key", "version", "second"),
    [
        (ConsumerGroupMemberMetadataKey("grp", "m-1"), 5, "m-1"),
        (ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"), 7, "m-1"),
        (ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"), 8, "m-1"),
        (ConsumerGroupRegularExpressionKey("grp", "^t.*"), 16, "^t.*"),
    ],
)
def test_member_and_regex_keys_add_a_second_string(
    key: ConsumerGroupKey, version: int, second: str
) -> None:
    assert encode_consumer_group_key(key) == (
        struct.pack(">h", version) + _string("grp") + _string(second)
    )


def test_group_epoch_value_is_flexible_version_zero() -> None:
    # version 0, epoch, no tagged fields
    assert encode_consumer_group_value(ConsumerGroupMetadataValue(5)) == bytes.fromhex(
        "00000000000500"
    )


def test_current_assignment_value_layout() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        7, 6, 1, (TopicPartitionsValue(TOPIC, (0, 2)),), ()
    )
    expected = (
        bytes.fromhex("0000000000070000000601")
        + b"\x02"  # one topic (compact array: count + 1)
        + TOPIC.bytes
        + b"\x03"  # two partitions
        + struct.pack(">ii", 0, 2)
        + b"\x00"  # the topic's tagged fields
        + b"\x01"  # no partitions pending revocation
        + b"\x00"  # the value's tagged fields
    )
    assert encode_consumer_group_value(value) == expected


def test_member_metadata_value_layout_and_empty_regex() -> None:
    value = ConsumerGroupMemberMetadataValue(None, "r1", "cid", "/h", ("a",), "", 300, "uniform")
    expected = (
        b"\x00\x00"
        + b"\x00"  # null instance id
        + b"\x03r1"
        + b"\x04cid"
        + b"\x03/h"
        + b"\x02\x02a"
        + b"\x01"  # the empty regex Kafka writes for "none"
        + struct.pack(">i", 300)
        + b"\x08uniform"
        + b"\x00"
    )
    assert encode_consumer_group_value(value) == expected


@settings(max_examples=150)
@given(keys)
def test_every_key_round_trips(key: ConsumerGroupKey) -> None:
    encoded = encode_consumer_group_key(key)
    assert decode_consumer_group_key(encoded) == key
    # The classic decoder sees an unknown key type, not a corrupt record.
    assert isinstance(decode_key(encoded), UnknownKey)


@settings(max_examples=60)
@given(
    st.sampled_from(sorted(VALUE_STRATEGIES, key=lambda t: t.__name__)).flatmap(
        lambda kind: VALUE_STRATEGIES[kind]
    )
)
def test_every_value_round_trips(value: ConsumerGroupValue) -> None:
    key = KEY_FOR_VALUE[type(value)]
    assert decode_consumer_group_value(key, encode_consumer_group_value(value)) == value


def test_partition_racks_written_by_kafka_are_read_and_dropped() -> None:
    body = (
        b"\x00\x00"
        + b"\x02"
        + TOPIC.bytes
        + b"\x02t"
        + struct.pack(">i", 3)
        + b"\x02"  # one partition with racks
        + struct.pack(">i", 0)
        + b"\x03\x03r1\x03r2"
        + b"\x00"
        + b"\x00"
        + b"\x00"
    )
    decoded = decode_consumer_group_value(ConsumerGroupPartitionMetadataKey("g"), body)
    assert decoded == ConsumerGroupPartitionMetadataValue((TopicMetadataValue(TOPIC, "t", 3),))


def test_unknown_tagged_fields_of_newer_writers_are_skipped() -> None:
    # A group epoch record with a tagged field (tag 0, 8 bytes: Kafka 4.1's metadata hash).
    body = bytes.fromhex("000000000009010008") + bytes(8)
    decoded = decode_consumer_group_value(ConsumerGroupMetadataKey("g"), body)
    assert decoded == ConsumerGroupMetadataValue(9)


def test_other_record_types_are_not_consumer_group_keys() -> None:
    assert decode_consumer_group_key(encode_key(GroupMetadataKey("g"))) is None
    assert decode_consumer_group_key(struct.pack(">h", 9) + _string("g")) is None


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x01\x00\x00\x00\x05\x00",  # unknown value version
        b"\x00\x00\x00\x00",  # cut short
        b"\x00\x00\x00\x00\x00\x05\x00\xff",  # trailing bytes
    ],
)
def test_corrupt_values_are_rejected(body: bytes) -> None:
    with pytest.raises(MessageFormatError):
        decode_consumer_group_value(ConsumerGroupMetadataKey("g"), body)
