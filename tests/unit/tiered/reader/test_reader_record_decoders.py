"""The reader's two record decoders (tiered.reader.record_columns) against each other:
the native one (the C extension) and the pure-Python fallback give equal Arrow batches
for every records section, valid or broken, and raise InvalidRecordError for the same
broken ones: hypothesis-generated batches (nulls, empty and 3-byte-varint sizes,
headers, 10-byte timestamp deltas, offset clips, LogAppendTime), the same batches
corrupted byte by byte, and hand-made malformed framing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from support.reader_rows import arrow_bytes, header_pairs, produced_headers
from support.tiering import BASE_TS
from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import RECORD_BATCH_OVERHEAD, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import encode_varint, encode_varlong
from tiercel.tiered.reader import record_columns
from tiercel.tiered.reader.record_columns import PythonRecordColumns, RecordColumns

pytestmark = pytest.mark.skipif(
    not record_columns.native_available(), reason="the native decoder is not built"
)

# (records, count, base_offset, base_timestamp, log_append_time, first, last)
Section = tuple[bytes | bytearray, int, int, int, int | None, int, int]
Outcome = pa.RecordBatch | type[InvalidRecordError]
WHOLE = 2**62  # a batch_bytes no test reaches: every section in one call


def native(include_headers: bool) -> RecordColumns:
    return record_columns.NativeRecordColumns(include_headers)


def python(include_headers: bool) -> RecordColumns:
    return PythonRecordColumns(include_headers)


def decode(
    make: Callable[[bool], RecordColumns], sections: list[Section], headers: bool
) -> Outcome:
    columns = make(headers)
    try:
        for section in sections:
            assert columns.append_records(*section, 0, WHOLE) == (len(section[0]), 0)
    except InvalidRecordError:
        return InvalidRecordError
    return columns.to_arrow("t", 3)


def assert_same(sections: list[Section], headers: bool) -> Outcome:
    """Both decoders' outcome, asserted equal."""
    mine, theirs = decode(native, sections, headers), decode(python, sections, headers)
    if isinstance(mine, pa.RecordBatch) and isinstance(theirs, pa.RecordBatch):
        mine.validate(full=True)
        assert mine.equals(theirs), (mine.to_pylist(), theirs.to_pylist())
    else:
        assert mine is theirs
    return mine


sizes = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.integers(8180, 8300).map(lambda n: b"v" * n),  # a 3-byte length varint
)
headers_of = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=12))), max_size=3
)
records_of = st.lists(
    st.builds(
        SimpleRecord,
        key=sizes,
        value=sizes,
        headers=headers_of,
        timestamp=st.one_of(st.none(), st.integers(0, 2**62)),
    ),
    min_size=1,
    max_size=12,
)


@st.composite
def sections_of(draw: st.DrawFn) -> Section:
    """A valid records section of a built batch, with an offset clip around it."""
    records = draw(records_of)
    base = draw(st.integers(0, 2**40))
    batch = build_record_batch(records, base_offset=base)
    header = read_header(batch)
    log_append = draw(st.one_of(st.none(), st.integers(0, 2**50)))
    first = base + draw(st.integers(-2, len(records)))
    last = first + draw(st.integers(-1, len(records) + 1))
    return (
        batch[RECORD_BATCH_OVERHEAD:],
        header.records_count,
        base,
        header.base_timestamp,
        log_append,
        first,
        last,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sections_of(), min_size=1, max_size=3), st.booleans())
def test_valid_sections_decode_alike(sections: list[Section], headers: bool) -> None:
    outcome = assert_same(sections, headers)
    assert isinstance(outcome, pa.RecordBatch)
    clipped = [
        base + i
        for records, count, base, _, _, first, last in sections
        for i in range(count)
        if first <= base + i <= last
    ]
    assert outcome.column("offset").to_pylist() == clipped


