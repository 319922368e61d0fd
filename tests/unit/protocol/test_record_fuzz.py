"""Damaged batches: every reader either succeeds or raises a KafkaError subclass.

A broker parses bytes from the network and from disk; an IndexError or struct.error
escaping a parser would become UNKNOWN_SERVER_ERROR (or crash recovery) instead of
CORRUPT_MESSAGE / INVALID_RECORD.
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiercel.protocol.compression import CompressionType, decompress
from tiercel.protocol.errors import KafkaError
from tiercel.protocol.record_batch import (
    RECORDS_OFFSET,
    TimestampType,
    iter_batches,
    patched_header_prefix,
    patched_timestamp_prefix,
    read_header,
    scan_batches,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records, validate_records

# Small enough that a damaged size field cannot make an example slow.
MAX_SIZE = 256 * 1024


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(1, 6))
    records = [
        SimpleRecord(
            draw(st.none() | st.binary(max_size=20)),
            draw(st.none() | st.binary(max_size=200)),
            draw(
                st.lists(
                    st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
                )
            ),
            draw(st.integers(0, 2**41)),
        )
        for _ in range(n)
    ]
    return build_record_batch(records, compression=draw(st.sampled_from(list(CompressionType))))


@st.composite
def damaged_batches(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(valid_batches()))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


def read_everything(data: bytes) -> None:
    """Drive every reader over `data` as the produce, fetch and recovery paths would."""
    scan_batches(data)
    for _ in iter_batches(data):
        pass
    header = read_header(data)
    patched_header_prefix(data, 1, 2)
    patched_timestamp_prefix(data, 1, 2, TimestampType.LOG_APPEND_TIME, 3)
    records = decompress(header.compression, memoryview(data)[RECORDS_OFFSET:], MAX_SIZE)
    validate_records(records, header.records_count)
    decode_records(records, header.records_count)


def only_kafka_errors(data: bytes) -> None:
    """Each reader on its own, so that one raising does not shield the next."""
    steps = [
        lambda: scan_batches(data),
        lambda: list(iter_batches(data)),
        lambda: patched_header_prefix(data, 1, 2),
        lambda: patched_timestamp_prefix(data, 1, 2, TimestampType.LOG_APPEND_TIME, 3),
        lambda: read_header(data),
    ]
    for step in steps:
        with contextlib.suppress(KafkaError):
            step()
    with contextlib.suppress(KafkaError):
        header = read_header(data)
        payload = memoryview(data)[RECORDS_OFFSET:]
        # The raw section too: a codec bit flipped to 0 hands compressed bytes to it.
        for section in (payload, decompress(header.compression, payload, MAX_SIZE)):
            with contextlib.suppress(KafkaError):
                validate_records(section, header.records_count)
            with contextlib.suppress(KafkaError):
                decode_records(section, header.records_count)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_batches())
def test_damaged_batches_raise_only_kafka_errors(data: bytes) -> None:
    only_kafka_errors(data)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_kafka_errors(data: bytes) -> None:
    only_kafka_errors(data)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([c for c in CompressionType if c]), st.binary(max_size=100))
def test_arbitrary_compressed_payloads_raise_only_kafka_errors(
    codec: CompressionType, data: bytes
) -> None:
    with contextlib.suppress(KafkaError):
        out = decompress(codec, data, MAX_SIZE)
        validate_records(out, 1)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60), st.integers(-3, 40))
def test_arbitrary_records_sections_raise_only_kafka_errors(data: bytes, count: int) -> None:
    for reader in (validate_records, decode_records):
        with contextlib.suppress(KafkaError):
            reader(data, count)


@settings(max_examples=50, deadline=None)
@given(valid_batches())
def test_undamaged_batches_read_cleanly(data: bytes) -> None:
    # The control group: the damage above is what makes readers raise.
    read_everything(data)
