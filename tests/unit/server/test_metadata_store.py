"""The MetadataStore contract (ZooKeeper's semantics, see store.py), run against the
embedded local store; what only it does (the file format, fsync coalescing) is in
test_local_store.py.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiercel.server.metadata.local_store import LocalMetadataStore
from tiercel.server.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
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

# A store over one directory; `sub` names a fresh one inside it, for hypothesis examples.
Opener = Callable[..., MetadataStore]


@pytest.fixture
def opener(tmp_path: Path) -> Opener:
    def open_local(sub: str = "") -> MetadataStore:
        directory = tmp_path / sub
        directory.mkdir(exist_ok=True)
        return LocalMetadataStore(directory)

    return open_local


@pytest.fixture
async def store(opener: Opener) -> AsyncIterator[MetadataStore]:
    s = opener()
    await s.start()
    yield s
    await s.close()


async def reopen(s: MetadataStore, opener: Opener, sub: str = "") -> MetadataStore:
    await s.close()
    fresh = opener(sub)
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

    async def take(self, store: MetadataStore) -> list[tuple[str, EventType]]:
        # A round trip: ZooKeeper answers in order, so every re-arming read sent before
        # it has been answered, and its events queued, when it returns.
        await store.exists("/")
        for _ in range(3):
            await asyncio.sleep(0)
        taken = [(e.path, e.type) for e in self.events]
        self.events.clear()
        return taken


# --- create / get / exists / children ------------------------------------------------------


async def test_create_then_get_returns_data_and_fresh_stat(store: MetadataStore) -> None:
    assert await store.create("/brokers", b"x") == "/brokers"
    data, stat = await store.get("/brokers")
    assert data == b"x"
    assert stat.version == 0
    assert stat.ctime == stat.mtime > 0
    assert stat.ephemeral_owner == 0
    assert stat.num_children == 0
    assert await store.exists("/brokers") == stat
    assert await store.exists("/nope") is None


async def test_create_needs_parent_unless_make_parents(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError) as info:
        await store.create("/brokers/topics/t", b"t")
    assert info.value.path == "/brokers/topics/t"
    assert await store.exists("/brokers") is None

    await store.create("/brokers/topics/t", b"t", make_parents=True)
    assert await store.get("/brokers") == (b"", await store.exists("/brokers"))
    assert (await store.get("/brokers/topics/t"))[0] == b"t"
    assert await store.exists("/brokers/topics")
    assert await store.get_children("/") == ["brokers"]


async def test_create_existing_node_fails(store: MetadataStore) -> None:
    await store.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        await store.create("/a", b"2")
    with pytest.raises(NodeExistsError):
        await store.create("/a", b"2", make_parents=True)
    with pytest.raises(NodeExistsError):
        await store.create("/")
    assert (await store.get("/a"))[0] == b"1"


async def test_children_are_sorted_names_and_counted(store: MetadataStore) -> None:
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
async def test_invalid_paths_are_rejected(store: MetadataStore, path: str) -> None:
    with pytest.raises(ValueError):
        await store.create(path)
    with pytest.raises(ValueError):
        await store.get(path)


# --- set / delete ---------------------------------------------------------------------------


async def test_set_bumps_version_and_mtime(store: MetadataStore) -> None:
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


async def test_conditional_set_with_stale_version_fails(store: MetadataStore) -> None:
    await store.create("/state", b"isr=1,2")
    await store.set("/state", b"isr=1")
    with pytest.raises(BadVersionError) as info:
        await store.set("/state", b"isr=1,2,3", expected_version=0)
    assert info.value.path == "/state"
    data, stat = await store.get("/state")
    assert (data, stat.version) == (b"isr=1", 1)
    with pytest.raises(NoNodeError):
        await store.set("/missing", b"")


async def test_delete_semantics(store: MetadataStore) -> None:
    await store.create("/t/p/0", b"s", make_parents=True)
    with pytest.raises(NotEmptyError):
        await store.delete("/t")
    with pytest.raises(BadVersionError):
        await store.delete("/t/p/0", expected_version=3)
    with pytest.raises(NoNodeError):
        await store.delete("/nope")
    with pytest.raises(NoNodeError):
        await store.delete("/nope", recursive=True)
    with pytest.raises(ValueError):
        await store.delete("/", recursive=True)
    await store.delete("/t/p/0", expected_version=0)
    assert await store.exists("/t/p/0") is None
    await store.create("/t/p/1", make_parents=True)
    await store.delete("/t", recursive=True)
    assert await store.get_children("/") == []


async def test_recursive_delete_checks_version_of_top_node(store: MetadataStore) -> None:
    await store.create("/t/a/b", make_parents=True)
    await store.set("/t", b"v1")
    with pytest.raises(BadVersionError) as info:
        await store.delete("/t", expected_version=0, recursive=True)
    assert info.value.path == "/t"
    assert await store.get_children("/t") == ["a"]
    assert await store.get_children("/t/a") == ["b"]
    await store.delete("/t", expected_version=1, recursive=True)
    assert await store.exists("/t") is None


async def test_recreate_resets_version(store: MetadataStore) -> None:
    await store.create("/a")
    await store.set("/a", b"1")
    await store.delete("/a")
    await store.create("/a")
    assert (await store.get("/a"))[1].version == 0


async def test_czxid_tells_a_recreated_node_from_the_old_one(store: MetadataStore) -> None:
    """A registration's czxid is Kafka's broker epoch: a set keeps it, a re-create (in
    one multi too) makes it greater."""
    await store.create("/a", ephemeral=True)
    first = (await store.get("/a"))[1].czxid
    await store.set("/a", b"1")
    assert (await store.get("/a"))[1].czxid == first
    await store.multi([DeleteOp("/a"), CreateOp("/a", b"", True)])
    second = (await store.get("/a"))[1].czxid
    assert second > first
    await store.delete("/a")
    await store.create("/a", ephemeral=True)
    assert (await store.get("/a"))[1].czxid > second


# --- multi ----------------------------------------------------------------------------------


async def test_multi_applies_ops_in_order_and_returns_results(store: MetadataStore) -> None:
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
        (CreateOp("/eph/child"), NoChildrenForEphemeralsError),
        (SetOp("/keep", b"", expected_version=5), BadVersionError),
        (DeleteOp("/keep"), NotEmptyError),
        (DeleteOp("/keep", expected_version=9), BadVersionError),
    ],
)
async def test_multi_is_all_or_nothing(
    store: MetadataStore, opener: Opener, failing: Op, error: type[Exception]
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
    assert info.value.path == failing.path
    assert await store.get_children("/") == ["controller_epoch", "keep"]
    assert await store.get("/keep") == (b"", await store.exists("/keep"))
    assert (await store.get("/keep"))[1].version == 0
    assert (await store.get("/keep/child-parent/c"))[0] == b"k"
    assert await recorder.take(store) == []

    store = await reopen(store, opener)
    assert await store.get_children("/") == ["controller_epoch", "keep"]
    assert (await store.get("/keep/child-parent/c"))[0] == b"k"
    await store.close()


async def test_empty_multi_is_a_no_op(store: MetadataStore) -> None:
    assert await store.multi([]) == []


# --- sessions, ephemeral nodes --------------------------------------------------------------


async def test_ephemeral_nodes_vanish_with_the_session_and_persistent_ones_stay(
    opener: Opener,
) -> None:
    store = opener()
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

    store = await reopen(store, opener)
    assert store.session_id not in (0, first_session)
    assert await store.exists("/controller") is None
    assert await store.get_children("/brokers/ids") == []
    data, stat = await store.get("/brokers/ids")
    assert data == b"ids"
    # Deleting a child (the ephemeral) touches the parent's child version, not its data.
    assert (stat.version, stat.ctime, stat.mtime) == (
        persisted[1].version,
        persisted[1].ctime,
        persisted[1].mtime,
    )
    await store.close()


async def test_ephemeral_nodes_cannot_have_children(store: MetadataStore) -> None:
    await store.create("/controller", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/controller/x")
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/controller/x/y", make_parents=True)
    assert await store.get_children("/controller") == []


async def test_calls_outside_a_session_fail(opener: Opener) -> None:
    store = opener()
    with pytest.raises(MetadataStoreError):
        await store.get("/")
    with pytest.raises(MetadataStoreError):
        _ = store.session_id
    await store.start()
    with pytest.raises(MetadataStoreError):
        await store.start()
    await store.close()
    await store.close()
    with pytest.raises(MetadataStoreError):
        await store.create("/a")
    with pytest.raises(MetadataStoreError):
        await store.watch_data("/a", Recorder())
    with pytest.raises(MetadataStoreError):
        _ = store.session_id


# --- watches --------------------------------------------------------------------------------


async def test_data_watch_sees_create_change_delete(store: MetadataStore) -> None:
    recorder = Recorder()
    await store.watch_data("/controller", recorder)
    await store.create("/controller", b"1")
    await store.set("/controller", b"1")
    await store.create("/other")
    await store.delete("/controller")
    assert await recorder.take(store) == [
        ("/controller", EventType.CREATED),
        ("/controller", EventType.CHANGED),
        ("/controller", EventType.DELETED),
    ]


async def test_children_watch_sees_child_changes_not_data(store: MetadataStore) -> None:
    recorder = Recorder()
    await store.watch_children("/brokers/ids", recorder)
    await store.create("/brokers/ids", make_parents=True)
    await store.create("/brokers/ids/1", ephemeral=True)
    await store.set("/brokers/ids/1", b"x")
    await store.set("/brokers/ids", b"x")
    await store.delete("/brokers/ids/1")
    await store.delete("/brokers", recursive=True)
    assert await recorder.take(store) == [
        ("/brokers/ids", EventType.CREATED),
        ("/brokers/ids", EventType.CHILDREN_CHANGED),
        ("/brokers/ids", EventType.CHILDREN_CHANGED),
        ("/brokers/ids", EventType.DELETED),
    ]


async def test_watches_of_several_nodes_see_changes_in_order(store: MetadataStore) -> None:
    recorder = Recorder()
    for name in ("a", "b", "c"):
        await store.watch_data(f"/{name}", recorder)
    await store.watch_children("/", recorder)
    await store.create("/b")
    await store.multi([CreateOp("/a"), SetOp("/b", b"1"), CreateOp("/c")])
    await store.set("/a", b"2")
    await store.delete("/b")
    assert await recorder.take(store) == [
        ("/b", EventType.CREATED),
        ("/", EventType.CHILDREN_CHANGED),
        ("/a", EventType.CREATED),
        ("/", EventType.CHILDREN_CHANGED),
        ("/b", EventType.CHANGED),
        ("/c", EventType.CREATED),
        ("/", EventType.CHILDREN_CHANGED),
        ("/a", EventType.CHANGED),
        ("/b", EventType.DELETED),
        ("/", EventType.CHILDREN_CHANGED),
    ]


async def test_watch_reports_every_change_of_a_burst(store: MetadataStore) -> None:
    recorder = Recorder()
    await store.watch_data("/n", recorder)
    await asyncio.gather(store.create("/n"), *(store.set("/n", b"x") for _ in range(20)))
    events = await recorder.take(store)
    # Changes that land while a one-shot ZooKeeper watch re-arms are reported together:
    # at least one CHANGED, and the last event tells that the node is there and changed.
    assert events[0] == ("/n", EventType.CREATED)
    assert set(events[1:]) == {("/n", EventType.CHANGED)}
    assert (await store.get("/n"))[1].version == 20


async def test_cancelled_watch_gets_nothing(store: MetadataStore) -> None:
    recorder, other = Recorder(), Recorder()
    handle = await store.watch_data("/e", recorder)
    await store.watch_data("/e", other)
    create = asyncio.ensure_future(store.create("/e", ephemeral=True))
    handle.cancel()
    handle.cancel()
    await create
    await store.set("/e", b"1")
    assert await recorder.take(store) == []
    assert await other.take(store) == [("/e", EventType.CREATED), ("/e", EventType.CHANGED)]


async def test_watches_stop_at_close(store: MetadataStore, opener: Opener) -> None:
    recorder = Recorder()
    await store.watch_data("/e", recorder)
    await store.create("/e", ephemeral=True)
    assert await recorder.take(store) == [("/e", EventType.CREATED)]
    await store.close()
    # The session's end deletes /e: nobody is told.
    store = opener()
    await store.start()
    assert await store.exists("/e") is None
    assert await recorder.take(store) == []
    await store.close()


# --- properties: failed transactions change nothing, state survives a new session ------------

_NAMES = st.sampled_from(["a", "b", "c"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=3).map(lambda names: "/" + "/".join(names))
_VERSIONS = st.integers(min_value=-1, max_value=2)
_OPS = st.one_of(
    st.builds(CreateOp, _PATHS, st.binary(max_size=4), st.booleans()),
    st.builds(SetOp, _PATHS, st.binary(max_size=4), _VERSIONS),
    st.builds(DeleteOp, _PATHS, _VERSIONS),
    st.builds(CheckOp, _PATHS, _VERSIONS),
)


async def dump(store: MetadataStore, persistent_only: bool = False) -> dict[str, object]:
    """Every node's data and Stat (ephemeral nodes left out with `persistent_only`)."""
    nodes: dict[str, object] = {}
    pending = ["/"]
    while pending:
        path = pending.pop()
        data, stat = await store.get(path)
        if not (persistent_only and stat.ephemeral_owner):
            # A new session drops ephemeral nodes, so persistent parents may lose children.
            children = None if persistent_only else stat.num_children
            nodes[path] = (data, stat.version, stat.ctime, stat.mtime, children)
        prefix = "" if path == "/" else path
        pending.extend(f"{prefix}/{name}" for name in await store.get_children(path))
    return nodes