def test_the_rows_are_the_records_produced() -> None:
    """Not only equal to each other: equal to what was produced, past the one-byte
    varints (200 records: offset deltas of 2 bytes; 9000-byte values: 3-byte sizes)."""
    records = [
        SimpleRecord(
            None if i % 5 == 0 else f"k{i}".encode(),
            None if i % 7 == 0 else bytes([i % 251]) * (9000 if i % 50 == 1 else i),
            [("h", None), ("g\u00e9", b"x")][: i % 3],
            BASE_TS + i * 1_000_000_007,
        )
        for i in range(200)
    ]
    batch = build_record_batch(records, base_offset=1000)
    section: Section = (
        batch[RECORD_BATCH_OVERHEAD:],
        200,
        1000,
        BASE_TS,
        None,
        1001,
        1198,
    )
    outcome = assert_same([section], True)
    assert isinstance(outcome, pa.RecordBatch)
    rows = outcome.to_pylist()
    assert [r["offset"] for r in rows] == list(range(1001, 1199))
    for row, produced in zip(rows, records[1:199], strict=True):
        assert (row["key"], row["value"]) == (produced.key, produced.value)
        assert header_pairs(row["headers"]) == produced_headers(produced.headers)
        assert int(row["timestamp"].timestamp() * 1000) == produced.timestamp
        assert (row["topic"], row["partition"], row["timestampType"]) == ("t", 3, 0)


@pytest.mark.parametrize("make", [native, python], ids=["native", "python"])
def test_a_record_without_headers_has_null_headers(make: Callable[[bool], RecordColumns]) -> None:
    """Spark's Kafka source gives a record with no headers a null ``headers`` cell
    (KafkaRecordToRowConverter), not an empty list: ``headers IS NULL`` finds it."""
    records = [
        SimpleRecord(b"k", b"v", [], BASE_TS),
        SimpleRecord(b"k", b"v", [("h", b"x"), ("n", None)], BASE_TS),
        SimpleRecord(None, None, [], BASE_TS),
        SimpleRecord(b"k", None, [("", b"")], BASE_TS),
    ]
    batch = build_record_batch(records)
    columns = make(True)
    columns.append_records(batch[RECORD_BATCH_OVERHEAD:], 4, 0, BASE_TS, None, 0, 3, 0, WHOLE)
    headers = columns.to_arrow("t", 0).column("headers")
    headers.validate(full=True)
    assert headers.null_count == 2
    assert headers.to_pylist() == [
        None,
        [{"key": "h", "value": b"x"}, {"key": "n", "value": None}],
        None,
        [{"key": "", "value": b""}],
    ]


def decode_batches(
    make: Callable[[bool], RecordColumns], sections: list[Section], headers: bool, limit: int
) -> list[pa.RecordBatch]:
    """The sections decoded into Arrow batches of about ``limit`` bytes each, as
    record_batches.ArrowBatcher takes them from the decoder."""
    columns, batches = make(headers), []
    for records, count, *clip in sections:
        start = 0
        while True:
            start, count = columns.append_records(records, count, *clip, start, limit)
            if count or columns.batch_bytes >= limit:
                batches.append(columns.to_arrow("t", 3))
                columns = make(headers)
            if not count:
                break
    if len(columns):
        batches.append(columns.to_arrow("t", 3))
    return batches


def assert_bounded(batches: list[pa.RecordBatch], limit: int) -> None:
    """Each batch stops at the record that makes it hold ``limit`` bytes (the last one
    may hold fewer), counting keys, values, headers and the offsets beside them."""
    for batch in batches:
        assert batch.num_rows > 0
        assert arrow_bytes(batch.slice(0, batch.num_rows - 1)) < limit
    for batch in batches[:-1]:
        assert arrow_bytes(batch) >= limit


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sections_of(), min_size=1, max_size=3), st.booleans(), st.integers(1, 20_000))
def test_sections_split_into_the_same_bounded_batches(
    sections: list[Section], headers: bool, limit: int
) -> None:
    """Both decoders stop a batch mid-section at the record that fills it and resume
    there; together the batches are the whole decode."""
    mine = decode_batches(native, sections, headers, limit)
    theirs = decode_batches(python, sections, headers, limit)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        a.validate(full=True)
        assert a.equals(b), (a.to_pylist(), b.to_pylist())
    assert_bounded(mine, limit)
    whole = assert_same(sections, headers)
    assert isinstance(whole, pa.RecordBatch)
    assert pa.Table.from_batches(mine, whole.schema).equals(pa.Table.from_batches([whole]))


