"""SyncGroup, Heartbeat and LeaveGroup of the classic protocol, and what they share with
JoinGroup (`group_join`): member validation and parked requests.

A port of the membership half of Kafka's classic GroupCoordinator. A JoinGroup or
SyncGroup that must wait for the rest of the group parks a callback on its member; the
callback completes the request's future when the rebalance moves on (or the group is
unloaded). The coordinator never computes an assignment: the leader sends it in its
SyncGroup and each member gets its own bytes. Generation fencing: ILLEGAL_GENERATION for
a stale generation, UNKNOWN_MEMBER_ID for a member the group does not know,
REBALANCE_IN_PROGRESS while the group rebalances, FENCED_INSTANCE_ID for the old
incarnation of a static member.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    KafkaError,
    UnknownMemberIdError,
)
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.coordinator.group.group_results import (
    UNKNOWN_MEMBER_ID,
    LeaveMemberResult,
    SyncCallback,
    SyncGroupResult,
)
from tiercel.server.coordinator.group.rebalance import Rebalancer

_log: Final = logging.getLogger("tiercel.group_coordinator")

StatusCheck = Callable[[str], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


def validate_current_member(
    group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
) -> None:
    """A static member must be the current holder of its instance id (else it has been
    fenced by a newer instance); any member must be in the group."""
    if group_instance_id is not None:
        current = group.current_static_member_id(group_instance_id)
        if current is None:
            raise UnknownMemberIdError(f"unknown group.instance.id {group_instance_id}")
        if current != member_id:
            log_event(
                _log,
                logging.INFO,
                "static_member_fenced",
                group=group.group_id,
                member=member_id,
                instance=group_instance_id,
                current_member=current,
                operation=operation,
            )
            raise FencedInstanceIdError(
                f"member {member_id} of {group_instance_id} was replaced by {current}"
            )
        return
    if not group.has(member_id):
        raise UnknownMemberIdError(f"unknown member {member_id} in group {group.group_id}")


class ParkedRequests:
    """JoinGroup and SyncGroup requests waiting for their group to move on.

    Invariants: every future held belongs to a request still being handled; `release_all`
    (at shutdown) answers those no group answered, so no connection waits forever.

    Event-loop only.
    """

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Future[Any], Any] = {}

    @staticmethod
    def new() -> tuple[asyncio.Future[Any], Callable[[Any], None]]:
        """A future and the callback that completes it (at most once: the request may
        be answered by two paths, or have been cancelled with its connection)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def respond(result: Any) -> None:
            if not future.done():
                future.set_result(result)

        return future, respond

    async def wait(self, future: asyncio.Future[Any], on_release: T) -> T:
        """The future's result; ``on_release`` if the coordinator stops first."""
        self._waiting[future] = on_release
        try:
            result: T = await future
            return result
        finally:
            self._waiting.pop(future, None)

    def release_all(self) -> None:
        for future, answer in list(self._waiting.items()):
            if not future.done():
                future.set_result(answer)


