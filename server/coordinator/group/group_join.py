"""JoinGroup of the classic protocol (the join half of Kafka's classic GroupCoordinator).

A new member joins (and, from JoinGroup v4, first gets MEMBER_ID_REQUIRED with the member
id it must join again with, KIP-394; a member id never used again expires with the
session timeout); a known member rejoins for the next generation. The JoinGroup waits,
parked, until the rebalance completes; the leader's answer lists the members and their
metadata. KIP-345: a static member's group.instance.id survives restarts; rejoining a
Stable group with unchanged protocols takes no rebalance, and the old member id is
fenced with FENCED_INSTANCE_ID.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.coordinator.group.group_config import GroupCoordinatorConfig
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.coordinator.group.group_results import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
)
from tiercel.server.coordinator.group.member_metadata import MemberMetadata, Protocols
from tiercel.server.coordinator.group.membership import (
    ParkedRequests,
    StatusCheck,
    validate_current_member,
)
from tiercel.server.coordinator.group.rebalance import NEW_MEMBER_JOIN_TIMEOUT_MS, Rebalancer

_log: Final = logging.getLogger("tiercel.group_coordinator")


@dataclass(frozen=True, slots=True)
class JoinGroupParams:
    """A JoinGroup request in version-independent form. ``require_known_member_id``
    (KIP-394) is v4+ for dynamic members; ``support_skipping_assignment`` is v9+."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    require_known_member_id: bool
    support_skipping_assignment: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    reason: str | None = None


