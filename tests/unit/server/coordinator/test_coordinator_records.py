"""__consumer_offsets key and value schemas: byte-exact against hand-assembled bytes read
off Kafka's OffsetCommitKey/Value and GroupMetadataKey/Value JSON schemas, and round
trips of every version."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.server.coordinator.group.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    MessageFormatError,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text)


COMMIT_TS = "00 00 01 8b cf e5 68 00"  # 1_700_000_000_000
EXPIRE_TS = "00 00 01 8b d5 0b c4 00"  # 1_700_086_400_000
OFFSET_42 = "00 00 00 00 00 00 00 2a"


# -- keys ------------------------------------------------------------------------------


def test_offset_commit_key_is_version_1_group_topic_partition() -> None:
    key = OffsetCommitKey("grp", "events", 5)
    expected = h("00 0100 03 67727000 06 6576656e747300 00 00 05")
    assert encode_key(key) == expected
    assert decode_key(expected) == key


def test_offset_commit_key_version_0_reads_the_same() -> None:
    assert decode_key(h("00 0000 01 6700 01 7400 00 00 00")) == OffsetCommitKey("g", "t", 0)


def test_group_metadata_key_is_version_2_group() -> None:
    key = GroupMetadataKey("grp")
    assert encode_key(key) == h("00 02 00 03 677270")
    assert decode_key(h("00 02 00 03 677270")) == key


def test_unknown_key_versions_are_reported_not_parsed() -> None:
    assert decode_key(h("00 03 00 00")) == UnknownKey(3)


def test_truncated_or_overlong_keys_are_rejected() -> None:
    with pytest.raises(MessageFormatError):
        decode_key(h("00 01 00 05 6162"))
    with pytest.raises(MessageFormatError):
        decode_key(h("00 02 00 01 67 ff"))


# -- offset commit values --------------------------------------------------------------


def test_offset_commit_value_v3_has_the_leader_epoch() -> None:
    value = OffsetCommitValue(42, 7, "ok", 1_700_000_000_000)
    expected = h("00 03" + OFFSET_42 + "00 00 00 0700 02 6f6b" + COMMIT_TS)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_with_expire_timestamp_is_v1() -> None:
    value = OffsetCommitValue(42, -1, "ok", 1_700_000_000_000, 1_700_086_400_000)
    expected = h("00 01" + OFFSET_42 + "00 02 6f6b" + COMMIT_TS + EXPIRE_TS)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


@pytest.mark.parametrize("version", [0, 2])
def test_offset_commit_value_v0_and_v2_have_no_epoch(version: int) -> None:
    data = h(f"00 0{version}" + OFFSET_42 + "00 00" + COMMIT_TS)
    assert decode_offset_commit_value(data) == OffsetCommitValue(42, -1, "", 1_700_000_000_000)
    assert encode_offset_commit_value(decode_offset_commit_value(data), version) == data


def test_offset_commit_value_v4_is_flexible_and_skips_unknown_tags() -> None:
    tagged = h("00 04" + OFFSET_42 + "00 00 00 0703 6f6b" + COMMIT_TS + "01 05 02 aabb")
    value = decode_offset_commit_value(tagged)
    assert value == OffsetCommitValue(42, 7, "ok", 1_700_000_000_000)
    plain = h("00 04" + OFFSET_42 + "00 00 00 0703 6f6b" + COMMIT_TS + "00")
    assert encode_offset_commit_value(value, 4) == plain


def test_offset_commit_value_errors() -> None:
    with pytest.raises(MessageFormatError, match="version 5"):
        decode_offset_commit_value(h("00 05" + OFFSET_42))
    with pytest.raises(MessageFormatError):
        decode_offset_commit_value(h("00 03" + OFFSET_42))
    with pytest.raises(MessageFormatError, match="null"):
        decode_offset_commit_value(h("00 03" + OFFSET_42 + "00 00 00 07ff ff" + COMMIT_TS))
    with pytest.raises(MessageFormatError, match="after the record"):
        decode_offset_commit_value(h("00 03" + OFFSET_42 + "00 00 00 0700 00" + COMMIT_TS + "00"))


# -- group metadata values -------------------------------------------------------------

MEMBER = MemberMetadataValue("m1", None, "c", "/h", 30000, 10000, b"\x00\x01", b"\x02")
GROUP = GroupMetadataValue("consumer", 3, "range", "m1", 1_700_000_001_234, (MEMBER,))
GROUP_V3 = h(
    "00 03"
    "00 08 636f6e73756d6572"  # protocol type "consumer"
    "00 00 00 03"  # generation
    "00 05 72616e6765"  # protocol "range"
    "00 02 6d31"  # leader
    "00 00 01 8b cf e5 6c d2"  # current state timestamp
    "00 00 00 01"  # one member:
    "00 02 6d31"  # member id
    "ff ff"  # no group.instance.id
    "00 01 63"  # client id
    "00 02 2f68"  # client host
    "00 00 75 30"  # rebalance timeout 30000
    "00 00 27 10"  # session timeout 10000
    "00 00 00 02 0001"  # subscription
    "00 00 00 01 02"  # assignment
)


def test_group_metadata_value_v3() -> None:
    assert encode_group_metadata_value(GROUP) == GROUP_V3
    assert decode_group_metadata_value(GROUP_V3) == GROUP


def test_group_metadata_value_v4_is_flexible() -> None:
    expected = h(
        "00 04" "09 636f6e73756d6572" "00 00 00 03" "06 72616e6765" "03 6d31"
        "00 00 01 8b cf e5 6c d2" "02" "03 6d31" "00" "02 63" "03 2f68"
        "00 00 75 30" "00 00 27 10" "03 0001" "02 02" "00" "00"
    )  # fmt: skip
    assert encode_group_metadata_value(GROUP, 4) == expected
    assert decode_group_metadata_value(expected) == GROUP


def test_group_metadata_value_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    data = h(
        "00 00" "00 08 636f6e73756d6572" "00 00 00 01" "00 05 72616e6765" "00 02 6d31"
        "00 00 00 01" "00 02 6d31" "00 01 63" "00 02 2f68" "00 00 27 10"
        "00 00 00 00" "00 00 00 00"
    )  # fmt: skip
    value = decode_group_metadata_value(data)
    assert value.current_state_timestamp == -1
    assert value.members == (MemberMetadataValue("m1", None, "c", "/h", 10000, 10000, b"", b""),)


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    empty = GroupMetadataValue("consumer", 4, None, None, 1_700_000_000_000, ())
    data = encode_group_metadata_value(empty)
    assert data == h("00 0300 08 636f6e73756d657200 00 00 04ff ffff ff" + COMMIT_TS + "00 00 00 00")
    assert decode_group_metadata_value(data) == empty


# -- round trips ------------------------------------------------------------------------

names = st.text(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=150)
@given(st.integers(0, 4), int64, int32, names, int64, int64)
def test_offset_commit_values_round_trip(
    version: int, offset: int, epoch: int, metadata: str, commit: int, expire: int
) -> None:
    value = OffsetCommitValue(
        offset,
        epoch if version >= 3 else -1,
        metadata,
        commit,
        expire if version == 1 else -1,
    )
    assert decode_offset_commit_value(encode_offset_commit_value(value, version)) == value


members = st.builds(
    MemberMetadataValue,
    names,
    st.none() | names,
    names,
    names,
    int32,
    int32,
    st.binary(max_size=40),
    st.binary(max_size=40),
)


@settings(max_examples=100)
@given(
    st.integers(1, 4),
    st.builds(
        GroupMetadataValue,
        names,
        int32,
        st.none() | names,
        st.none() | names,
        int64,
        st.lists(members, max_size=4).map(tuple),
    ),
)
def test_group_metadata_values_round_trip(version: int, value: GroupMetadataValue) -> None:
    if version < 3:
        value = GroupMetadataValue(
            value.protocol_type,
            value.generation,
            value.protocol,
            value.leader,
            value.current_state_timestamp if version >= 2 else -1,
            tuple(
                MemberMetadataValue(
                    m.member_id, None, m.client_id, m.client_host, m.rebalance_timeout,
                    m.session_timeout, m.subscription, m.assignment,
                )
                for m in value.members
            ),
        )  # fmt: skip
    assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == value


@settings(max_examples=100)
@given(names, names, int32)
def test_keys_round_trip(group: str, topic: str, partition: int) -> None:
    for key in (OffsetCommitKey(group, topic, partition), GroupMetadataKey(group)):
        assert decode_key(encode_key(key)) == key
