"""Producer snapshot files: Kafka's ProducerSnapshot v1 layout byte by byte, round trips,
and every way a file can be unusable (version, CRC, truncation)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.storage.producer_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_offsets,
    read_snapshot_file,
    write_snapshot_file,
)
from tiercel.storage.producer_state_entry import BatchMetadata, ProducerStateEntry

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
BATCH = BatchMetadata(41, 123, 4, 1_700_000_000_000)


def entry(
    producer_id: int = 1000,
    epoch: int = 3,
    batch: BatchMetadata | None = BATCH,
    coordinator_epoch: int = -1,
    txn: int | None = None,
) -> ProducerStateEntry:
    timestamp = batch.timestamp if batch is not None else 1_600_000_000_000
    return ProducerStateEntry(producer_id, epoch, coordinator_epoch, timestamp, txn, batch)


def fields(e: ProducerStateEntry) -> tuple[object, ...]:
    return (
        e.producer_id,
        e.producer_epoch,
        e.coordinator_epoch,
        e.last_timestamp,
        e.current_txn_first_offset,
        tuple(e.batch_metadata),
    )


def test_layout_is_kafkas_producer_snapshot_v1() -> None:
    data = encode_snapshot([entry(txn=77, coordinator_epoch=9)])
    assert len(data) == 2 + 4 + 4 + 46
    assert data[0:2] == b"\x00\x01"  # version 1
    assert data[6:10] == b"\x00\x00\x00\x01"  # one entry
    assert struct.unpack_from(">I", data, 2)[0] == crc32c.crc32c(data[6:])
    pos = 10
    assert data[pos : pos + 8] == (1000).to_bytes(8, "big")  # ProducerId
    assert data[pos + 8 : pos + 10] == (3).to_bytes(2, "big")  # Epoch
    assert data[pos + 10 : pos + 14] == (41).to_bytes(4, "big")  # LastSequence
    assert data[pos + 14 : pos + 22] == (123).to_bytes(8, "big")  # LastOffset
    assert data[pos + 22 : pos + 26] == (4).to_bytes(4, "big")  # OffsetDelta
    assert data[pos + 26 : pos + 34] == (1_700_000_000_000).to_bytes(8, "big")  # Timestamp
    assert data[pos + 34 : pos + 38] == (9).to_bytes(4, "big")  # CoordinatorEpoch
    assert data[pos + 38 : pos + 46] == (77).to_bytes(8, "big")  # CurrentTxnFirstOffset


def test_an_entry_without_batches_is_written_with_kafkas_sentinels() -> None:
    data = encode_snapshot([entry(batch=None)])
    last_seq, last_offset, delta, timestamp, _, txn = struct.unpack_from(">iqiqiq", data, 20)
    assert (last_seq, last_offset, delta, txn) == (-1, -1, 0, -1)
    assert timestamp == 1_600_000_000_000
    (decoded,) = decode_snapshot(data)
    assert decoded.is_empty and decoded.producer_epoch == 3


def test_an_empty_state_is_ten_bytes() -> None:
    data = encode_snapshot([])
    assert data[:2] == b"\x00\x01" and data[6:] == b"\x00\x00\x00\x00"
    assert decode_snapshot(data) == []


def test_entries_are_written_in_producer_id_order() -> None:
    data = encode_snapshot([entry(producer_id=9), entry(producer_id=2), entry(producer_id=5)])
    assert [e.producer_id for e in decode_snapshot(data)] == [2, 5, 9]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            INT16,
            INT32,
            st.one_of(
                st.none(),
                st.tuples(INT32, st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1), INT64),
            ),
            st.one_of(st.none(), st.integers(0, 2**63 - 1)),
        ),
        max_size=20,
        unique_by=lambda t: t[0],
    )
)
@settings(max_examples=50)
def test_round_trip(raw: list[tuple[int, int, int, object, int | None]]) -> None:
    entries = []
    for producer_id, epoch, coordinator_epoch, batch, txn in raw:
        metadata = BatchMetadata(*batch) if isinstance(batch, tuple) else None  # type: ignore[arg-type]
        timestamp = metadata.timestamp if metadata else 5
        entries.append(
            ProducerStateEntry(producer_id, epoch, coordinator_epoch, timestamp, txn, metadata)
        )
    decoded = decode_snapshot(encode_snapshot(entries))
    assert [fields(e) for e in decoded] == [
        fields(e) for e in sorted(entries, key=lambda e: e.producer_id)
    ]


def test_only_the_last_batch_is_kept() -> None:
    e = entry()
    e.add_batch(3, 45, 130, 3, 1_700_000_000_100)
    (decoded,) = decode_snapshot(encode_snapshot([e]))
    assert list(decoded.batch_metadata) == [BatchMetadata(45, 130, 3, 1_700_000_000_100)]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d[:5], "shorter than its header"),
        (lambda d: b"\x00\x02" + d[2:], "unknown version 2"),
        (lambda d: b"\x00\x00" + d[2:], "unknown version 0"),
        (lambda d: d[:-1], "cannot hold 1 entries"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "CRC"),
        (lambda d: d[:6] + b"\xff\xff\xff\xff" + d[10:], "cannot hold -1 entries"),
    ],
    ids=["short", "version-2", "version-0", "truncated", "bit-flip", "negative-count"],
)
def test_unusable_bytes_are_reported(damage: object, message: str) -> None:
    data = encode_snapshot([entry()])
    with pytest.raises(CorruptSnapshotError, match=message):
        decode_snapshot(damage(data))  # type: ignore[operator]


def test_files_are_written_whole_and_listed_by_offset(tmp_path: Path) -> None:
    for offset in (120, 7, 1_000_000):
        write_snapshot_file(str(tmp_path / f"{offset:020d}.snapshot"), encode_snapshot([entry()]))
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "garbage.snapshot").write_bytes(b"")
    assert list_snapshot_offsets(str(tmp_path)) == [7, 120, 1_000_000]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    (loaded,) = read_snapshot_file(str(tmp_path / f"{120:020d}.snapshot"))
    assert fields(loaded) == fields(entry())


def test_a_rewrite_replaces_a_longer_file(tmp_path: Path) -> None:
    path = str(tmp_path / f"{5:020d}.snapshot")
    write_snapshot_file(path, encode_snapshot([entry(producer_id=i) for i in range(10)]))
    write_snapshot_file(path, encode_snapshot([entry(producer_id=3)]))
    assert [e.producer_id for e in read_snapshot_file(path)] == [3]