@pytest.mark.parametrize("make", [native, python], ids=["native", "python"])
@pytest.mark.parametrize(
    "record",
    [
        SimpleRecord(b"k" * 1000, None, [], BASE_TS),
        SimpleRecord(None, b"", [("h" * 500, b"x" * 500)], BASE_TS),
        SimpleRecord(None, None, [("", None)] * 50, BASE_TS),
        SimpleRecord(None, None, [], BASE_TS),
    ],
    ids=["keys", "headers", "empty headers", "nothing"],
)
def test_records_without_values_fill_batches_too(
    make: Callable[[bool], RecordColumns], record: SimpleRecord
) -> None:
    """Keys, headers and the columns beside them count, not only values: one large
    batch of records with null or empty values comes as several bounded Arrow batches
    (it came as one, however large)."""
    batch = build_record_batch([record] * 2000)
    section: Section = (batch[RECORD_BATCH_OVERHEAD:], 2000, 0, BASE_TS, None, 0, 1999)
    batches = decode_batches(make, [section], True, 16 * 1024)
    assert len(batches) > 3
    assert_bounded(batches, 16 * 1024)
    assert sum(b.num_rows for b in batches) == 2000


@st.composite
def corrupted(draw: st.DrawFn) -> Section:
    """A valid section with one to three bytes changed, cut, inserted, or a wrong
    record count."""
    records, count, base, base_ts, log_append, first, last = draw(sections_of())
    data = bytearray(records)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["byte", "cut", "insert", "count"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "byte" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0x03, 0x7E]))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=12))
        else:
            count += draw(st.sampled_from([-2, -1, 1, 2]))
    return bytes(data), count, base, base_ts, log_append, first, last


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corrupted(), st.booleans())
def test_corrupted_sections_fail_or_decode_alike(section: Section, headers: bool) -> None:
    outcome = assert_same([section], headers)
    event("error" if outcome is InvalidRecordError else "decoded")


def framed(
    body: bytes | None = None,
    *,
    key: bytes = encode_varint(1) + b"k",
    value: bytes = encode_varint(1) + b"v",
    headers: bytes = encode_varint(0),
    timestamp_delta: int = 0,
    offset_delta: int = 0,
) -> bytes:
    """One record: its length varint, then attributes, deltas, key, value, headers."""
    if body is None:
        body = (
            b"\x00"
            + encode_varlong(timestamp_delta)
            + encode_varint(offset_delta)
            + key
            + value
            + headers
        )
    return encode_varint(len(body)) + body


MALFORMED: dict[str, tuple[bytes, int]] = {
    "no bytes for the counted record": (b"", 1),
    "a length varint cut short": (b"\x80", 1),
    "a length varint of six bytes": (b"\xff" * 6 + b"\x00", 1),
    "a record longer than the section": (encode_varint(40) + b"\x00" * 10, 1),
    "a zero record length": (encode_varint(0) + framed(), 2),
    "a negative record length": (encode_varint(-3) + b"\x00" * 4, 1),
    "a key length of -2": (framed(key=encode_varint(-2)), 1),
    "a key past the record": (framed(key=encode_varint(9) + b"k"), 1),
    "a value length of -7": (framed(value=encode_varint(-7)), 1),
    "a value past the record": (framed(value=encode_varint(90) + b"v"), 1),
    "a timestamp varlong of eleven bytes": (framed(b"\x00" + b"\xff" * 10 + b"\x00" * 6), 1),
    "a negative header count": (framed(headers=encode_varint(-1)), 1),
    "more headers than bytes": (framed(headers=encode_varint(5) + b"\x00"), 1),
    "a null header key": (framed(headers=encode_varint(1) + encode_varint(-1) + b"\x00"), 1),
    "a header value past the record": (
        framed(headers=encode_varint(1) + encode_varint(1) + b"h" + encode_varint(30)),
        1,
    ),
    "more records than the count": (framed() + framed(offset_delta=1), 1),
    "fewer records than the count": (framed() + framed(offset_delta=1), 3),
}


