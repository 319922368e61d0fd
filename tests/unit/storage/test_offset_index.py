import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage.abstract_index import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
)
from tiercel.storage.file_names import DELETED_FILE_SUFFIX, offset_index_file
from tiercel.storage.offset_index import OffsetIndex, OffsetPosition

BASE = 1000


def open_fds_to(path: str) -> int:
    fds = os.listdir("/proc/self/fd")
    targets = []
    for fd in fds:
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return targets.count(os.path.realpath(path))


def test_file_bytes_are_kafkas(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, BASE)
    index = OffsetIndex(path, BASE)
    assert Path(path).read_bytes() == b""
    index.append(1005, 4096)
    index.append(BASE + 2**31 - 1, 2**31 - 1)
    assert Path(path).read_bytes() == (
        b"\x00\x00\x00\x05\x00\x00\x10\x00" + b"\x7f\xff\xff\xff" * 2
    )
    assert index.size_in_bytes == 16
    index.close()


def test_lookup_finds_the_largest_entry_at_or_below(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", BASE)
    assert index.lookup(BASE + 50) == OffsetPosition(BASE, 0)
    for offset, position in [(1010, 100), (1020, 200), (1030, 300)]:
        index.append(offset, position)
    assert index.lookup(0) == OffsetPosition(BASE, 0)
    assert index.lookup(1009) == OffsetPosition(BASE, 0)
    assert index.lookup(1010) == OffsetPosition(1010, 100)
    assert index.lookup(1029) == OffsetPosition(1020, 200)
    assert index.lookup(2**63 - 1) == OffsetPosition(1030, 300)
    assert index.entry(1) == OffsetPosition(1020, 200)
    assert index.last_offset == 1030
    assert index.entries == 3
    with pytest.raises(IndexError):
        index.entry(3)
    with pytest.raises(IndexError):
        index.entry(-1)


def test_append_validation(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", BASE, max_index_size=8 * 3 + 7)
    assert index.max_entries == 3
    assert index.last_offset == BASE
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE + 2**31, 0)
    with pytest.raises(ValueError):
        index.append(BASE + 1, -1)
    index.append(BASE, 0)  # the first entry may sit at the base offset
    with pytest.raises(InvalidOffsetError):
        index.append(BASE, 10)
    index.append(BASE + 1, 10)
    index.append(BASE + 2, 20)
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(BASE + 3, 30)
    assert os.path.getsize(index.path) == 24
    # Smaller than one entry (segment.index.bytes may be as low as 4): always full.
    tiny = OffsetIndex(tmp_path / "tiny.index", BASE, max_index_size=7)
    assert tiny.is_full
    with pytest.raises(ValueError):
        tiny.append(BASE, 0)
    with pytest.raises(ValueError):
        OffsetIndex(tmp_path / "negative.index", BASE, max_index_size=-1)


def test_truncate_to_drops_entries_at_or_after_and_shrinks_the_file(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", BASE)
    for n in range(1, 6):
        index.append(BASE + 10 * n, 100 * n)
    index.truncate_to(BASE + 35)
    assert [index.entry(n).offset for n in range(index.entries)] == [1010, 1020, 1030]
    index.truncate_to(BASE + 30)
    assert index.last_offset == 1020
    assert os.path.getsize(index.path) == 16
    index.append(BASE + 25, 250)
    assert OffsetIndex(index.path, BASE).lookup(2000) == OffsetPosition(1025, 250)
    index.truncate()
    assert index.entries == 0
    assert os.path.getsize(index.path) == 0


offset_steps = st.lists(
    st.tuples(st.integers(min_value=1, max_value=1000), st.integers(min_value=0, max_value=5000)),
    max_size=60,
)


def model_lookup(entries: list[tuple[int, int]], target: int) -> tuple[int, int]:
    below = [entry for entry in entries if entry[0] <= target]
    return below[-1] if below else (BASE, 0)


@settings(max_examples=60, deadline=None)
@given(steps=offset_steps, first=st.integers(0, 3), data=st.data())
def test_matches_a_brute_force_model(
    steps: list[tuple[int, int]], first: int, data: st.DataObject
) -> None:
    entries: list[tuple[int, int]] = []
    offset, position = BASE + first, 0
    for offset_step, position_step in steps:
        entries.append((offset, position))
        offset += offset_step
        position += position_step
    with tempfile.TemporaryDirectory() as d:
        index = OffsetIndex(os.path.join(d, "i.index"), BASE)
        for entry in entries:
            index.append(*entry)
        targets = data.draw(st.lists(st.integers(BASE - 5, offset + 5), max_size=20))
        for target in targets:
            assert (index.lookup(target).offset, index.lookup(target).position) == model_lookup(
                entries, target
            )
        reopened = OffsetIndex(index.path, BASE)
        reopened.sanity_check()
        assert [
            (e.offset, e.position) for e in map(reopened.entry, range(reopened.entries))
        ] == entries
        cut = data.draw(st.integers(BASE - 5, offset + 5))
        index.truncate_to(cut)
        kept = [entry for entry in entries if entry[0] < cut]
        assert [(e.offset, e.position) for e in map(index.entry, range(index.entries))] == kept
        assert os.path.getsize(index.path) == 8 * len(kept)
        assert OffsetIndex(index.path, BASE).entries == len(kept)
        index.close()
        reopened.close()


def write_entries(path: Path, entries: list[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">ii", *entry) for entry in entries) + tail)


@pytest.mark.parametrize(
    ("entries", "tail"),
    [
        ([(1, 10), (2, 20)], b"\x00\x00\x00"),  # torn last entry
        ([(1, 10), (1, 20)], b""),  # offsets not increasing
        ([(2, 10), (1, 20)], b""),
        ([(-1, 0), (2, 20)], b""),  # below the base offset
        ([(1, 10), (2, 5)], b""),  # positions go backwards
        ([(1, 10), (2, 20)] + [(0, 0)] * 4, b""),  # Kafka's preallocated zeros after a crash
    ],
)
def test_sanity_check_detects_corruption(
    tmp_path: Path, entries: list[tuple[int, int]], tail: bytes
) -> None:
    path = tmp_path / "i.index"
    write_entries(path, entries, tail)
    index = OffsetIndex(path, BASE)
    with pytest.raises(CorruptIndexError) as raised:
        index.sanity_check()
    assert str(path) in str(raised.value)
    assert isinstance(raised.value, KafkaStorageError)
    # Rebuilding starts from an empty index.
    index.truncate()
    index.sanity_check()
    assert path.read_bytes() == b""


def test_an_append_after_a_torn_tail_overwrites_it(tmp_path: Path) -> None:
    path = tmp_path / "i.index"
    write_entries(path, [(1, 10)], b"\xff\xff\xff")
    index = OffsetIndex(path, BASE)
    assert index.entries == 1
    index.append(BASE + 2, 20)
    assert path.read_bytes() == struct.pack(">iiii", 1, 10, 2, 20)
    index.sanity_check()


def test_descriptor_is_opened_on_first_mutation_and_released_on_close(tmp_path: Path) -> None:
    path = tmp_path / "i.index"
    write_entries(path, [(1, 10)])
    index = OffsetIndex(path, BASE)
    assert open_fds_to(str(path)) == 0
    index.append(BASE + 2, 20)
    assert open_fds_to(str(path)) == 1
    index.flush()
    index.close()
    assert open_fds_to(str(path)) == 0
    assert index.lookup(BASE + 5) == OffsetPosition(BASE + 2, 20)
    with pytest.raises(ValueError):
        index.append(BASE + 3, 30)
    index.flush()  # nothing open: a no-op


def test_rename_and_delete(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", BASE)
    index.append(BASE + 1, 10)
    deleted = index.path + DELETED_FILE_SUFFIX
    index.rename_to(deleted)
    assert index.path == deleted
    index.append(BASE + 2, 20)  # the open descriptor follows the file
    assert os.path.getsize(deleted) == 16
    assert not (tmp_path / "i.index").exists()
    assert index.delete() is True
    assert not os.path.exists(deleted)
    assert index.delete() is False


def test_rename_before_any_write(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", BASE)
    index.rename_to(tmp_path / "j.index")
    index.append(BASE + 1, 10)
    assert (tmp_path / "j.index").read_bytes() == struct.pack(">ii", 1, 10)
    index.close()
    with pytest.raises(KafkaStorageError):
        index.rename_to(tmp_path / "missing" / "k.index")
    assert index.path == str(tmp_path / "j.index")


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=2, max_value=30),
    kind=st.sampled_from(["torn tail", "repeated offset", "below base"]),
    data=st.data(),
)
def test_random_corruption_is_detected(count: int, kind: str, data: st.DataObject) -> None:
    entries = [(3 * n + 1, 100 * n) for n in range(count)]
    tail = b""
    if kind == "torn tail":
        tail = data.draw(st.binary(min_size=1, max_size=7))
    elif kind == "repeated offset":
        at = data.draw(st.integers(1, count - 1))
        entries[at] = (entries[at - 1][0], entries[at][1])
    else:
        entries[0] = (data.draw(st.integers(-(2**31), -1)), 0)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "i.index"
        write_entries(path, entries, tail)
        index = OffsetIndex(path, BASE)
        with pytest.raises(CorruptIndexError):
            index.sanity_check()
