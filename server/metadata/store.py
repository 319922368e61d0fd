"""The MetadataStore interface: a tree of versioned nodes modelled on ZooKeeper.

A single node without `process.roles` keeps its topic and partition metadata
(assignments, leader / leader epoch / ISR, topic configs, its registration, controller
election) in the embedded local store through this interface; KRaft nodes keep theirs in
the metadata log instead. Callers use Kafka's ZooKeeper-era layout (/brokers/ids/<id>,
/brokers/topics/<topic>/partitions/<p>/state, /config/topics/<topic>, /controller,
/controller_epoch, /admin/delete_topics/<topic>, /cluster/id); the store itself gives
paths no meaning.

Semantics follow ZooKeeper's: absolute '/'-separated paths, a root '/' that always exists,
a data version that starts at 0 on create and grows by one on every set, conditional writes
(`expected_version`, -1 meaning "any"), ephemeral nodes owned by the session that created them
(and unable to have children), and `multi` transactions that apply all of their ops or none.
Watches differ in one way, on purpose: they are persistent (like kazoo's DataWatch and
ChildrenWatch, which re-arm ZooKeeper's one-shot watches) and say only what happened, so a
callback reads the new state itself.
"""

from __future__ import annotations

import enum
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "BadVersionError",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "EventType",
    "MetadataStore",
    "MetadataStoreError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "OpResult",
    "SetOp",
    "Stat",
    "WatchCallback",
    "WatchEvent",
    "WatchHandle",
    "check_path",
]


# Characters ZooKeeper refuses in paths (PathUtils.validatePath): controls, surrogates, private
# use, specials; code points past U+FFFF are surrogate pairs to Java, so refused too. Refusing
# surrogates also keeps every path encodable as UTF-8.
_INVALID_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff]")


def check_path(path: str) -> str:
    """Return `path` if it is a valid node path, else raise ValueError (ZooKeeper's rules)."""
    if not path.startswith("/"):
        raise ValueError(f"node path must start with '/': {path!r}")
    if path == "/":
        return path
    if path.endswith("/"):
        raise ValueError(f"node path must not end with '/': {path!r}")
    if _INVALID_CHARS.search(path):
        raise ValueError(f"node path has a control, surrogate or reserved character: {path!r}")
    for name in path[1:].split("/"):
        if name in ("", ".", ".."):
            raise ValueError(f"node path has an empty, '.' or '..' component: {path!r}")
    return path


@dataclass(frozen=True, slots=True)
class Stat:
    """A node's metadata, as ZooKeeper's Stat (times are epoch milliseconds).

    `version` is ZooKeeper's dataVersion: 0 after create, +1 per set, reset by delete and
    re-create. `ephemeral_owner` is the owning session id, 0 for a persistent node.
    `czxid` identifies the node's creation: a node deleted and created again has a greater
    one (ZooKeeper's zxid of the create; Kafka's broker epoch is a registration's czxid).
    """

    version: int
    ctime: int
    mtime: int
    ephemeral_owner: int
    num_children: int
    czxid: int


class EventType(enum.Enum):
    """What a watch event reports about its path."""

    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change seen by a watch; `path` is the watched node (the parent, for children)."""

    path: str
    type: EventType


WatchCallback = Callable[[WatchEvent], object]


class WatchHandle(Protocol):
    """A registered watch. `cancel()` is idempotent; no callback runs after it returns."""

    def cancel(self) -> None: ...


class MetadataStoreError(Exception):
    """Base class of the store's errors.

    `path` names the node the error is about (None for store-wide failures); `op_index` is
    the position of the failing op when the error comes from `multi`, else None.
    """

    def __init__(self, message: str, *, path: str | None = None, op_index: int | None = None):
        if op_index is not None:
            message = f"{message} (multi op {op_index})"
        super().__init__(message)
        self.path = path
        self.op_index = op_index


class NoNodeError(MetadataStoreError):
    """The node (or, for create, its parent) does not exist."""

    def __init__(self, path: str, *, op_index: int | None = None) -> None:
        super().__init__(f"no node {path}", path=path, op_index=op_index)


class NodeExistsError(MetadataStoreError):
    """create found the node already there."""

    def __init__(self, path: str, *, op_index: int | None = None) -> None:
        super().__init__(f"node {path} exists", path=path, op_index=op_index)


class BadVersionError(MetadataStoreError):
    """A conditional op's expected_version is not the node's version."""

    def __init__(self, path: str, *, op_index: int | None = None) -> None:
        super().__init__(f"version mismatch on {path}", path=path, op_index=op_index)


class NotEmptyError(MetadataStoreError):
    """A non-recursive delete of a node that has children."""

    def __init__(self, path: str, *, op_index: int | None = None) -> None:
        super().__init__(f"node {path} has children", path=path, op_index=op_index)


class NoChildrenForEphemeralsError(MetadataStoreError):
    """create under an ephemeral node (ZooKeeper forbids children of ephemerals)."""

    def __init__(self, path: str, *, op_index: int | None = None) -> None:
        super().__init__(f"parent of {path} is ephemeral", path=path, op_index=op_index)


@dataclass(frozen=True, slots=True)
class CreateOp:
    """multi op: create a node. No make_parents: ZooKeeper cannot do that atomically."""

    path: str
    data: bytes = b""
    ephemeral: bool = False

    def __post_init__(self) -> None:
        check_path(self.path)


@dataclass(frozen=True, slots=True)
class SetOp:
    """multi op: set a node's data, optionally only at `expected_version`."""

    path: str
    data: bytes
    expected_version: int = -1

    def __post_init__(self) -> None:
        check_path(self.path)


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """multi op: delete a childless node, optionally only at `expected_version`."""

    path: str
    expected_version: int = -1

    def __post_init__(self) -> None:
        check_path(self.path)


