"""A replica's identity in the quorum: its node id and, with KIP-853, the directory id of
its metadata log dir (Kafka's ``ReplicaKey``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = ["ReplicaKey"]


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """``directory_id`` None is Kafka's ``ReplicaKey.NO_DIRECTORY_ID`` (the zero uuid on
    the wire): a static voter of ``controller.quorum.voters`` has none.

    Invariant: a value; safe anywhere."""

    id: int
    directory_id: uuid.UUID | None = None

    @staticmethod
    def of(replica_id: int, directory_id: uuid.UUID | None) -> ReplicaKey:
        """The zero uuid, as it arrives on the wire, means no directory id."""
        if directory_id is not None and directory_id.int == 0:
            directory_id = None
        return ReplicaKey(replica_id, directory_id)

    def matches(self, other: ReplicaKey) -> bool:
        """Same id, and same directory id unless this key has none (Kafka's
        ``ReplicaState.matchesKey``)."""
        if self.id != other.id:
            return False
        return self.directory_id is None or self.directory_id == other.directory_id

    def sort_key(self) -> tuple[int, int]:
        """Kafka's ``ReplicaKey.compareTo``: by id, then directory id (none first)."""
        return (self.id, -1 if self.directory_id is None else self.directory_id.int)

    def __str__(self) -> str:
        directory = "<none>" if self.directory_id is None else str(self.directory_id)
        return f"ReplicaKey(id={self.id}, directoryId={directory})"
