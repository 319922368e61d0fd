"""Varints, the produce-path record validator and the record decoder."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import RECORDS_OFFSET, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import (
    Record,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
    validate_records,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# --- varints ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_varlong_extremes() -> None:
    assert encode_varlong(2**63 - 1).hex() == "feffffffffffffffff01"
    assert encode_varlong(-(2**63)).hex() == "ffffffffffffffffff01"
    assert decode_varlong(bytes.fromhex("ffffffffffffffffff01"), 0) == (-(2**63), 10)


@given(INT32, st.binary(max_size=3))
def test_varint_round_trip(value: int, suffix: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value)
    assert decode_varint(b"\xaa" + encoded + suffix, 1) == (value, 1 + len(encoded))


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value)
    assert decode_varlong(encoded, 0) == (value, len(encoded))


def test_encode_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)


def test_varint_longer_than_five_bytes_is_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="too long"):
        decode_varint(bytes.fromhex("8080808080" + "00"), 0)


def test_varint_fifth_byte_high_bits_are_dropped_as_in_java() -> None:
    # Java's `tmp << 28` keeps only 4 bits of the fifth group.
    assert decode_varint(bytes.fromhex("ffffffff7f"), 0) == (-(2**31), 5)
    assert decode_varint(bytes.fromhex("feffffff7f"), 0) == (2**31 - 1, 5)


def test_varlong_longer_than_ten_bytes_is_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="too long"):
        decode_varlong(bytes.fromhex("80" * 10 + "00"), 0)


def test_truncated_varints_are_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(InvalidRecordError):
        decode_varlong(b"", 0)


# --- records sections ------------------------------------------------------------------

HEADER_KEYS = st.text(max_size=8)
NULLABLE_BYTES = st.none() | st.binary(max_size=300)
SIMPLE_RECORDS = st.lists(
    st.builds(
        SimpleRecord,
        key=NULLABLE_BYTES,
        value=NULLABLE_BYTES,
        headers=st.lists(st.tuples(HEADER_KEYS, st.none() | st.binary(max_size=20)), max_size=3),
        timestamp=st.none() | st.integers(0, 2**42),
    ),
    min_size=1,
    max_size=40,
)


def records_section(records: list[SimpleRecord]) -> tuple[bytes, int, int]:
    """(uncompressed records bytes, count, baseTimestamp) of a built batch."""
    batch = build_record_batch(records)
    header = read_header(batch)
    return batch[RECORDS_OFFSET:], header.records_count, header.base_timestamp


@settings(max_examples=80, deadline=None)
@given(SIMPLE_RECORDS)
def test_validate_and_decode_agree_with_the_input(records: list[SimpleRecord]) -> None:
    data, count, base_timestamp = records_section(records)
    summary = validate_records(data, count)
    decoded = decode_records(data, count)

    timestamps = [-1 if r.timestamp is None else r.timestamp for r in records]
    deltas = [t - base_timestamp for t in timestamps]
    assert summary.count == len(records)
    assert summary.max_timestamp_delta == max(deltas)
    assert summary.min_timestamp_delta == min(deltas)
    assert summary.offset_delta_of_max_timestamp == deltas.index(max(deltas))
    assert summary.null_key_indexes == tuple(i for i, r in enumerate(records) if r.key is None)
    assert decoded == [
        Record(i, d, r.key, r.value, tuple(r.headers))
        for i, (r, d) in enumerate(zip(records, deltas, strict=True))
    ]


@settings(max_examples=40, deadline=None)
@given(SIMPLE_RECORDS, st.binary(max_size=5))
def test_validate_accepts_any_buffer_type_and_start(
    records: list[SimpleRecord], pad: bytes
) -> None:
    data, count, _ = records_section(records)
    expected = validate_records(data, count)
    padded = pad + data
    assert validate_records(memoryview(padded), count, len(pad)) == expected
    assert validate_records(bytearray(padded), count, len(pad)) == expected


@settings(max_examples=40, deadline=None)
@given(SIMPLE_RECORDS)
def test_records_written_by_aiokafka_validate(records: list[SimpleRecord]) -> None:
    # An independent writer of the same format (aiokafka's Cython builder).
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 10**8)
    for offset, r in enumerate(records):
        builder.append(offset, r.timestamp or 0, r.key, r.value, list(r.headers))
    batch = bytes(builder.build())
    count = read_header(batch).records_count
    validate_records(batch, count, RECORDS_OFFSET)
    decoded = decode_records(batch, count, RECORDS_OFFSET)
    assert [(d.key, d.value, d.headers) for d in decoded] == [
        (r.key, r.value, tuple(r.headers)) for r in records
    ]


def raw_record(
    *,
    offset_delta: bytes = b"\x00",
    key: bytes = b"\x01",
    value: bytes = b"\x02v",
    headers: bytes = b"\x00",
    length_adjust: int = 0,
) -> bytes:
    """One hand-assembled record (attributes 0, timestampDelta 0) with chosen fields."""
    body = b"\x00\x00" + offset_delta + key + value + headers
    return encode_varint(len(body) + length_adjust) + body


@pytest.mark.parametrize(
    ("data", "count", "message"),
    [
        (raw_record(), 2, "premature EOF"),
        (raw_record() * 2, 1, "records still remaining"),
        (raw_record(offset_delta=b"\x02"), 1, "Invalid offset delta 1 for record 0"),
        (raw_record() + raw_record(), 2, "Invalid offset delta 0 for record 1"),
        (raw_record(length_adjust=1) + raw_record(offset_delta=b"\x02"), 2, "record size"),
        (raw_record(length_adjust=-1) + b"\x00", 1, "Invalid record size"),
        (raw_record(length_adjust=-100), 1, "Invalid record size"),
        (raw_record(key=b"\x03"), 1, "key size -2"),
        (raw_record(value=b"\x05"), 1, "value size -3"),
        (raw_record(value=b"\xff\x01"), 1, "value size -128"),
        (raw_record(headers=b"\x01"), 1, "invalid number of record headers -1"),
        (raw_record(headers=b"\x7e"), 1, "63 is larger than the remaining"),
        (raw_record(headers=b"\x02\x01\x02v"), 1, "Invalid negative header key size -1"),
        (raw_record(headers=b"\x02\x02k\x03"), 1, "header value size -2"),
        (raw_record(key=b"\x80\x80\x80\x80\x80\x00"), 1, "too long"),
        (b"", 1, "premature EOF"),
    ],
)
def test_validate_rejects(data: bytes, count: int, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        validate_records(data, count)


@pytest.mark.parametrize("count", [0, -1])
def test_validate_rejects_non_positive_counts(count: int) -> None:
    with pytest.raises(InvalidRecordError, match="Invalid reported count"):
        validate_records(b"", count)


def test_the_hand_assembled_record_is_valid() -> None:
    # Guards the rejection cases above: each differs from a valid record in one field.
    data = raw_record(headers=b"\x02\x02k\x01") + raw_record(offset_delta=b"\x02")
    summary = validate_records(data, 2)
    assert summary.null_key_indexes == (0, 1)
    assert decode_records(data, 2)[0] == Record(0, 0, None, b"v", (("k", None),))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (raw_record(key=b"\x03"), "key size -2"),
        (raw_record(headers=b"\x02\x01\x02v"), "Invalid negative header key size"),
        (raw_record(headers=b"\x02\x20k\x00"), "header key size"),
        (raw_record(length_adjust=1) + b"\x00", "Invalid record size"),
        (raw_record() * 2, "records still remaining"),
        (raw_record()[:-1], "premature EOF|Invalid record size"),
    ],
)
def test_decode_rejects(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        decode_records(data, 1)


def test_decode_keeps_out_of_order_offset_deltas_and_replaces_bad_utf8() -> None:
    data = raw_record(offset_delta=b"\x06", headers=b"\x02\x02\xff\x00")
    (record,) = decode_records(data, 1)
    assert record.offset_delta == 3
    assert record.headers == (("\ufffd", b""),)