class GroupJoin:
    """Event-loop only."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        rebalancer: Rebalancer,
        validate_group_status: StatusCheck,
        parked: ParkedRequests,
    ) -> None:
        self._config = config
        self._manager = manager
        self._rebalancer = rebalancer
        self._validate_group_status = validate_group_status
        self._parked = parked

    async def join_group(self, params: JoinGroupParams) -> JoinGroupResult:
        future, respond = self._parked.new()
        await self._handle_join_group(params, respond)
        return await self._parked.wait(
            future, JoinGroupResult(params.member_id, ErrorCode.not_coordinator)
        )

    async def _handle_join_group(self, params: JoinGroupParams, respond: JoinCallback) -> None:
        try:
            self._validate_group_status(params.group_id)
        except KafkaError as e:
            respond(JoinGroupResult(params.member_id, e.error_code))
            return
        config = self._config
        if not (
            config.group_min_session_timeout_ms
            <= params.session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            respond(JoinGroupResult(params.member_id, ErrorCode.invalid_session_timeout))
            return
        is_unknown = params.member_id == UNKNOWN_MEMBER_ID
        # A group is created by a new member; a known member id of an unknown group is
        # refused.
        group = self._manager.get_or_maybe_create_group(params.group_id, is_unknown)
        if group is None:
            respond(JoinGroupResult(params.member_id, ErrorCode.unknown_member_id))
            return
        if not self._accept_joining_member(group, params.member_id):
            group.remove(params.member_id)
            respond(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown:
            await self._do_new_member_join(group, params, respond)
        else:
            self._do_current_member_join(group, params, respond)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._rebalancer.try_complete_join(group)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """group.max.size: during a rebalance the parked members count (so the last to
        rejoin are the ones turned away when the limit was lowered), otherwise all."""
        limit = self._config.group_max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            return (
                group.has(member_id) and group.get(member_id).is_awaiting_join
            ) or group.num_members_awaiting_join < limit
        return group.has(member_id) or group.size < limit

    async def _do_new_member_join(
        self, group: GroupMetadata, params: JoinGroupParams, respond: JoinCallback
    ) -> None:
        if group.is_(GroupState.DEAD):
            # Removed by another path just now (moved away, or being deleted): the client
            # finds the coordinator again and retries.
            respond(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
            return
        names = frozenset(name for name, _ in params.protocols)
        if not group.supports_protocols(params.protocol_type, names):
            respond(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
            return
        new_member_id = group.generate_member_id(params.client_id, params.group_instance_id)
        instance_id = params.group_instance_id
        if instance_id is None:
            self._do_dynamic_new_member_join(group, new_member_id, params, respond)
            return
        old_member_id = group.current_static_member_id(instance_id)
        if old_member_id is None:
            self._add_member_and_rebalance(group, new_member_id, params, respond)
        else:
            await self._update_static_member_and_rebalance(
                group, instance_id, old_member_id, new_member_id, params, respond
            )

    def _do_dynamic_new_member_join(
        self,
        group: GroupMetadata,
        new_member_id: str,
        params: JoinGroupParams,
        respond: JoinCallback,
    ) -> None:
        if params.require_known_member_id:
            # KIP-394: hand out the id first, so that a client whose JoinGroup times out
            # rejoins as the same member instead of leaving a stranger behind.
            group.add_pending_member(new_member_id)
            self._rebalancer.add_pending_member_expiration(
                group, new_member_id, params.session_timeout_ms
            )
            respond(JoinGroupResult(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(group, new_member_id, params, respond)

    def _do_current_member_join(
        self, group: GroupMetadata, params: JoinGroupParams, respond: JoinCallback
    ) -> None:
        member_id = params.member_id
        names = frozenset(name for name, _ in params.protocols)
        if group.is_(GroupState.DEAD):
            respond(JoinGroupResult(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(params.protocol_type, names):
            respond(JoinGroupResult(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if group.is_pending_member(member_id):
            if params.group_instance_id is not None:
                raise RuntimeError(
                    f"JoinGroup with group.instance.id {params.group_instance_id} for "
                    f"pending member {member_id}"
                )
            self._add_member_and_rebalance(group, member_id, params, respond)
            return
        try:
            validate_current_member(group, member_id, params.group_instance_id, "join-group")
        except KafkaError as e:
            respond(JoinGroupResult(member_id, e.error_code))
            return
        member = group.get(member_id)
        state = group.state
        unchanged = member.matches(params.protocols)
        if state is GroupState.PREPARING_REBALANCE or (
            state is GroupState.COMPLETING_REBALANCE and not unchanged
        ):
            self._update_member_and_rebalance(group, member, params, respond, "joining")
        elif state is GroupState.COMPLETING_REBALANCE:
            # The same metadata again (it missed its JoinGroup response): answer with the
            # current generation.
            respond(self._current_generation(group, member_id, group.is_leader(member_id)))
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not unchanged:
                # The leader rejoining forces a rebalance: that is how it reacts to changes
                # the member metadata does not show (new partitions of a topic).
                self._update_member_and_rebalance(group, member, params, respond, "rejoining")
            else:
                respond(self._current_generation(group, member_id, False))
        else:
            log_event(
                _log,
                logging.WARNING,
                "rejoin_in_unexpected_state",
                group=group.group_id,
                member=member_id,
                state=state.value,
            )
            respond(JoinGroupResult(member_id, ErrorCode.unknown_member_id))

    @staticmethod
    def _current_generation(
        group: GroupMetadata, member_id: str, with_members: bool
    ) -> JoinGroupResult:
        return JoinGroupResult(
            member_id,
            ErrorCode.none,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members=group.current_member_metadata() if with_members else (),
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, params: JoinGroupParams, respond: JoinCallback
    ) -> None:
        member = MemberMetadata(
            member_id,
            params.group_instance_id,
            params.client_id,
            params.client_host,
            params.rebalance_timeout_ms,
            params.session_timeout_ms,
            params.protocol_type,
            params.protocols,
        )
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        timer = group.pending_member_timers.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        group.add(member, respond)
        # A new member cannot heartbeat until its JoinGroup is answered; it gets a join
        # timeout instead, so that a client gone meanwhile does not stay forever.
        self._rebalancer.complete_and_schedule_next_heartbeat_expiration(
            group, member, NEW_MEMBER_JOIN_TIMEOUT_MS
        )
        self._rebalancer.maybe_prepare_rebalance(
            group,
            f"adding new member {member_id} with group instance id "
            f"{params.group_instance_id}; client reason: {params.reason}",
        )

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        params: JoinGroupParams,
        respond: JoinCallback,
        what: str,
    ) -> None:
        group.update_member(
            member,
            params.protocols,
            params.rebalance_timeout_ms,
            params.session_timeout_ms,
            respond,
        )
        self._rebalancer.maybe_prepare_rebalance(
            group,
            f"member {member.member_id} {what} during {group.state_name}; "
            f"client reason: {params.reason}",
        )

    async def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        instance_id: str,
        old_member_id: str,
        new_member_id: str,
        params: JoinGroupParams,
        respond: JoinCallback,
    ) -> None:
        """A known static member rejoins with a new member id (it restarted)."""
        current_leader = group.leader_id or ""
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = member.supported_protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        group.update_member(
            member,
            params.protocols,
            params.rebalance_timeout_ms,
            params.session_timeout_ms,
            respond,
        )
        reason = (
            f"static member {new_member_id} with instance id {instance_id} rejoined; "
            f"client reason: {params.reason}"
        )
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: start over.
            self._rebalancer.prepare_rebalance(group, reason)
            return
        if not group.is_(GroupState.STABLE):
            return  # PreparingRebalance: it simply takes part
        if group.protocol_name != group.select_protocol():
            self._rebalancer.maybe_prepare_rebalance(group, reason)
            return
        # Stable and nothing the assignment depends on changed: keep the generation and
        # persist the new member id instead of rebalancing.
        assignment = {mid: m.assignment for mid, m in group.members.items()}
        error = await self._manager.store_group(group, assignment)
        if error is not ErrorCode.none:
            group.update_member(
                member, old_protocols, old_rebalance_timeout, old_session_timeout, None
            )
            old_member = group.replace_static_member(instance_id, new_member_id, old_member_id)
            self._rebalancer.complete_and_schedule_next_heartbeat_expiration(group, old_member)
            respond(
                JoinGroupResult(
                    UNKNOWN_MEMBER_ID,
                    error,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    current_leader,
                )
            )
        elif params.support_skipping_assignment:
            # JoinGroup v9+: the leader learns it leads but must not assign again, as the
            # group stays Stable and would ignore a new assignment.
            is_leader = group.is_leader(new_member_id)
            result = self._current_generation(group, new_member_id, is_leader)
            group.maybe_invoke_join_callback(
                member,
                JoinGroupResult(
                    result.member_id,
                    result.error,
                    result.generation_id,
                    result.protocol_type,
                    result.protocol_name,
                    result.leader_id,
                    skip_assignment=is_leader,
                    members=result.members,
                ),
            )
        else:
            # Older clients are told the old leader id, so that a rejoining leader does
            # not believe it leads and assign for nothing.
            group.maybe_invoke_join_callback(
                member,
                JoinGroupResult(
                    new_member_id,
                    ErrorCode.none,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    current_leader,
                ),
            )
