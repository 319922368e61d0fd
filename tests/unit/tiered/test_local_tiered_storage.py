"""LocalTieredStorage, the local-directory RemoteStorageManager, on real files: the
RemoteStorageManager contract (support.rsm_contract), and what is particular to files."""

from __future__ import annotations

import errno
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


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 8 * 1024 * 1024 + 1, 20_000_000])
def test_a_file_is_copied_byte_for_byte_whatever_its_length(
    rsm: LocalTieredStorage, tmp_path: Path, size: int
) -> None:
    """The O_DIRECT copy writes whole blocks and cuts the file back to the source's
    length: no padding is ever left at the end."""
    source = tmp_path / "source.log"
    source.write_bytes(os.urandom(size))
    rsm.store.put_file("t/0/segment.log", str(source))
    assert rsm.store.get("t/0/segment.log") == source.read_bytes()


def test_segment_files_are_written_with_o_direct(
    rsm: LocalTieredStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of a segment bypasses the page cache (no second cached copy for the
    kernel to allocate and write back on the broker's cores)."""
    direct: list[str] = []
    real_open = os.open

    def recording_open(path: str, flags: int, *args: int) -> int:
        if flags & os.O_DIRECT:
            direct.append(path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", recording_open)
    rsm.copy_log_segment_data(metadata(), segment_files(tmp_path / "segment"))
    assert any(".log." in path for path in direct)


def test_a_file_system_without_o_direct_gets_a_plain_copy(
    rsm: LocalTieredStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tmpfs refuses O_DIRECT with EINVAL: the copy falls back to ``shutil.copyfile``."""
    real_open = os.open

    def refusing_open(path: str, flags: int, *args: int) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    data = segment_files(tmp_path / "segment")
    m = metadata()
    rsm.copy_log_segment_data(m, data)
    with open(data.log_segment, "rb") as file:
        assert rsm.fetch_log_segment(m, 0, None) == file.read()
