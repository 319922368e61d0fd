import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.storage.abstract_index import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
)
from tiercel.storage.file_names import time_index_file
from tiercel.storage.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

BASE = 500


def contents(index: TimeIndex) -> list[tuple[int, int]]:
    return [(e.timestamp, e.offset) for e in map(index.entry, range(index.entries))]


def test_file_bytes_are_kafkas(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, BASE)
    index = TimeIndex(path, BASE)
    index.maybe_append(1_700_000_000_000, BASE + 7)
    assert Path(path).read_bytes() == struct.pack(">qi", 1_700_000_000_000, 7)
    assert Path(path).read_bytes() == b"\x00\x00\x01\x8b\xcf\xe5h\x00\x00\x00\x00\x07"
    index.close()


def test_empty_index(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", BASE)
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)
    assert index.lookup(10**15) == TimestampOffset(NO_TIMESTAMP, BASE)
    # Records without timestamps (NO_TIMESTAMP) never make an entry.
    index.maybe_append(NO_TIMESTAMP, BASE + 3)
    assert index.entries == 0


def test_appends_only_when_the_timestamp_grows(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", BASE)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 4)  # equal timestamp: ignored (as on segment roll)
    index.maybe_append(150, BASE + 4)
    index.maybe_append(150, BASE + 4)
    index.maybe_append(160, BASE + 4)  # same offset, later timestamp: kept, like Kafka
    assert contents(index) == [(100, BASE + 1), (150, BASE + 4), (160, BASE + 4)]
    with pytest.raises(ValueError):
        index.maybe_append(120, BASE + 9)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(200, BASE + 3)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(200, BASE + 2**31)
    assert index.last_entry == TimestampOffset(160, BASE + 4)
    assert os.path.getsize(index.path) == 36


def test_lookup(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", BASE)
    for timestamp, offset in [(100, 510), (200, 520), (300, 530)]:
        index.maybe_append(timestamp, offset)
    assert index.lookup(99) == TimestampOffset(NO_TIMESTAMP, BASE)
    assert index.lookup(100) == TimestampOffset(100, 510)
    assert index.lookup(299) == TimestampOffset(200, 520)
    assert index.lookup(10**15) == TimestampOffset(300, 530)
    with pytest.raises(IndexError):
        index.entry(3)


def test_last_slot_is_reserved_for_roll(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", BASE, max_index_size=12 * 3)
    index.maybe_append(1, BASE)
    assert not index.is_full
    index.maybe_append(2, BASE + 1)
    assert index.is_full
    with pytest.raises(ValueError):
        index.maybe_append(3, BASE + 2)
    index.maybe_append(3, BASE + 2, skip_full_check=True)
    assert index.entries == 3
    with pytest.raises(ValueError):
        index.maybe_append(4, BASE + 3, skip_full_check=True)
    # An entry that would not be stored is harmless even when full.
    index.maybe_append(3, BASE + 3, skip_full_check=True)


def test_truncate_to(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", BASE)
    for timestamp, offset in [(100, 510), (200, 520), (210, 520), (300, 530)]:
        index.maybe_append(timestamp, offset)
    index.truncate_to(521)
    assert contents(index) == [(100, 510), (200, 520), (210, 520)]
    index.truncate_to(520)
    assert contents(index) == [(100, 510)]
    assert index.last_entry == TimestampOffset(100, 510)
    assert os.path.getsize(index.path) == 12
    index.truncate()
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)


steps = st.lists(
    st.tuples(st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=20)),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(steps=steps, data=st.data())
def test_matches_a_brute_force_model(steps: list[tuple[int, int]], data: st.DataObject) -> None:
    model: list[tuple[int, int]] = []
    timestamp, offset = 1000, BASE
    with tempfile.TemporaryDirectory() as d:
        index = TimeIndex(os.path.join(d, "t.timeindex"), BASE)
        for timestamp_step, offset_step in steps:
            timestamp += timestamp_step
            offset += offset_step
            index.maybe_append(timestamp, offset)
            if not model or timestamp > model[-1][0]:
                model.append((timestamp, offset))
        assert contents(index) == model
        for target in data.draw(st.lists(st.integers(990, timestamp + 5), max_size=20)):
            below = [entry for entry in model if entry[0] <= target]
            found = index.lookup(target)
            assert (found.timestamp, found.offset) == (below[-1] if below else (NO_TIMESTAMP, BASE))
        reopened = TimeIndex(index.path, BASE)
        reopened.sanity_check()
        assert contents(reopened) == model
        assert reopened.last_entry == index.last_entry
        cut = data.draw(st.integers(BASE - 2, offset + 2))
        index.truncate_to(cut)
        model = [entry for entry in model if entry[1] < cut]
        assert contents(index) == model
        assert contents(TimeIndex(index.path, BASE)) == model
        index.close()


def write_entries(path: Path, entries: list[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">qi", *entry) for entry in entries) + tail)


@pytest.mark.parametrize(
    ("entries", "tail"),
    [
        ([(100, 1), (200, 2)], b"\x00" * 11),
        ([(100, 1), (100, 2)], b""),  # timestamps not increasing
        ([(200, 1), (100, 2)], b""),
        ([(100, 2), (200, 1)], b""),  # offsets decrease
        ([(100, -3), (200, 1)], b""),  # below the base offset
        ([(100, 1), (200, 2)] + [(0, 0)] * 3, b""),  # Kafka's preallocated zeros
    ],
)
def test_sanity_check_detects_corruption(
    tmp_path: Path, entries: list[tuple[int, int]], tail: bytes
) -> None:
    path = tmp_path / "t.timeindex"
    write_entries(path, entries, tail)
    index = TimeIndex(path, BASE)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()
    index.truncate()
    index.sanity_check()


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=2, max_value=30),
    kind=st.sampled_from(["torn tail", "repeated timestamp", "offset goes back"]),
    data=st.data(),
)
def test_random_corruption_is_detected(count: int, kind: str, data: st.DataObject) -> None:
    entries = [(1000 + 10 * n, 3 * n) for n in range(count)]
    tail = b""
    at = data.draw(st.integers(1, count - 1))
    if kind == "torn tail":
        tail = data.draw(st.binary(min_size=1, max_size=11))
    elif kind == "repeated timestamp":
        entries[at] = (entries[at - 1][0], entries[at][1])
    else:
        entries[at] = (entries[at][0], entries[at - 1][1] - 1)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.timeindex"
        write_entries(path, entries, tail)
        with pytest.raises(CorruptIndexError):
            TimeIndex(path, BASE).sanity_check()
