import os
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage.checkpoint_file import (
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    atomic_write,
    kafka_str_to_uuid,
    random_kafka_uuid,
    uuid_to_kafka_str,
)
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicPartition

# Kafka's legal topic characters
topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=40,
)
partitions = st.integers(min_value=0, max_value=2**31 - 1)
offsets = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_offset_checkpoint_bytes_are_kafkas(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write(
        {TopicPartition("orders", 0): 1234, TopicPartition("orders", 1): 98}
    )
    assert path.read_bytes() == b"0\n2\norders 0 1234\norders 1 98\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_leader_epoch_checkpoint_bytes_are_kafkas(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([EpochEntry(2, 30), EpochEntry(3, 50)])
    assert path.read_bytes() == b"0\n2\n2 30\n3 50\n"
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(2, 30), EpochEntry(3, 50)]


def test_reads_a_file_written_by_kafka_with_crlf_and_extra_spaces(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(b"0\r\n2\r\nt1  0   5\r\nt2 7 9")
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("t1", 0): 5,
        TopicPartition("t2", 7): 9,
    }


def test_missing_or_empty_files_hold_no_entries(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert OffsetCheckpointFile(path).read() == {}
    for content in (b"", b"0\n", b"0"):
        path.write_bytes(content)
        assert OffsetCheckpointFile(path).read() == {}
        assert LeaderEpochCheckpointFile(path).read() == []


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"1\n0\n", 1),  # unknown version
        (b"x\n0\n", 1),
        (b"0\nzero\n", 2),
        (b"0\n2\nt 0 5\n", 3),  # count says 2, one entry
        (b"0\n0\nt 0 5\n", 3),  # count says 0, one entry
        (b"0\n1\nt x 5\n", 3),
        (b"0\n1\nt 0\n", 3),
        (b"0\n1\nt 0 5 6\n", 3),
        (b"0\n2\nt 0 5\n\nt 1 6\n", 4),  # blank line
        (b"0\n1\nt 0 1_000\n", 3),  # Python would parse it, Java would not
        (b"0\n1\nt 2147483648 5\n", 3),  # partition beyond int32
        (b"0\n1\nt 0 9223372036854775808\n", 3),  # offset beyond int64
        (b"0\n1\nt\xff 0 5\n", 1),  # not UTF-8
    ],
)
def test_malformed_offset_checkpoints_name_file_and_line(
    tmp_path: Path, content: bytes, line: int
) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as raised:
        OffsetCheckpointFile(path).read()
    assert raised.value.path == str(path)
    assert raised.value.line_number == line
    assert str(path) in str(raised.value)
    assert isinstance(raised.value, KafkaStorageError)


