"""What the group coordinator answers: immutable values the handlers turn into responses.

Names and meanings follow Kafka's classic coordinator (JoinGroupResult, SyncGroupResult,
MemberSummary, GroupSummary, GroupOverview). All are frozen values, safe anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import ErrorCode

NO_GENERATION: Final = -1
NO_LEADER: Final = ""
UNKNOWN_MEMBER_ID: Final = ""


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    """Invariant: with an error, ``members`` is empty and the generation is -1 unless a
    path of Kafka's says otherwise (a static member's failed re-join keeps them)."""

    member_id: str
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = NO_LEADER
    skip_assignment: bool = False
    members: tuple[JoinGroupResponseMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups: ``protocol`` and member metadata only for a Stable group."""

    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """ListGroups: one group."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]

# DescribeGroups of a group this coordinator does not know (Kafka's DeadGroup), and the
# summary sent with an error (EmptyGroup).
DEAD_GROUP_SUMMARY: Final = GroupSummary("Dead", "", "")
EMPTY_GROUP_SUMMARY: Final = GroupSummary("", "", "")
