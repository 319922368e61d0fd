"""__transaction_state records byte for byte against Kafka's TransactionLogKey v0 and
TransactionLogValue v0/v1 schemas (the expected bytes are laid out field by field from
the schema here, independently of the encoder)."""

from __future__ import annotations

import struct

import pytest

from tiercel.server.coordinator.transaction.transaction_log import (
    MessageFormatError,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    value_from_transit,
)
from tiercel.server.coordinator.transaction.transaction_metadata import (
    TransactionState,
    TxnTransitMetadata,
)
from tiercel.storage.topic_partition import TopicPartition


def test_key_is_version_0_and_a_string() -> None:
    assert encode_key("my-txn") == b"\x00\x00" + b"\x00\x06my-txn"
    assert decode_key(encode_key("my-txn")) == "my-txn"
    assert decode_key(b"\x00\x01\x00\x01x") is None  # an unknown key version


ONGOING = TransactionLogValue(
    producer_id=4000,
    producer_epoch=3,
    transaction_timeout_ms=60000,
    transaction_status=TransactionState.ONGOING,
    partitions=(("a", (0, 2)), ("b", (1,))),
    last_update_timestamp_ms=1_700_000_000_123,
    start_timestamp_ms=1_700_000_000_000,
)


def test_value_v0_layout() -> None:
    expected = (
        struct.pack(">hqhib", 0, 4000, 3, 60000, 1)
        + struct.pack(">i", 2)
        + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    )  # fmt: skip
    assert encode_value(ONGOING) == expected
    assert decode_value(expected) == ONGOING


def test_empty_writes_null_partitions() -> None:
    empty = TransactionLogValue(9, 0, 1000, TransactionState.EMPTY, None, 5, -1)
    data = encode_value(empty)
    assert data == struct.pack(">hqhibiqq", 0, 9, 0, 1000, 0, -1, 5, -1)
    assert decode_value(data) == empty


def test_value_v1_is_flexible_with_tagged_fields() -> None:
    value = TransactionLogValue(
        7, 1, 500, TransactionState.PREPARE_COMMIT, (("t", (4,)),), 20, 10,
        previous_producer_id=6, client_transaction_version=2,
    )  # fmt: skip
    expected = (
        struct.pack(">hqhib", 1, 7, 1, 500, 2)
        + bytes([2])  # compact array: 1 topic + 1
        + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 4) + bytes([0])
        + struct.pack(">qq", 20, 10)
        + bytes([2])  # two tagged fields, in tag order
        + bytes([0, 8]) + struct.pack(">q", 6)
        + bytes([2, 2]) + struct.pack(">h", 2)
    )  # fmt: skip
    assert encode_value(value, version=1) == expected
    assert decode_value(expected) == value
    # Defaults are not written: a v1 value without tags ends with a zero count.
    plain = TransactionLogValue(7, 1, 500, TransactionState.EMPTY, None, 20, -1)
    assert encode_value(plain, version=1).endswith(struct.pack(">qq", 20, -1) + b"\x00")
    assert decode_value(encode_value(plain, version=1)) == plain


def test_bad_values_are_refused() -> None:
    with pytest.raises(MessageFormatError):
        decode_value(struct.pack(">h", 2) + b"\x00" * 40)
    bad_status = bytearray(encode_value(ONGOING))
    bad_status[16] = 9
    with pytest.raises(MessageFormatError):
        decode_value(bytes(bad_status))
    with pytest.raises(MessageFormatError):
        decode_value(encode_value(ONGOING) + b"\x00")


def test_transit_round_trip() -> None:
    transit = TxnTransitMetadata(
        producer_id=11,
        last_producer_id=-1,
        producer_epoch=2,
        last_producer_epoch=-1,
        txn_timeout_ms=3000,
        txn_state=TransactionState.PREPARE_ABORT,
        topic_partitions=frozenset({TopicPartition("x", 1), TopicPartition("x", 0)}),
        txn_start_timestamp=100,
        txn_last_update_timestamp=200,
    )
    value = value_from_transit(transit)
    assert value.partitions == (("x", (0, 1)),)
    assert decode_value(encode_value(value)).to_transit() == transit
    with pytest.raises(ValueError, match="Empty"):
        value_from_transit(
            TxnTransitMetadata(1, -1, 0, -1, 1, TransactionState.EMPTY,
                               frozenset({TopicPartition("x", 0)}), -1, 0)
        )  # fmt: skip
