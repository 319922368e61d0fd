"""MemberMetadata: one member of a classic group, as Kafka's coordinator keeps it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tiercel.server.coordinator.group.group_results import JoinCallback, MemberSummary, SyncCallback

Protocols = tuple[tuple[str, bytes], ...]


class MemberMetadata:
    """A member: its session, its protocols in preference order, and what it waits for.

    Invariants: ``supported_protocols`` is non-empty (the group checks this on join;
    for a repeated name the first entry counts); ``awaiting_join_callback`` is set exactly while a
    JoinGroup of this member is parked in a rebalance, ``awaiting_sync_callback`` while
    its SyncGroup waits for the leader's assignment; ``heartbeat_timer`` is the pending
    session expiration, if any. ``member_id`` changes only when a static member is
    replaced (KIP-345).

    Event-loop only.
    """

    __slots__ = (
        "assignment",
        "awaiting_join_callback",
        "awaiting_sync_callback",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_satisfied",
        "heartbeat_timer",
        "is_new",
        "member_id",
        "protocol_type",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "supported_protocols",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = supported_protocols
        self.assignment = assignment
        self.awaiting_join_callback: JoinCallback | None = None
        self.awaiting_sync_callback: SyncCallback | None = None
        # A member that has just joined has no member id to heartbeat with: it is expired
        # by a join timeout instead of its session timeout (Kafka's isNew).
        self.is_new = False
        # Set by a heartbeat (or anything proving liveness) since the last expiration
        # was scheduled; an expiration finding it unset removes the member.
        self.heartbeat_satisfied = False
        self.heartbeat_timer: asyncio.TimerHandle | None = None

    @property
    def is_static_member(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.supported_protocols)

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """Members parked in a rebalance count as alive, except new ones, which may
        expire while they wait for their first JoinGroup response."""
        if self.is_new:
            return self.heartbeat_satisfied
        return self.is_awaiting_join or self.is_awaiting_sync or self.heartbeat_satisfied

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes."""
        return tuple(protocols) == self.supported_protocols

    def vote(self, candidates: frozenset[str]) -> str:
        """The first protocol, in this member's preference order, among ``candidates``."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def summary(self, protocol: str) -> MemberSummary:
        return MemberSummary(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.metadata(protocol),
            self.assignment,
        )

    def summary_no_metadata(self) -> MemberSummary:
        return MemberSummary(
            self.member_id, self.group_instance_id, self.client_id, self.client_host, b"", b""
        )

    def cancel_heartbeat(self) -> None:
        if self.heartbeat_timer is not None:
            self.heartbeat_timer.cancel()
            self.heartbeat_timer = None

    def __repr__(self) -> str:
        return (
            f"MemberMetadata(member_id={self.member_id}, "
            f"group_instance_id={self.group_instance_id}, client_id={self.client_id}, "
            f"client_host={self.client_host}, session_timeout_ms={self.session_timeout_ms}, "
            f"rebalance_timeout_ms={self.rebalance_timeout_ms}, "
            f"protocols={[name for name, _ in self.supported_protocols]})"
        )