@pytest.mark.parametrize("content", [b"0\n1\n1\n", b"0\n1\n1 2 3\n", b"0\n1\n2147483648 0\n"])
def test_malformed_epoch_checkpoints_are_rejected(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCheckpointFile(path).read()


@settings(max_examples=60)
@given(st.dictionaries(st.builds(TopicPartition, topics, partitions), offsets, max_size=20))
def test_offset_checkpoint_round_trip(offsets_by_partition: dict[TopicPartition, int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        file = OffsetCheckpointFile(os.path.join(d, "log-start-offset-checkpoint"))
        file.write(offsets_by_partition)
        assert file.read() == offsets_by_partition


@settings(max_examples=60)
@given(
    st.lists(
        st.builds(EpochEntry, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=20
    )
)
def test_epoch_checkpoint_round_trip(entries: list[EpochEntry]) -> None:
    with tempfile.TemporaryDirectory() as d:
        file = LeaderEpochCheckpointFile(os.path.join(d, "leader-epoch-checkpoint"))
        file.write(entries)
        assert file.read() == entries


def test_a_rewrite_replaces_the_whole_file(tmp_path: Path) -> None:
    file = OffsetCheckpointFile(tmp_path / "cp")
    file.write({TopicPartition("a", n): n for n in range(100)})
    file.write({TopicPartition("b", 0): 1})
    assert file.read() == {TopicPartition("b", 0): 1}


def test_atomic_write_syncs_the_data_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic_write(str(tmp_path / "f"), b"data")
    assert events == ["fsync file", "replace", "fsync dir"]
    assert (tmp_path / "f").read_bytes() == b"data"


def test_write_errors_become_storage_errors(tmp_path: Path) -> None:
    file = LeaderEpochCheckpointFile(tmp_path / "gone" / "leader-epoch-checkpoint")
    with pytest.raises(KafkaStorageError):
        file.write([EpochEntry(0, 0)])


def test_write_if_dir_exists_skips_a_removed_directory(tmp_path: Path) -> None:
    file = LeaderEpochCheckpointFile(tmp_path / "gone" / "leader-epoch-checkpoint")
    assert file.write_if_dir_exists([EpochEntry(0, 0)]) is False
    present = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    assert present.write_if_dir_exists([EpochEntry(0, 0)]) is True
    assert present.read() == [EpochEntry(0, 0)]


def test_kafka_uuid_strings() -> None:
    # Kafka's Uuid.ONE_UUID (the metadata topic id) prints as "AAAAAAAAAAAAAAAAAAAAAQ".
    assert uuid_to_kafka_str(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert kafka_str_to_uuid("AAAAAAAAAAAAAAAAAAAAAQ") == uuid.UUID(int=1)
    # URL-safe alphabet: 0xfb 0xff... encodes with '-' and '_' rather than '+' and '/'.
    assert uuid_to_kafka_str(uuid.UUID(bytes=b"\xfb\xff" + bytes(14))) == "-_8AAAAAAAAAAAAAAAAAAA"
    assert kafka_str_to_uuid("AAAAAAAAAAAAAAAAAAAAAQ==") == uuid.UUID(int=1)


@pytest.mark.parametrize(
    "text",
    ["", "AAAA", "AAAAAAAAAAAAAAAAAAAAA+", "AAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ="],
)
def test_bad_kafka_uuid_strings_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        kafka_str_to_uuid(text)


@given(st.uuids(allow_nil=True))
def test_kafka_uuid_round_trip(value: uuid.UUID) -> None:
    text = uuid_to_kafka_str(value)
    assert len(text) == 22
    assert kafka_str_to_uuid(text) == value


def test_partition_metadata_bytes_are_kafkas(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    file = PartitionMetadataFile(path)
    assert file.read() is None
    file.write(uuid.UUID(int=1))
    assert path.read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert file.read() == uuid.UUID(int=1)
    path.write_bytes(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
    assert file.read() == uuid.UUID(int=1)


def test_partition_metadata_refuses_the_zero_uuid(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        PartitionMetadataFile(tmp_path / "partition.metadata").write(uuid.UUID(int=0))


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"", 1),
        (b"version:0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", 1),
        (b"version: -1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", 1),
        (b"version: 0\n", 2),
        (b"version: 0\ntopic: AAAAAAAAAAAAAAAAAAAAAQ", 2),
        (b"version: 0\ntopic_id: AAAA", 2),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2),  # the zero Uuid
    ],
)
def test_malformed_partition_metadata(tmp_path: Path, content: bytes, line: int) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as raised:
        PartitionMetadataFile(path).read()
    assert raised.value.line_number == line


def test_partition_metadata_accepts_newer_versions(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\nextra: 1\n")
    assert PartitionMetadataFile(path).read() == uuid.UUID(int=1)


def test_random_kafka_uuid_skips_what_kafka_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's Uuid.randomUuid: never the zero or metadata-topic id, never a string that
    # starts with '-' (URL-safe base64's 62nd digit: a first byte of 0xF8-0xFB).
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))
    candidates = iter([uuid.UUID(int=0), uuid.UUID(int=1), dash, uuid.UUID(int=2)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(candidates))
    assert uuid_to_kafka_str(dash).startswith("-")
    assert random_kafka_uuid() == uuid.UUID(int=2)
