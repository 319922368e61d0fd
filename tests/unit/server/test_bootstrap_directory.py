"""bootstrap.checkpoint as Kafka's BatchFileWriter writes it and BootstrapDirectory reads
it: a snapshot header batch, the records, a footer batch, all at offset 0 and epoch 0;
the default when a directory has none; refusals of corrupt and incomplete files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord, ProducerIdsRecord
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    MetadataRecordSerde,
)
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.server.metadata.bootstrap_directory import (
    read_bootstrap_metadata,
    write_bootstrap_file,
)
from tiercel.server.metadata.bootstrap_metadata import BootstrapMetadata, BootstrapMetadataError
from tiercel.server.raft.control_record import ControlRecordType
from tiercel.server.raft.records_iterator import iter_decoded_batches


def version_record(level: int) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=level), 0)


def test_the_file_is_a_snapshot_at_offset_zero(tmp_path: Path) -> None:
    metadata = BootstrapMetadata.from_versions(
        MetadataVersion.IBP_4_0_IV3, {"group.version": 1, "kraft.version": 0}, "test"
    )
    write_bootstrap_file(str(tmp_path), metadata)
    data = (tmp_path / "bootstrap.checkpoint").read_bytes()
    batches = list(iter_decoded_batches(data, MetadataRecordSerde()))
    assert [b.epoch for b in batches] == [0, 0, 0]
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 0), (1, 2), (3, 3)]
    assert [c.type for c in batches[0].control_records] == [ControlRecordType.SNAPSHOT_HEADER]
    assert batches[0].control_records[0].message.last_contained_log_timestamp == 0
    assert [c.type for c in batches[2].control_records] == [ControlRecordType.SNAPSHOT_FOOTER]
    assert list(batches[1].records) == [
        version_record(25),
        ApiMessageAndVersion(FeatureLevelRecord(name="group.version", feature_level=1), 0),
    ]
    read = read_bootstrap_metadata(str(tmp_path))
    assert read.metadata_version is MetadataVersion.IBP_4_0_IV3
    assert read.records == metadata.records
    assert read.feature_level("group.version") == 1 and read.feature_level("x") == 0


def test_rewriting_replaces_the_file(tmp_path: Path) -> None:
    write_bootstrap_file(str(tmp_path), BootstrapMetadata.from_records([version_record(21)], "a"))
    write_bootstrap_file(str(tmp_path), BootstrapMetadata.from_records([version_record(22)], "b"))
    assert read_bootstrap_metadata(str(tmp_path)).metadata_version is MetadataVersion.IBP_4_0_IV0


def test_a_directory_without_the_file_starts_at_the_latest_version(tmp_path: Path) -> None:
    metadata = read_bootstrap_metadata(str(tmp_path))
    assert metadata.metadata_version is MetadataVersion.IBP_4_0_IV3
    assert metadata.records == (version_record(25),)
    assert metadata.source == "the default bootstrap"
    with pytest.raises(BootstrapMetadataError, match="is missing"):
        read_bootstrap_metadata(str(tmp_path / "nope"))


def test_records_without_a_metadata_version_are_refused(tmp_path: Path) -> None:
    no_version = ApiMessageAndVersion(
        ProducerIdsRecord(broker_id=1, broker_epoch=2, next_producer_id=1000), 0
    )
    with pytest.raises(
        BootstrapMetadataError, match=r"No FeatureLevelRecord for metadata\.version"
    ):
        BootstrapMetadata.from_records([no_version], "test")
    with pytest.raises(BootstrapMetadataError, match="No MetadataVersion with feature level 6"):
        BootstrapMetadata.from_records([version_record(6)], "test")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_corrupt_file_is_refused(tmp_path: Path, damage: str) -> None:
    write_bootstrap_file(str(tmp_path), BootstrapMetadata.from_records([version_record(25)], "t"))
    path = tmp_path / "bootstrap.checkpoint"
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        del data[-5:]
    else:
        data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BootstrapMetadataError, match="Unable to read the binary bootstrap"):
        read_bootstrap_metadata(str(tmp_path))
