"""Metadata records round-trip in every version, keep what a newer writer added, refuse
what a version cannot hold, and refuse malformed bytes with MetadataParseError only."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_record_strategies import records
from test_metadata_record_golden import GOLDEN, TOPIC_ID_HEX

from tiercel.protocol.errors import UnsupportedVersionError
from tiercel.protocol.metadata.broker_records import RegisterBrokerRecord
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    MetadataParseError,
    deserialize,
    serialize,
)
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)

PARTITION_CHANGE_V0 = bytes.fromhex("010500" + "00000005" + TOPIC_ID_HEX + "00")
TOPIC_V0 = bytes.fromhex("010200" + "04666f6f" + TOPIC_ID_HEX + "00")


@settings(max_examples=400)
@given(records())
def test_every_record_round_trips(record_and_version: tuple[MetadataRecord, int]) -> None:
    record, version = record_and_version
    value = serialize(ApiMessageAndVersion(record, version))
    assert deserialize(value) == ApiMessageAndVersion(record, version)
    assert serialize(deserialize(value)) == value


def test_unknown_tagged_fields_are_kept_and_written_back_in_tag_order() -> None:
    # Directories is tag 8 of version 1: version 0 does not know it, nor tag 20.
    directories = "08" + "11" + "02" + "00" * 16
    value = PARTITION_CHANGE_V0[:-1] + bytes.fromhex("03" + "0104ffffffff" + directories + "140100")
    record = deserialize(value).message
    assert isinstance(record, PartitionChangeRecord)
    assert record.leader == -1
    assert record.directories is None
    assert record.unknown_tagged_fields == ((8, bytes.fromhex("02" + "00" * 16)), (20, b"\x00"))
    assert serialize(ApiMessageAndVersion(record, 0)) == value


def test_an_unknown_tagged_field_is_written_back_between_known_ones() -> None:
    # Version 1 knows tags 0-5 and 8 (Directories), not 6 and 7 (ELR, version 2).
    record = PartitionChangeRecord(
        leader_recovery_state=1, directories=(), unknown_tagged_fields=((6, b"\x01"),)
    )
    value = serialize(ApiMessageAndVersion(record, 1))
    assert value.endswith(bytes.fromhex("03" + "050101" + "060101" + "080101"))
    assert deserialize(value).message == record


@pytest.mark.parametrize(
    ("record", "version", "field"),
    [
        (RegisterBrokerRecord(is_migrating_zk_broker=True), 1, "is_migrating_zk_broker"),
        (RegisterBrokerRecord(in_controlled_shutdown=True), 0, "in_controlled_shutdown"),
        (RegisterBrokerRecord(log_dirs=(uuid.uuid4(),)), 2, "log_dirs"),
        (PartitionRecord(directories=(uuid.uuid4(),)), 0, "directories"),
        (PartitionRecord(eligible_leader_replicas=()), 1, "eligible_leader_replicas"),
        (PartitionChangeRecord(last_known_elr=(1,)), 1, "last_known_elr"),
        (PartitionChangeRecord(directories=()), 0, "directories"),
    ],
)
def test_a_version_without_a_field_refuses_a_value_for_it(
    record: MetadataRecord, version: int, field: str
) -> None:
    # Kafka's generated write(): "Attempted to write a non-default X at version N".
    with pytest.raises(UnsupportedVersionError, match=f"non-default {field} at version {version}"):
        serialize(ApiMessageAndVersion(record, version))


def test_fields_a_version_lacks_write_when_left_at_their_defaults() -> None:
    assert serialize(ApiMessageAndVersion(PartitionRecord(), 0))
    assert serialize(ApiMessageAndVersion(RegisterBrokerRecord(), 0))


@pytest.mark.parametrize("version", [-1, 1, 7])
def test_writing_a_version_the_record_does_not_have_is_refused(version: int) -> None:
    with pytest.raises(UnsupportedVersionError, match=f"version {version} of TopicRecord"):
        serialize(ApiMessageAndVersion(TopicRecord(), version))


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (TopicRecord(name="x" * 32768), "too long"),
        (TopicRecord(name=None), "non-nullable field name"),  # type: ignore[arg-type]
        (FeatureLevelRecord(feature_level=1 << 15), "FeatureLevelRecord v0"),
        (PartitionRecord(replicas=(1 << 31,)), "PartitionRecord v0"),
        (TopicRecord(topic_id="not a uuid"), "TopicRecord v0"),  # type: ignore[arg-type]
        (TopicRecord(name="\ud800"), "TopicRecord v0"),
        (PartitionChangeRecord(unknown_tagged_fields=((0, b"\x01"),), isr=(1,)), "known one"),
    ],
)
def test_values_the_encoding_cannot_hold_are_refused(record: MetadataRecord, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        serialize(ApiMessageAndVersion(record, 0))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "varint"),
        (b"\x00\x02\x00\x00", "frame version 0"),
        (b"\x02\x02\x00\x00", "unknown frame version 2"),
        (b"\x01\x06\x00\x00", "Unknown metadata id 6"),
        (b"\x01\x1d\x00\x00", "Unknown metadata id 29"),
        (b"\x01\xff\xff\x03\x00\x00", "type was too large"),
        (b"\x01\x02\x01" + TOPIC_V0[3:], "Can't read version 1 of TopicRecord"),
        (b"\x01\x02\x00\x01", "record ends early"),
        (TOPIC_V0 + b"\x00", "1 byte\\(s\\) of garbage after TopicRecord"),
        (b"\x01\x02\x00\x00" + TOPIC_V0[4:], "non-nullable field name was serialized as null"),
        (b"\x01\x02\x00\x05\xff\xfe\x80\x80" + TOPIC_V0[8:], "not UTF-8"),
        (b"\x01\x02\x00\x81\x80\x02" + bytes(40000), "invalid length 32768"),
        (b"\x01\x02\x00\xff\xff\xff\xff\xff", "varint longer than 5 bytes"),
        (b"\x01\x03\x00" + bytes(20) + b"\x0a", "larger than the 0 bytes left"),
        (TOPIC_V0[:-1] + b"\x01\x05\x09\x00", "tagged field 5 of 9 bytes ends past"),
        (
            PARTITION_CHANGE_V0[:-1] + b"\x01\x01\x05\x00\x00\x00\x01\x00",
            "has 5 bytes, its value 4",
        ),
        (PARTITION_CHANGE_V0[:-1] + b"\x01\x00\x01\x05", "larger than the 0 bytes left"),
        (b"\x01\x00\x03" + b"\xff" * 40, "varint|larger than"),
    ],
)
def test_malformed_values_are_refused_with_a_clear_error(value: bytes, reason: str) -> None:
    with pytest.raises(MetadataParseError, match=reason):
        deserialize(value)


@pytest.mark.parametrize(
    ("record", "version", "golden"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN]
)
def test_every_truncation_of_a_value_is_refused(
    record: MetadataRecord, version: int, golden: bytes
) -> None:
    for end in range(len(golden)):
        with pytest.raises(MetadataParseError):
            deserialize(golden[:end])


@settings(max_examples=500)
@given(st.sampled_from([g[3] for g in GOLDEN]), st.data())
def test_corrupted_values_fail_only_with_a_parse_error(golden: bytes, data: st.DataObject) -> None:
    value = bytearray(golden)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(value) - 1))
        value[position] = data.draw(st.integers(0, 255))
    try:
        record = deserialize(bytes(value))
    except MetadataParseError:
        return
    assert isinstance(record.message, MetadataRecord)


@given(st.binary(max_size=64))
def test_random_bytes_fail_only_with_a_parse_error(value: bytes) -> None:
    with contextlib.suppress(MetadataParseError):
        deserialize(b"\x01" + value)
