"""LocalTieredStorage, the local-directory RemoteStorageManager, on real files: the
RemoteStorageManager contract (support.rsm_contract), and what is particular to files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.rsm_contract import RemoteStorageManagerContract, metadata, segment_files
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.object_layout import MANIFEST_SUFFIX
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError


@pytest.fixture
def rsm(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(str(tmp_path / "remote"))


class TestLocalTieredStorageContract(RemoteStorageManagerContract):
    pass


def files_under(root: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
    }


def test_objects_are_files_at_their_keys(rsm: LocalTieredStorage, tmp_path: Path) -> None:
    rsm.copy_log_segment_data(metadata(), segment_files(tmp_path / "segment"))
    assert files_under(rsm.root) == set(rsm.store.list(""))
    assert len(files_under(rsm.root)) == 6


def test_a_failed_copy_leaves_no_temporary_file(rsm: LocalTieredStorage, tmp_path: Path) -> None:
    data = segment_files(tmp_path / "segment")
    os.remove(data.time_index)
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(metadata(), data)
    # The data objects are renamed into place together, once all are written: none of
    # them is, and no temporary file is left.
    assert not files_under(rsm.root)


def test_a_copy_syncs_each_object_once_and_its_directory_once_before_the_manifest(
    rsm: LocalTieredStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five data objects and the manifest: an fsync of each, one of the directory
    before the manifest is written and one after it is renamed (not two per object)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    rsm.copy_log_segment_data(metadata(), segment_files(tmp_path / "segment"))
    directory = os.path.dirname(os.path.join(rsm.root, next(iter(rsm.store.list("")))))
    objects = [path for path in synced if path != directory]
    assert len(objects) == 6
    assert synced.count(directory) == 2
    # The directory is synced after every data object and before the manifest.
    assert synced.index(directory) == 5
    assert f".{MANIFEST_SUFFIX}." in objects[-1]


def test_temporary_files_are_not_listed(rsm: LocalTieredStorage, tmp_path: Path) -> None:
    m = metadata()
    rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment"))
    log = next(key for key in rsm.store.list("") if key.endswith(".log"))
    Path(rsm.root, log + ".0123.tmp").write_bytes(b"half")  # a copy cut short by a crash
    assert not [key for key in rsm.store.list("") if key.endswith(".tmp")]