async def _run_transactions(opener: Opener, transactions: list[list[Op]]) -> None:
    sub = uuid.uuid4().hex
    store = opener(sub)
    await store.start()
    for ops in transactions:
        before = await dump(store)
        try:
            await store.multi(ops)
        except MetadataStoreError as e:
            assert e.op_index is not None
            assert await dump(store) == before
    expected = await dump(store, persistent_only=True)
    store = await reopen(store, opener, sub)
    assert await dump(store, persistent_only=True) == expected
    await store.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(transactions=st.lists(st.lists(_OPS, max_size=4), max_size=8))
def test_failed_multi_changes_nothing_and_state_survives_the_session(
    opener: Opener, transactions: list[list[Op]]
) -> None:
    asyncio.run(_run_transactions(opener, transactions))


_NAME_CHARS = st.characters(
    max_codepoint=0xFFEF, exclude_categories=("Cc", "Cs", "Co"), exclude_characters="/"
)
_ANY_NAMES = st.text(_NAME_CHARS, min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))


async def _round_trip(opener: Opener, nodes: dict[str, bytes]) -> None:
    sub = uuid.uuid4().hex
    store = opener(sub)
    await store.start()
    for name, data in nodes.items():
        await store.create(f"/{name}", data)
    store = await reopen(store, opener, sub)
    assert {name: (await store.get(f"/{name}"))[0] for name in nodes} == nodes
    assert await store.get_children("/") == sorted(nodes)
    await store.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    nodes=st.dictionaries(_ANY_NAMES, st.binary(max_size=16) | st.text(max_size=8).map(str.encode))
)
def test_any_valid_name_and_data_survive_a_new_session(
    opener: Opener, nodes: dict[str, bytes]
) -> None:
    asyncio.run(_round_trip(opener, nodes))
