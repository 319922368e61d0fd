"""The leader's BatchAccumulator and the records it writes: atomic appends, batch limits,
linger, prepared (delayed) drains, control batches, and their decoding back."""

from __future__ import annotations

import pytest
from raft_support import MockTime

from tiercel.protocol.errors import CorruptRecordError, RecordBatchTooLargeError
from tiercel.protocol.record_batch import NO_PRODUCER_ID, read_header
from tiercel.protocol.records import decode_records
from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.control_record import (
    ControlRecordType,
    control_batch,
    leader_change_message,
    snapshot_header_record,
)
from tiercel.server.raft.errors import NotLeaderError
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_iterator import iter_decoded_batches


def accumulator(
    time: MockTime, *, base_offset: int = 10, linger_ms: int = 25, max_batch_size: int = 1024
) -> BatchAccumulator[bytes]:
    return BatchAccumulator(3, base_offset, linger_ms, max_batch_size, 10, time, IdentitySerde())


def test_appends_get_consecutive_offsets_and_share_a_batch() -> None:
    time = MockTime(5000)
    acc = accumulator(time)
    assert acc.is_empty
    assert acc.append(3, [b"a", b"b"], delay_drain=False) == 11
    assert not acc.is_empty
    assert acc.append(3, [b"c"], delay_drain=False) == 12
    assert acc.time_until_drain(time.now) == 25  # the first append's linger
    time.now += 25
    assert acc.needs_drain(time.now)
    (batch,) = acc.drain()
    assert (batch.base_offset, batch.num_records, list(batch.records or ())) == (
        10,
        3,
        [b"a", b"b", b"c"],
    )
    header = read_header(batch.data)
    # Kafka's BatchBuilder: no producer, epoch stamped, every record at the append time.
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset_delta) == (
        10,
        3,
        2,
    )
    assert header.producer_id == NO_PRODUCER_ID and not header.is_control
    assert header.base_timestamp == header.max_timestamp == 5000 == batch.append_timestamp
    records = decode_records(batch.data, 3, 61)
    assert [(r.key, r.value, r.timestamp_delta) for r in records] == [
        (None, b"a", 0),
        (None, b"b", 0),
        (None, b"c", 0),
    ]
    assert acc.is_empty and acc.drain() == []


def test_an_append_that_does_not_fit_starts_a_new_batch_and_stays_whole() -> None:
    acc = accumulator(MockTime(5000), max_batch_size=61 + 3 * 40)
    acc.append(3, [b"x" * 30, b"y" * 30], delay_drain=False)
    acc.append(3, [b"z" * 30, b"w" * 30], delay_drain=False)  # would make 4 records of ~36
    batches = acc.drain()
    assert [(b.base_offset, b.num_records) for b in batches] == [(10, 2), (12, 2)]
    assert all(len(b.data) <= 61 + 3 * 40 for b in batches)


def test_records_larger_than_a_batch_are_refused_whole() -> None:
    acc = accumulator(MockTime(5000), max_batch_size=100)
    with pytest.raises(RecordBatchTooLargeError, match="exceeds the maximum allowed batch size"):
        acc.append(3, [b"x" * 30, b"y" * 30], delay_drain=False)
    assert acc.next_offset == 10 and acc.drain() == []


def test_stale_and_future_epochs_are_refused() -> None:
    acc = accumulator(MockTime(5000))
    with pytest.raises(NotLeaderError, match="stale"):
        acc.append(2, [b"a"], delay_drain=False)
    with pytest.raises(ValueError, match="larger than the current epoch"):
        acc.append(4, [b"a"], delay_drain=False)


def test_prepared_appends_wait_for_allow_drain() -> None:
    time = MockTime(5000)
    acc = accumulator(time, linger_ms=0)
    acc.append(3, [b"a"], delay_drain=False)
    acc.force_drain()
    acc.append(3, [b"b"], delay_drain=True)  # prepareAppend
    acc.append(3, [b"c"], delay_drain=False)
    drained = acc.drain()
    assert [b.base_offset for b in drained] == [10]  # the batch before the prepared one
    assert acc.drain() == []
    acc.allow_drain()  # schedulePreparedAppend
    assert acc.needs_drain(time.now)
    assert [list(b.records or ()) for b in acc.drain()] == [[b"b", b"c"]]


def test_control_messages_complete_the_open_batch_first() -> None:
    time = MockTime(5000)
    acc = accumulator(time)
    acc.append(3, [b"a"], delay_drain=False)
    last = acc.append_control_messages([leader_change_message(1, [1, 2, 3], [1, 2])], time.now)
    assert last == 11
    data, control = acc.drain()
    assert (data.base_offset, control.base_offset, control.records) == (10, 11, None)
    assert read_header(control.data).is_control


def test_the_number_of_waiting_batches_is_bounded() -> None:
    acc = accumulator(MockTime(5000), max_batch_size=61 + 10)
    for _ in range(10):
        acc.append(3, [b"abc"], delay_drain=True)
        acc.force_drain()
    with pytest.raises(RuntimeError, match="reached 10"):
        acc.append(3, [b"abc"], delay_drain=False)


def test_leader_change_control_record_bytes() -> None:
    batch = control_batch(7, 4, 1234, [leader_change_message(1, [3, 1, 2], [2, 1])])
    header = read_header(batch)
    assert header.is_control and header.partition_leader_epoch == 4 and header.base_offset == 7
    assert header.producer_id == -1 and header.base_sequence == -1
    (record,) = decode_records(batch, 1, 61)
    assert record.key == bytes.fromhex("0000 0002")  # key version 0, type LEADER_CHANGE
    # LeaderChangeMessage v0, flexible: Version, LeaderId, compact arrays of Voter
    # {VoterId, tags}, then the message's tags.
    assert record.value == bytes.fromhex(
        "0000 00000001 04 0000000100 0000000200 0000000300 03 0000000100 0000000200 00"
    )


def test_decoded_batches_carry_control_records_and_data() -> None:
    time = MockTime(5000)
    acc = accumulator(time, base_offset=0)
    acc.append_control_messages([snapshot_header_record(99)], time.now)
    acc.append(3, [b"r1", b"r2"], delay_drain=False)
    data = b"".join(b.data for b in acc.drain())
    header_batch, data_batch = iter_decoded_batches(data, IdentitySerde())
    (control,) = header_batch.control_records
    assert control.type is ControlRecordType.SNAPSHOT_HEADER
    assert control.message.last_contained_log_timestamp == 99
    assert (data_batch.base_offset, data_batch.last_offset, data_batch.epoch) == (1, 2, 3)
    assert list(data_batch) == [b"r1", b"r2"] and data_batch.append_timestamp == 5000


def test_a_corrupt_batch_is_refused() -> None:
    time = MockTime(5000)
    acc = accumulator(time)
    acc.append(3, [b"value"], delay_drain=False)
    data = bytearray(acc.drain()[0].data)
    data[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_decoded_batches(data, IdentitySerde()))