@dataclass(frozen=True, slots=True)
class CheckOp:
    """multi op: fail the transaction unless the node exists at `expected_version` (-1: any)."""

    path: str
    expected_version: int = -1

    def __post_init__(self) -> None:
        check_path(self.path)


Op = CreateOp | SetOp | DeleteOp | CheckOp
# Per op of a successful multi: the created path, the new Stat, or None (delete, check).
OpResult = str | Stat | None


class MetadataStore(ABC):
    """A ZooKeeper-like tree of versioned nodes (see the module docstring).

    Contract: event-loop only; every method but `session_id` is a coroutine. Between
    `start()` and `close()` the store belongs to one session: mutations return after the
    change is durable (for a replicated store: committed), and watch callbacks run on the
    event loop, scheduled with `loop.call_soon`, never inside the call that made the change,
    in the order the changes were made. Outside a session every call raises
    MetadataStoreError; an invalid path raises ValueError (see `check_path`).
    """

    @property
    @abstractmethod
    def session_id(self) -> int:
        """The current session's id (non-zero); the ephemeral_owner of its ephemeral nodes."""

    @abstractmethod
    async def start(self) -> None:
        """Open the store and begin a session."""

    @abstractmethod
    async def close(self) -> None:
        """End the session: its ephemeral nodes go, its watches stop. Idempotent."""

    @abstractmethod
    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = False
    ) -> str:
        """Create a node and return its path.

        Raises NodeExistsError if it exists; NoNodeError if its parent is missing (unless
        `make_parents`, which creates missing ancestors as empty persistent nodes);
        NoChildrenForEphemeralsError if its parent is ephemeral.
        """

    @abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat]:
        """The node's data and Stat; NoNodeError if it does not exist."""

    @abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """The node's Stat, or None if it does not exist."""

    @abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """The names (not paths) of the node's children, sorted; NoNodeError if no node."""

    @abstractmethod
    async def set(self, path: str, data: bytes, *, expected_version: int = -1) -> Stat:
        """Replace the node's data and return its new Stat.

        Raises NoNodeError, or BadVersionError when `expected_version` is not -1 and differs
        from the node's version (a compare-and-set).
        """

    @abstractmethod
    async def delete(
        self, path: str, *, expected_version: int = -1, recursive: bool = False
    ) -> None:
        """Delete the node; with `recursive`, its descendants first.

        Raises NoNodeError, BadVersionError (checked on `path` itself), or NotEmptyError when
        the node has children and `recursive` is False. Only `multi` is guaranteed atomic:
        a recursive delete may be a sequence of deletes in some implementations.
        """

    @abstractmethod
    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply `ops` in order as one transaction: all of them or none.

        Each op sees the effects of those before it. On failure nothing is applied and the
        failing op's error is raised with its `op_index` set.
        """

    @abstractmethod
    async def watch_data(self, path: str, callback: WatchCallback) -> WatchHandle:
        """Watch the node at `path` (which need not exist) until cancelled.

        Events: CREATED, CHANGED (every set, even to equal data), DELETED.
        """

    @abstractmethod
    async def watch_children(self, path: str, callback: WatchCallback) -> WatchHandle:
        """Watch the child list of `path` (which need not exist) until cancelled.

        Events: CHILDREN_CHANGED when a child is created or deleted, and CREATED / DELETED
        when the node itself is.
        """