@pytest.mark.parametrize("make", [native, python], ids=["native", "python"])
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_framing_is_an_invalid_record(
    make: Callable[[bool], RecordColumns], case: str
) -> None:
    records, count = MALFORMED[case]
    with pytest.raises(InvalidRecordError):
        make(True).append_records(records, count, 0, BASE_TS, None, 0, 10, 0, WHOLE)


def with_spare_bytes(spare: bytes, headers: bytes = encode_varint(0)) -> bytes:
    """One record whose length counts ``spare`` bytes past its last field."""
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(1) + b"k"
    return framed(body + encode_varint(1) + b"v" + headers + spare)


@pytest.mark.parametrize("make", [native, python], ids=["native", "python"])
@pytest.mark.parametrize("include_headers", [True, False], ids=["headers", "no-headers"])
@pytest.mark.parametrize("clip", [(0, 10), (5, 10)], ids=["read", "clipped-out"])
@pytest.mark.parametrize(
    "record",
    [
        with_spare_bytes(b"\x00"),
        with_spare_bytes(b"junk"),
        with_spare_bytes(b"\x00", headers=encode_varint(1) + encode_varint(1) + b"h" + b"\x01"),
    ],
    ids=["a spare zero", "spare junk", "spare after a header"],
)
def test_fields_short_of_the_record_length_are_an_invalid_record(
    make: Callable[[bool], RecordColumns],
    include_headers: bool,
    clip: tuple[int, int],
    record: bytes,
) -> None:
    """Kafka's DefaultRecord.readFrom (and protocol.records) refuses a record whose
    fields end before its length: so do both decoders, headers asked for or not, and
    for a record outside the offset clip too."""
    with pytest.raises(InvalidRecordError, match="expected to read"):
        make(include_headers).append_records(record, 1, 0, BASE_TS, None, *clip, 0, WHOLE)


@pytest.mark.parametrize("make", [native, python], ids=["native", "python"])
def test_a_timestamp_past_a_long_is_an_invalid_record(
    make: Callable[[bool], RecordColumns],
) -> None:
    records = framed(timestamp_delta=100)
    with pytest.raises(InvalidRecordError, match="timestamp out of range"):
        make(False).append_records(records, 1, 0, 2**63 - 10, None, 0, 10, 0, WHOLE)


def test_the_native_columns_start_empty_after_each_arrow_batch() -> None:
    """Its buffers go to the Arrow batch (no copy); what follows is a new batch."""
    columns = native(True)
    columns.append_records(framed(), 1, 5, BASE_TS, None, 0, 10, 0, WHOLE)
    first = columns.to_arrow("t", 0)
    assert len(columns) == 0
    columns.append_records(framed(offset_delta=1), 1, 5, BASE_TS, None, 0, 10, 0, WHOLE)
    second = columns.to_arrow("t", 0)
    del columns
    assert first.column("offset").to_pylist() == [5]
    assert second.column("offset").to_pylist() == [6]
    assert first.column("value").to_pylist() == second.column("value").to_pylist() == [b"v"]


def test_native_decoders_in_threads_decode_alike() -> None:
    """The native walk runs without the GIL: four threads, one decoder each, at once."""
    records = [SimpleRecord(f"k{i}".encode(), b"v" * i, [("h", b"x")], BASE_TS) for i in range(300)]
    batch = build_record_batch(records)
    section: Section = (batch[RECORD_BATCH_OVERHEAD:], 300, 0, BASE_TS, None, 0, 299)
    expected = decode(python, [section] * 20, True)
    results: list[Any] = []

    def run() -> None:
        results.append(decode(native, [section] * 20, True))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert all(r.equals(expected) for r in results)


def test_the_environment_variable_forces_the_python_decoder() -> None:
    script = (
        "from tiercel.tiered.reader.record_columns import new_record_columns;"
        "print(type(new_record_columns(False)).__name__)"
    )

    def chosen(value: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "TIERCEL_READER_PURE_PYTHON"}
        if value is not None:
            env["TIERCEL_READER_PURE_PYTHON"] = value
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    assert chosen("1") == "PythonRecordColumns"
    assert chosen(None) == chosen("0") == "NativeRecordColumns"