class GroupMembership:
    """SyncGroup, Heartbeat and LeaveGroup. Event-loop only."""

    def __init__(
        self,
        manager: GroupMetadataManager,
        rebalancer: Rebalancer,
        validate_group_status: StatusCheck,
        parked: ParkedRequests,
    ) -> None:
        self._manager = manager
        self._rebalancer = rebalancer
        self._validate_group_status = validate_group_status
        self._parked = parked

    # -- SyncGroup ----------------------------------------------------------------------

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncGroupResult:
        try:
            self._validate_group_status(group_id)
        except CoordinatorLoadInProgressError:
            # The rebalance's state was lost with the old coordinator: rejoin (older
            # clients do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            return SyncGroupResult(ErrorCode.rebalance_in_progress)
        except KafkaError as e:
            return SyncGroupResult(e.error_code)
        group = self._manager.get_group(group_id)
        if group is None:
            return SyncGroupResult(ErrorCode.unknown_member_id)
        future, respond = self._parked.new()
        await self._do_sync_group(
            group,
            generation_id,
            member_id,
            protocol_type,
            protocol_name,
            group_instance_id,
            assignments,
            respond,
        )
        return await self._parked.wait(future, SyncGroupResult(ErrorCode.not_coordinator))

    @staticmethod
    def _validate_sync_group(
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
    ) -> None:
        if group.is_(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id} is being removed")
        validate_current_member(group, member_id, group_instance_id, "sync-group")
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} is not {group.generation_id} of {group.group_id}"
            )
        if protocol_type is not None and protocol_type != group.protocol_type:
            raise InconsistentGroupProtocolError(f"protocol type {protocol_type}")
        if protocol_name is not None and protocol_name != group.protocol_name:
            raise InconsistentGroupProtocolError(f"protocol {protocol_name}")

    async def _do_sync_group(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
        assignments: Mapping[str, bytes],
        respond: SyncCallback,
    ) -> None:
        try:
            self._validate_sync_group(
                group, generation_id, member_id, protocol_type, protocol_name, group_instance_id
            )
        except KafkaError as e:
            respond(SyncGroupResult(e.error_code))
            return
        if group.is_(GroupState.EMPTY):
            respond(SyncGroupResult(ErrorCode.unknown_member_id))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            respond(SyncGroupResult(ErrorCode.rebalance_in_progress))
        elif group.is_(GroupState.STABLE):
            self._rebalancer.remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            respond(
                SyncGroupResult(
                    ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
                )
            )
            self._rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
        else:
            group.get(member_id).awaiting_sync_callback = respond
            self._rebalancer.remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                await self._store_assignment(group, generation_id, member_id, assignments)

    async def _store_assignment(
        self,
        group: GroupMetadata,
        generation_id: int,
        leader_id: str,
        assignments: Mapping[str, bytes],
    ) -> None:
        # Members the leader left out get an empty assignment.
        assignment = {mid: assignments.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in assignments]
        log_event(
            _log,
            logging.INFO,
            "assignment_received",
            group=group.group_id,
            generation=generation_id,
            leader=leader_id,
            members=group.size,
            static_members=len(group.static_members),
            **({"without_assignment": missing} if missing else {}),
        )
        error = await self._manager.store_group(group, assignment)
        # Another member may have joined meanwhile: act only on the same generation.
        if not group.is_(GroupState.COMPLETING_REBALANCE) or generation_id != group.generation_id:
            return
        if error is not ErrorCode.none:
            self._rebalancer.reset_and_propagate_assignment_error(group, error)
            self._rebalancer.maybe_prepare_rebalance(
                group, f"error {error.name} storing the assignment of {leader_id}"
            )
        else:
            self._rebalancer.set_and_propagate_assignment(group, assignment)
            group.transition_to(GroupState.STABLE)

    # -- Heartbeat ----------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        try:
            self._validate_group_status(group_id)
        except CoordinatorLoadInProgressError:
            return ErrorCode.none  # the group is still loading: answer blindly
        except KafkaError as e:
            return e.error_code
        group = self._manager.get_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        try:
            if group.is_(GroupState.DEAD):
                raise CoordinatorNotAvailableError(f"group {group_id} is being removed")
            validate_current_member(group, member_id, group_instance_id, "heartbeat")
            if generation_id != group.generation_id:
                raise IllegalGenerationError(
                    f"generation {generation_id} is not {group.generation_id} of {group_id}"
                )
        except KafkaError as e:
            return e.error_code
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._rebalancer.complete_and_schedule_next_heartbeat_expiration(
            group, group.get(member_id)
        )
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup ---------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: Sequence[LeavingMember]
    ) -> tuple[ErrorCode, list[LeaveMemberResult]]:
        """The top-level error and one result per leaving member (LeaveGroup v3+ leaves
        several at once, by member id or, for administrators, by instance id alone)."""
        try:
            self._validate_group_status(group_id)
        except KafkaError as e:
            return e.error_code, []
        group = self._manager.get_group(group_id)
        if group is None:
            return ErrorCode.none, [
                LeaveMemberResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                for m in members
            ]
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, []
        results = []
        for leaving in members:
            error = self._leave(group, leaving)
            results.append(LeaveMemberResult(leaving.member_id, leaving.group_instance_id, error))
        return ErrorCode.none, results

    def _leave(self, group: GroupMetadata, leaving: LeavingMember) -> ErrorCode:
        member_id = leaving.member_id
        if member_id == UNKNOWN_MEMBER_ID:
            instance = leaving.group_instance_id
            current = None if instance is None else group.current_static_member_id(instance)
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_current_member(group, current, leaving.reason)
            return ErrorCode.none
        if group.is_pending_member(member_id):
            self._rebalancer.remove_pending_member_and_update_group(group, member_id)
            return ErrorCode.none
        try:
            validate_current_member(group, member_id, leaving.group_instance_id, "leave-group")
        except KafkaError as e:
            return e.error_code
        self._remove_current_member(group, member_id, leaving.reason)
        return ErrorCode.none

    def _remove_current_member(
        self, group: GroupMetadata, member_id: str, reason: str | None
    ) -> None:
        log_event(
            _log,
            logging.INFO,
            "member_left",
            group=group.group_id,
            member=member_id,
            reason=reason or "not provided",
        )
        self._rebalancer.remove_member_and_update_group(
            group,
            group.get(member_id),
            f"removing member {member_id} on LeaveGroup; client reason: {reason}",
        )
