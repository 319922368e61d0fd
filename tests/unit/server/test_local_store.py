"""LocalMetadataStore: ZooKeeper-like semantics, durability, watches, write coalescing."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.metadata import local_store_file
from server.metadata.local_store import FILE_NAME, CorruptMetadataStoreError, LocalMetadataStore
from server.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStoreError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SetOp,
    Stat,
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


# --- create / get / exists / children ------------------------------------------------------


async def test_create_then_get_returns_data_and_fresh_stat(store: LocalMetadataStore) -> None:
    assert await store.create("/brokers", b"x") == "/brokers"
    data, stat = await store.get("/brokers")
    assert data == b"x"
    assert stat.version == 0
    assert stat.ctime == stat.mtime > 0
    assert stat.ephemeral_owner == 0
    assert stat.num_children == 0
    assert await store.exists("/brokers") == stat
    assert await store.exists("/nope") is None


async def test_create_needs_parent_unless_make_parents(store: LocalMetadataStore) -> None:
    with pytest.raises(NoNodeError) as info:
        await store.create("/brokers/topics/t", b"t")
    assert info.value.path == "/brokers/topics/t"
    assert await store.exists("/brokers") is None

    await store.create("/brokers/topics/t", b"t", make_parents=True)
    assert await store.get("/brokers") == (b"", await store.exists("/brokers"))
    assert (await store.get("/brokers/topics/t"))[0] == b"t"
    assert await store.exists("/brokers/topics")
    assert await store.get_children("/") == ["brokers"]


async def test_create_existing_node_fails(store: LocalMetadataStore) -> None:
    await store.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        await store.create("/a", b"2")
    with pytest.raises(NodeExistsError):
        await store.create("/a", b"2", make_parents=True)
    with pytest.raises(NodeExistsError):
        await store.create("/")
    assert (await store.get("/a"))[0] == b"1"


async def test_children_are_sorted_names_and_counted(store: LocalMetadataStore) -> None:
    for name in ("3", "10", "1", "2"):
        await store.create(f"/brokers/ids/{name}", make_parents=True)
    assert await store.get_children("/brokers/ids") == ["1", "10", "2", "3"]
    assert await store.get_children("/brokers/ids/1") == []
    stat = await store.exists("/brokers/ids")
    assert stat is not None and stat.num_children == 4
    with pytest.raises(NoNodeError):
        await store.get_children("/missing")
    with pytest.raises(NoNodeError):
        await store.get("/missing")


@pytest.mark.parametrize(
    "path",
    [
        "",
        "a",
        "/a/",
        "//a",
        "/a//b",
        "/a/./b",
        "/a/..",
        "/a\x00",
        "/a\x7f",
        "/\ud800",
        "/\U0001f600",
    ],
)
async def test_invalid_paths_are_rejected(store: LocalMetadataStore, path: str) -> None:
    with pytest.raises(ValueError):
        await store.create(path)
    with pytest.raises(ValueError):
        await store.get(path)


# --- set / delete ---------------------------------------------------------------------------


async def test_set_bumps_version_and_mtime(store: LocalMetadataStore) -> None:
    await store.create("/controller_epoch", b"1")
    _, before = await store.get("/controller_epoch")
    await asyncio.sleep(0.002)
    stat = await store.set("/controller_epoch", b"2")
    assert stat.version == 1
    assert stat.ctime == before.ctime
    assert stat.mtime > before.mtime
    stat = await store.set("/controller_epoch", b"3", expected_version=1)
    assert stat.version == 2
    assert await store.get("/controller_epoch") == (b"3", stat)


async def test_conditional_set_with_stale_version_fails(store: LocalMetadataStore) -> None:
    await store.create("/state", b"isr=1,2")
    await store.set("/state", b"isr=1")
    with pytest.raises(BadVersionError) as info:
        await store.set("/state", b"isr=1,2,3", expected_version=0)
    assert info.value.path == "/state"
    data, stat = await store.get("/state")
    assert (data, stat.version) == (b"isr=1", 1)
    with pytest.raises(NoNodeError):
        await store.set("/missing", b"")


async def test_delete_semantics(store: LocalMetadataStore) -> None:
    await store.create("/t/p/0", b"s", make_parents=True)
    with pytest.raises(NotEmptyError):
        await store.delete("/t")
    with pytest.raises(BadVersionError):
        await store.delete("/t/p/0", expected_version=3)
    with pytest.raises(NoNodeError):
        await store.delete("/nope")
    with pytest.raises(ValueError):
        await store.delete("/", recursive=True)
    await store.delete("/t/p/0", expected_version=0)
    assert await store.exists("/t/p/0") is None
    await store.create("/t/p/1", make_parents=True)
    await store.delete("/t", recursive=True)
    assert await store.get_children("/") == []


async def test_recursive_delete_checks_version_of_top_node(store: LocalMetadataStore) -> None:
    await store.create("/t/a", make_parents=True)
    await store.set("/t", b"v1")
    with pytest.raises(BadVersionError):
        await store.delete("/t", expected_version=0, recursive=True)
    assert await store.get_children("/t") == ["a"]
    await store.delete("/t", expected_version=1, recursive=True)
    assert await store.exists("/t") is None


async def test_recreate_resets_version(store: LocalMetadataStore) -> None:
    await store.create("/a")
    await store.set("/a", b"1")
    await store.delete("/a")
    await store.create("/a")
    assert (await store.get("/a"))[1].version == 0


# --- multi ----------------------------------------------------------------------------------


async def test_multi_applies_ops_in_order_and_returns_results(store: LocalMetadataStore) -> None:
    await store.create("/controller_epoch", b"1")
    await store.create("/old")
    results = await store.multi(
        [
            CheckOp("/controller_epoch", 0),
            CreateOp("/t", b"assignment"),
            CreateOp("/t/0", b"state"),
            SetOp("/t/0", b"state2", expected_version=0),
            DeleteOp("/old"),
        ]
    )
    assert results[0] is None and results[4] is None
    assert results[1:3] == ["/t", "/t/0"]
    assert isinstance(results[3], Stat) and results[3].version == 1
    assert await store.get("/t/0") == (b"state2", results[3])
    assert await store.exists("/old") is None


@pytest.mark.parametrize(
    ("failing", "error"),
    [
        (CheckOp("/controller_epoch", 7), BadVersionError),
        (CheckOp("/missing"), NoNodeError),
        (CreateOp("/keep"), NodeExistsError),
        (CreateOp("/x/y"), NoNodeError),
        (SetOp("/keep", b"", expected_version=5), BadVersionError),
        (DeleteOp("/keep"), NotEmptyError),
        (DeleteOp("/keep", expected_version=9), BadVersionError),
    ],
)
async def test_multi_is_all_or_nothing(
    store: LocalMetadataStore, tmp_path: Path, failing: Op, error: type[Exception]
) -> None:
    await store.create("/controller_epoch", b"1")
    await store.create("/keep/child-parent/c", b"k", make_parents=True)
    recorder = Recorder()
    await store.watch_children("/", recorder)
    await store.watch_data("/keep", recorder)
    ops: list[Op] = [
        CreateOp("/new", b"n"),
        SetOp("/keep", b"changed"),
        DeleteOp("/keep/child-parent/c"),
        CreateOp("/eph", ephemeral=True),
        failing,
    ]
    with pytest.raises(error) as info:
        await store.multi(ops)
    assert isinstance(info.value, MetadataStoreError)
    assert info.value.op_index == 4
    assert await store.get_children("/") == ["controller_epoch", "keep"]
    assert await store.get("/keep") == (b"", await store.exists("/keep"))
    assert (await store.get("/keep"))[1].version == 0
    assert (await store.get("/keep/child-parent/c"))[0] == b"k"
    assert await recorder.take() == []

    store = await reopen(store, tmp_path)
    assert await store.get_children("/") == ["controller_epoch", "keep"]
    assert (await store.get("/keep/child-parent/c"))[0] == b"k"
    await store.close()


async def test_empty_multi_is_a_no_op(store: LocalMetadataStore) -> None:
    assert await store.multi([]) == []


# --- sessions, ephemeral nodes, persistence -------------------------------------------------


async def test_ephemeral_nodes_vanish_on_reopen_and_persistent_ones_survive(
    tmp_path: Path,
) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    first_session = store.session_id
    assert first_session != 0
    await store.create("/brokers/ids", make_parents=True)
    await store.create("/brokers/ids/1", b'{"host":"h"}', ephemeral=True)
    await store.create("/controller", b'{"brokerid":1}', ephemeral=True)
    await store.set("/brokers/ids/1", b'{"host":"h2"}')
    await store.set("/brokers/ids", b"ids")
    stat = (await store.get("/brokers/ids/1"))[1]
    assert stat.ephemeral_owner == first_session
    assert stat.version == 1
    persisted = await store.get("/brokers/ids")

    store = await reopen(store, tmp_path)
    assert store.session_id != first_session
    assert await store.exists("/controller") is None
    assert await store.get_children("/brokers/ids") == []
    data, stat = await store.get("/brokers/ids")
    assert data == b"ids"
    assert (stat.version, stat.ctime, stat.mtime) == (
        persisted[1].version,
        persisted[1].ctime,
        persisted[1].mtime,
    )
    await store.close()


async def test_ephemeral_nodes_cannot_have_children(store: LocalMetadataStore) -> None:
    await store.create("/controller", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/controller/x")
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/controller/x/y", make_parents=True)
    assert await store.get_children("/controller") == []


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


async def test_calls_outside_a_session_fail(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    with pytest.raises(MetadataStoreError):
        await store.get("/")
    await store.start()
    with pytest.raises(MetadataStoreError):
        await store.start()
    await store.close()
    await store.close()
    with pytest.raises(MetadataStoreError):
        await store.create("/a")
    with pytest.raises(MetadataStoreError):
        _ = store.session_id


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


async def test_data_watch_sees_create_change_delete(store: LocalMetadataStore) -> None:
    recorder = Recorder()
    await store.watch_data("/controller", recorder)
    await store.create("/controller", b"1")
    await store.set("/controller", b"1")
    await store.create("/other")
    await store.delete("/controller")
    assert await recorder.take() == [
        ("/controller", EventType.CREATED),
        ("/controller", EventType.CHANGED),
        ("/controller", EventType.DELETED),
    ]


async def test_children_watch_sees_child_changes_not_data(store: LocalMetadataStore) -> None:
    recorder = Recorder()
    await store.watch_children("/brokers/ids", recorder)
    await store.create("/brokers/ids", make_parents=True)
    await store.create("/brokers/ids/1", ephemeral=True)
    await store.set("/brokers/ids/1", b"x")
    await store.set("/brokers/ids", b"x")
    await store.delete("/brokers/ids/1")
    await store.delete("/brokers", recursive=True)
    assert await recorder.take() == [
        ("/brokers/ids", EventType.CREATED),
        ("/brokers/ids", EventType.CHILDREN_CHANGED),
        ("/brokers/ids", EventType.CHILDREN_CHANGED),
        ("/brokers/ids", EventType.DELETED),
    ]


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


# --- property: failed transactions change nothing, the file matches memory ------------------

_NAMES = st.sampled_from(["a", "b", "c"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=3).map(lambda names: "/" + "/".join(names))
_VERSIONS = st.integers(min_value=-1, max_value=2)
_OPS = st.one_of(
    st.builds(CreateOp, _PATHS, st.binary(max_size=4), st.booleans()),
    st.builds(SetOp, _PATHS, st.binary(max_size=4), _VERSIONS),
    st.builds(DeleteOp, _PATHS, _VERSIONS),
    st.builds(CheckOp, _PATHS, _VERSIONS),
)


async def _dump(store: LocalMetadataStore, persistent_only: bool = False) -> dict[str, object]:
    dump: dict[str, object] = {}
    pending = ["/"]
    while pending:
        path = pending.pop()
        data, stat = await store.get(path)
        if not (persistent_only and stat.ephemeral_owner):
            # Reopening drops ephemeral nodes, so persistent parents may lose children.
            children = None if persistent_only else stat.num_children
            dump[path] = (data, stat.version, stat.ctime, stat.mtime, children)
        prefix = "" if path == "/" else path
        pending.extend(f"{prefix}/{name}" for name in await store.get_children(path))
    return dump


async def _run_transactions(directory: str, transactions: list[list[Op]]) -> None:
    store = LocalMetadataStore(directory)
    await store.start()
    for ops in transactions:
        before = await _dump(store)
        try:
            await store.multi(ops)
        except MetadataStoreError:
            assert await _dump(store) == before
    expected = await _dump(store, persistent_only=True)
    store = await reopen(store, Path(directory))
    assert await _dump(store, persistent_only=True) == expected
    await store.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_OPS, max_size=4), max_size=8))
def test_failed_multi_changes_nothing_and_file_matches_memory(
    transactions: list[list[Op]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run_transactions(directory, transactions))


_NAME_CHARS = st.characters(
    max_codepoint=0xFFEF, exclude_categories=("Cc", "Cs", "Co"), exclude_characters="/"
)
_ANY_NAMES = st.text(_NAME_CHARS, min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))


async def _round_trip(directory: str, nodes: dict[str, bytes]) -> None:
    store = LocalMetadataStore(directory)
    await store.start()
    for name, data in nodes.items():
        await store.create(f"/{name}", data)
    store = await reopen(store, Path(directory))
    assert {name: (await store.get(f"/{name}"))[0] for name in nodes} == nodes
    assert await store.get_children("/") == sorted(nodes)
    await store.close()


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_ANY_NAMES, st.binary(max_size=16) | st.text(max_size=8).map(str.encode)))
def test_any_valid_name_and_data_survive_reopen(nodes: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_round_trip(directory, nodes))
