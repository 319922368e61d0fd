"""LocalMetadataStore's own behaviour: the file, durability before return and before watch
delivery, write coalescing, failures, corruption. The MetadataStore contract it shares with
the ZooKeeper store is tested on both in test_metadata_store.py."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiercel.server.metadata import local_store_file
from tiercel.server.metadata.local_store import (
    FILE_NAME,
    CorruptMetadataStoreError,
    LocalMetadataStore,
)
from tiercel.server.metadata.store import (
    EventType,
    MetadataStoreError,
    WatchEvent,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LocalMetadataStore]:
    s = LocalMetadataStore(tmp_path)
    await s.start()
    yield s
    await s.close()


async def reopen(s: LocalMetadataStore, directory: Path) -> LocalMetadataStore:
    await s.close()
    fresh = LocalMetadataStore(directory)
    await fresh.start()
    return fresh


class Recorder:
    """A watch callback that records events, checking it runs on the loop thread."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self._thread = threading.get_ident()

    def __call__(self, event: WatchEvent) -> None:
        assert threading.get_ident() == self._thread
        self.events.append(event)

    async def take(self) -> list[tuple[str, EventType]]:
        for _ in range(3):
            await asyncio.sleep(0)
        taken = [(e.path, e.type) for e in self.events]
        self.events.clear()
        return taken


# --- persistence, the file, the directory lock ----------------------------------------------


async def test_ephemeral_nodes_are_never_written(store: LocalMetadataStore, tmp_path: Path) -> None:
    await store.create("/persistent", b"p")
    await store.create("/ephemeral", b"e", ephemeral=True)
    await store.set("/persistent", b"p2")
    nodes = json.loads((tmp_path / FILE_NAME).read_text("utf-8"))["nodes"]
    assert sorted(nodes) == ["/", "/persistent"]


