"""Replaying transactional offset commits from a __consumer_offsets partition: they
count once their producer's COMMIT marker follows, never after an ABORT, stay pending
without a marker, and never override a later plain commit."""

from __future__ import annotations

from tiercel.protocol.end_txn_marker import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from tiercel.protocol.record_batch import read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.record_filter import empty_batch
from tiercel.server.coordinator.group.coordinator_loader import LoadedPartition, parse_chunk
from tiercel.server.coordinator.group.coordinator_records import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from tiercel.storage.topic_partition import TopicPartition

TP = TopicPartition("in", 0)


def commit(base: int, offset: int, producer_id: int | None = None) -> bytes:
    record = SimpleRecord(
        encode_key(OffsetCommitKey("g", TP.topic, TP.partition)),
        encode_offset_commit_value(OffsetCommitValue(offset, -1, "", 1, -1)),
        timestamp=1,
    )
    if producer_id is None:
        return build_record_batch([record], base_offset=base)
    return build_record_batch(
        [record],
        base_offset=base,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def marker(base: int, producer_id: int, commit: bool) -> bytes:
    control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_end_txn_marker_batch(
        EndTransactionMarker(control, 0), producer_id, 0, base_offset=base, timestamp=1
    )


def load(*batches: bytes) -> LoadedPartition:
    loaded = LoadedPartition()
    loaded.apply(parse_chunk(b"".join(batches)).records)
    return loaded


def committed(loaded: LoadedPartition) -> int | None:
    offset = loaded.offsets.get("g", {}).get(TP)
    return None if offset is None else offset.committed_offset


def test_a_commit_marker_makes_the_offsets_count() -> None:
    loaded = load(commit(0, 10), commit(1, 20, producer_id=7), marker(2, 7, commit=True))
    assert committed(loaded) == 20
    assert loaded.pending_txn_offsets == {}


def test_an_abort_marker_drops_them() -> None:
    loaded = load(commit(0, 10), commit(1, 20, producer_id=7), marker(2, 7, commit=False))
    assert committed(loaded) == 10


def test_without_a_marker_they_stay_pending() -> None:
    loaded = load(commit(0, 10), commit(1, 20, producer_id=7), marker(2, 8, commit=True))
    assert committed(loaded) == 10
    assert loaded.pending_txn_offsets[7]["g"][TP].committed_offset == 20


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one() -> None:
    loaded = load(commit(0, 20, producer_id=7), commit(1, 30), marker(2, 7, commit=True))
    assert committed(loaded) == 30


def test_a_marker_the_log_cleaner_emptied_is_skipped() -> None:
    # An empty control batch (Kafka's writeEmptyHeader) ends no transaction: the
    # cleaner only empties a marker whose transaction has no record left.
    emptied = empty_batch(read_header(marker(2, 7, commit=True)))
    loaded = load(commit(0, 10), commit(1, 20, producer_id=7), emptied)
    assert committed(loaded) == 10
    assert loaded.pending_txn_offsets[7]["g"][TP].committed_offset == 20
