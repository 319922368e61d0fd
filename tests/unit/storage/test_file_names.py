import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiercel.storage.file_names import (
    DELETED_FILE_SUFFIX,
    filename_prefix_from_offset,
    log_file,
    offset_from_file_name,
    offset_index_file,
    producer_snapshot_file,
    time_index_file,
    transaction_index_file,
)
from tiercel.storage.topic_partition import TopicPartition


def test_prefix_is_twenty_zero_padded_digits() -> None:
    assert filename_prefix_from_offset(0) == "00000000000000000000"
    assert filename_prefix_from_offset(1234) == "00000000000000001234"
    assert filename_prefix_from_offset(2**63 - 1) == "09223372036854775807"


def test_negative_offset_is_rejected() -> None:
    with pytest.raises(ValueError):
        filename_prefix_from_offset(-1)


def test_segment_file_paths() -> None:
    d = os.path.join("data", "t-0")
    assert log_file(d, 5) == os.path.join(d, "00000000000000000005.log")
    assert log_file(d, 5, DELETED_FILE_SUFFIX) == os.path.join(
        d, "00000000000000000005.log.deleted"
    )
    assert offset_index_file(d, 5) == os.path.join(d, "00000000000000000005.index")
    assert time_index_file(d, 5, ".swap") == os.path.join(d, "00000000000000000005.timeindex.swap")
    assert transaction_index_file(d, 5) == os.path.join(d, "00000000000000000005.txnindex")
    assert producer_snapshot_file(d, 9) == os.path.join(d, "00000000000000000009.snapshot")


@given(st.integers(min_value=0, max_value=2**63 - 1), st.sampled_from([".log", ".index.deleted"]))
def test_offset_round_trips_through_file_name(offset: int, suffix: str) -> None:
    assert offset_from_file_name(filename_prefix_from_offset(offset) + suffix) == offset


@pytest.mark.parametrize("name", ["leader-epoch-checkpoint", "abc.log", ".log", "12", "-1.log"])
def test_non_segment_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        offset_from_file_name(name)


def test_topic_partition_string_and_ordering() -> None:
    assert str(TopicPartition("orders", 3)) == "orders-3"
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]) == [
        TopicPartition("a", 1),
        TopicPartition("a", 2),
        TopicPartition("b", 0),
    ]
    assert {TopicPartition("a", 1): 1}[TopicPartition("a", 1)] == 1