async def test_file_holds_text_as_utf8_and_binary_as_base64(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    binary = bytes(range(256))
    await store.create("/text", '{"id":"é"}'.encode())
    await store.create("/binary", binary)
    await store.create("/empty")
    nodes = json.loads((tmp_path / FILE_NAME).read_text("utf-8"))["nodes"]
    assert nodes["/text"]["encoding"] == "utf-8"
    assert nodes["/text"]["data"] == '{"id":"é"}'
    assert nodes["/binary"]["encoding"] == "base64"

    store = await reopen(store, tmp_path)
    assert (await store.get("/binary"))[0] == binary
    assert (await store.get("/text"))[0] == '{"id":"é"}'.encode()
    assert (await store.get("/empty"))[0] == b""
    await store.close()


async def test_directory_is_locked_while_open(tmp_path: Path) -> None:
    first = LocalMetadataStore(tmp_path)
    await first.start()
    second = LocalMetadataStore(tmp_path)
    with pytest.raises(MetadataStoreError, match="in use"):
        await second.start()
    await first.close()
    await second.start()
    await second.close()


async def test_leftover_temp_file_is_ignored_and_removed(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    await store.create("/a", b"1")
    await store.close()
    tmp_file = tmp_path / (FILE_NAME + ".tmp")
    tmp_file.write_bytes(b'{"half a wr')
    store = LocalMetadataStore(tmp_path)
    await store.start()
    assert (await store.get("/a"))[0] == b"1"
    assert not tmp_file.exists()
    await store.close()


# --- watches --------------------------------------------------------------------------------


async def test_callbacks_never_run_inside_the_mutating_call(store: LocalMetadataStore) -> None:
    recorder = Recorder()
    await store.watch_data("/e", recorder)
    # Ephemeral-only: no write to wait for, so the call returns without suspending.
    await store.create("/e", ephemeral=True)
    assert recorder.events == []
    assert await recorder.take() == [("/e", EventType.CREATED)]


async def test_cancelled_watch_gets_nothing_even_if_already_queued(
    store: LocalMetadataStore,
) -> None:
    recorder, other = Recorder(), Recorder()
    handle = await store.watch_data("/e", recorder)
    await store.watch_data("/e", other)
    await store.create("/e", ephemeral=True)
    handle.cancel()
    handle.cancel()
    await store.set("/e", b"1")
    assert await recorder.take() == []
    assert await other.take() == [("/e", EventType.CREATED), ("/e", EventType.CHANGED)]


async def test_watches_stop_at_close(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    recorder = Recorder()
    await store.watch_data("/e", recorder)
    await store.create("/e", ephemeral=True)
    await store.close()
    assert await recorder.take() == []


async def test_mutation_returns_and_watch_fires_only_after_durable_write(
    store: LocalMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    await store.watch_data("/a", recorder)
    release = threading.Event()
    real_write = local_store_file.StoreFile.write

    def held_write(self: local_store_file.StoreFile, nodes: dict[str, object]) -> None:
        assert release.wait(5)
        real_write(self, nodes)  # type: ignore[arg-type]

    monkeypatch.setattr(local_store_file.StoreFile, "write", held_write)
    create = asyncio.create_task(store.create("/a", b"1"))
    await asyncio.sleep(0.05)
    assert not create.done()
    assert await store.exists("/a") is not None
    assert await recorder.take() == []
    # An ephemeral change made meanwhile waits for no write but keeps its place in line.
    await store.watch_data("/e", recorder)
    await store.create("/e", ephemeral=True)
    assert await recorder.take() == []
    release.set()
    await create
    assert await recorder.take() == [("/a", EventType.CREATED), ("/e", EventType.CREATED)]


# --- write coalescing, failures, corruption -------------------------------------------------


async def test_concurrent_mutations_share_few_fsyncs_and_all_are_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    await store.create("/p", b"")
    replaces: list[str] = []
    real_replace = os.replace

    def counting_replace(src: str, dst: str) -> None:
        replaces.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", counting_replace)
    await store.create("/p/shared")
    await asyncio.gather(*(store.create(f"/p/{i}", str(i).encode()) for i in range(100)))
    stats = await asyncio.gather(*(store.set("/p/shared", str(i).encode()) for i in range(100)))
    assert sorted(s.version for s in stats) == list(range(1, 101))
    assert 3 <= len(replaces) <= 10, replaces
    await store.set("/p/shared", b"last")

    store = await reopen(store, tmp_path)
    assert len(await store.get_children("/p")) == 101
    assert (await store.get("/p/57"))[0] == b"57"
    data, stat = await store.get("/p/shared")
    assert (data, stat.version) == (b"last", 101)
    await store.close()


async def test_write_failure_fails_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    await store.create("/a", b"1")

    def broken_write(self: local_store_file.StoreFile, nodes: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_store_file.StoreFile, "write", broken_write)
    with pytest.raises(MetadataStoreError, match="No space left") as info:
        await store.set("/a", b"2")
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(MetadataStoreError, match="failed"):
        await store.get("/a")
    await store.close()
    monkeypatch.undo()
    store = LocalMetadataStore(tmp_path)
    await store.start()
    assert (await store.get("/a"))[0] == b"1"
    await store.close()


def _document(nodes: dict[str, object]) -> str:
    return json.dumps({"version": 1, "nodes": nodes})


_ROOT = {"ctime": 1, "mtime": 1, "version": 0, "encoding": "utf-8", "data": ""}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"version": 1, "nodes": {"/": ', "not UTF-8 JSON"),
        ("\x80{}", "not UTF-8 JSON"),
        ("[]", "'nodes'"),
        (json.dumps({"version": 2, "nodes": {"/": _ROOT}}), "format version"),
        (_document({}), "no root"),
        (_document({"/": _ROOT, "/a/b": _ROOT}), "no parent"),
        (_document({"/": _ROOT, "a": _ROOT}), "must start with"),
        (_document({"/": {**_ROOT, "version": "0"}}), "integers"),
        (_document({"/": {**_ROOT, "version": -1}}), "negative"),
        (_document({"/": {**_ROOT, "encoding": "base64", "data": "!!"}}), "node '/'"),
        (_document({"/": {**_ROOT, "encoding": "rot13"}}), "encoding"),
        (_document({"/": {**_ROOT, "data": 3}}), "data is not"),
    ],
)
async def test_corrupt_file_is_reported_with_its_name(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / FILE_NAME
    path.write_bytes(content.encode("latin-1"))
    before = path.read_bytes()
    store = LocalMetadataStore(tmp_path)
    with pytest.raises(CorruptMetadataStoreError, match=reason) as info:
        await store.start()
    assert info.value.file == str(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    # The failed start released the directory lock.
    path.write_text(_document({"/": _ROOT}))
    await store.start()
    await store.close()
