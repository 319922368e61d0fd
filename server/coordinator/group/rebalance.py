"""The timed side of classic rebalancing: delayed join, delayed sync, session expiry.

Kafka keeps these as DelayedJoin / InitialDelayedJoin / DelayedSync / DelayedHeartbeat
operations in purgatories; here each is one asyncio timer held by its group or member,
and "try to complete" is a check made right after every event that could complete it.

- A rebalance (PreparingRebalance) ends when every known member has rejoined or the
  rebalance timeout (the largest of the members') passes; members that did not rejoin
  are dropped (static ones are kept, KIP-345). A group coming out of Empty first waits
  ``group.initial.rebalance.delay.ms``, again as long as new members keep arriving,
  within the rebalance timeout.
- Then every member has the rebalance timeout to send its SyncGroup, or is dropped and
  the group rebalances again.
- A member is dropped when no heartbeat (or commit, or join) arrives within its session
  timeout; members parked in a JoinGroup or SyncGroup count as alive, except new ones,
  which have five minutes to get their first JoinGroup answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode
from tiercel.server.coordinator.group.group_config import GroupCoordinatorConfig
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.coordinator.group.group_results import (
    UNKNOWN_MEMBER_ID,
    JoinGroupResult,
    SyncGroupResult,
)
from tiercel.server.coordinator.group.member_metadata import MemberMetadata

_log: Final = logging.getLogger("tiercel.group_coordinator")

# How long a new member's first JoinGroup may stay parked (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000

Spawn = Callable[[Coroutine[Any, Any, Any], str], object]


class Rebalancer:
    """Drives group state through rebalances with timers.

    Invariants: a group has a ``delayed_join`` timer exactly while it is
    PreparingRebalance (``delayed_join_initial`` tells an initial delay from a rebalance
    timeout), and a ``delayed_sync`` timer only while CompletingRebalance or Stable with
    members still owing a SyncGroup; every timer of a Dead group is cancelled.

    Event-loop only.
    """

    def __init__(
        self, config: GroupCoordinatorConfig, manager: GroupMetadataManager, spawn: Spawn
    ) -> None:
        self._config = config
        self._manager = manager
        self._spawn = spawn

    @staticmethod
    def _later(delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback)

    def _info(self, event: str, group: GroupMetadata, **fields: object) -> None:
        log_event(
            _log,
            logging.INFO,
            event,
            group=group.group_id,
            generation=group.generation_id,
            partition=self._manager.partition_for(group.group_id),
            **fields,
        )

    # -- rebalance ----------------------------------------------------------------------

    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting for an assignment must rejoin instead.
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self.remove_sync_expiration(group)
        initial = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        self._info("preparing_rebalance", group, reason=reason)
        if initial:
            delay = self._config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self._schedule_initial_join(group, delay, remaining)
        else:
            self._schedule_join(group)
            self.try_complete_join(group)

    def _schedule_join(self, group: GroupMetadata) -> None:
        self._cancel_join(group)
        group.delayed_join_initial = False
        group.delayed_join = self._later(
            group.rebalance_timeout_ms, lambda: self._on_join_timeout(group)
        )

    def _schedule_initial_join(
        self, group: GroupMetadata, delay_ms: int, remaining_ms: int
    ) -> None:
        self._cancel_join(group)
        group.delayed_join_initial = True
        group.delayed_join = self._later(
            delay_ms, lambda: self._on_initial_join_delay(group, delay_ms, remaining_ms)
        )

    @staticmethod
    def _cancel_join(group: GroupMetadata) -> None:
        if group.delayed_join is not None:
            group.delayed_join.cancel()
            group.delayed_join = None

    def _on_join_timeout(self, group: GroupMetadata) -> None:
        group.delayed_join = None
        self.on_complete_join(group)

    def _on_initial_join_delay(
        self, group: GroupMetadata, delay_ms: int, remaining_ms: int
    ) -> None:
        group.delayed_join = None
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            configured = self._config.group_initial_rebalance_delay_ms
            self._schedule_initial_join(
                group, min(configured, remaining_ms), max(remaining_ms - delay_ms, 0)
            )
        else:
            self.on_complete_join(group)

    def try_complete_join(self, group: GroupMetadata) -> None:
        """Complete the rebalance now if everyone has rejoined (never during the
        initial delay, which only its timer ends)."""
        if (
            group.delayed_join is not None
            and not group.delayed_join_initial
            and group.has_all_members_joined
        ):
            self._cancel_join(group)
            self.on_complete_join(group)

    def on_complete_join(self, group: GroupMetadata) -> None:
        dropped = [m for m in group.not_yet_rejoined_members() if not m.is_static_member]
        for member in dropped:
            group.remove(member.member_id)
        if dropped:
            self._info(
                "members_not_rejoined_removed", group, members=[m.member_id for m in dropped]
            )
        if group.is_(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout, by when sessions expire.
            log_event(_log, logging.ERROR, "rebalance_without_members", group=group.group_id)
            self._schedule_join(group)
            self.try_complete_join(group)
            return
        group.init_next_generation()
        if group.is_(GroupState.EMPTY):
            self._info("group_empty", group)
            self._spawn(
                self._store_empty_group(group, group.generation_id),
                f"store empty group {group.group_id}",
            )
            return
        self._info("group_stabilized", group, members=group.size, protocol=group.protocol_name)
        for member in list(group.members.values()):
            is_leader = group.is_leader(member.member_id)
            result = JoinGroupResult(
                member.member_id,
                ErrorCode.none,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                group.leader_id or "",
                members=group.current_member_metadata() if is_leader else (),
            )
            group.maybe_invoke_join_callback(member, result)
            self.complete_and_schedule_next_heartbeat_expiration(group, member)
            member.is_new = False
            group.add_pending_sync_member(member.member_id)
        self._schedule_pending_sync(group)

    async def _store_empty_group(self, group: GroupMetadata, generation: int) -> None:
        # The task starts a moment later: if the group moved on meanwhile (deleted, or a
        # new generation), this record would be stale and must not follow the newer one.
        if not group.is_(GroupState.EMPTY) or group.generation_id != generation:
            return
        error = await self._manager.store_group(group, {})
        if error is not ErrorCode.none:
            # Safe to ignore: if the broker restarts first, the previous generation comes
            # back, and its members expire.
            log_event(
                _log,
                logging.WARNING,
                "empty_group_write_failed",
                group=group.group_id,
                error=error.name,
            )

    # -- sync ---------------------------------------------------------------------------

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        generation = group.generation_id
        group.delayed_sync = self._later(
            group.rebalance_timeout_ms, lambda: self._on_expire_pending_sync(group, generation)
        )

    def remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self._maybe_complete_sync_expiration(group)

    def remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self._maybe_complete_sync_expiration(group)

    @staticmethod
    def _maybe_complete_sync_expiration(group: GroupMetadata) -> None:
        if group.delayed_sync is not None and group.has_received_sync_from_all_members:
            group.delayed_sync.cancel()
            group.delayed_sync = None

    def _on_expire_pending_sync(self, group: GroupMetadata, generation: int) -> None:
        group.delayed_sync = None
        if generation != group.generation_id or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        pending = sorted(group.pending_sync_members)
        if not pending:
            return
        for member_id in pending:
            group.remove(member_id)
        self._info("members_not_synced_removed", group, members=pending)
        self.prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: Mapping[str, bytes]
    ) -> None:
        for member_id, member in group.members.items():
            member.assignment = assignment[member_id]
        self._propagate_assignment(group, ErrorCode.none)

    def reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        protocol_type = group.protocol_type if ok else None
        protocol_name = group.protocol_name if ok else None
        for member in list(group.members.values()):
            result = SyncGroupResult(error, protocol_type, protocol_name, member.assignment)
            if group.maybe_invoke_sync_callback(member, result):
                # Its session restarts now: an expiration while it waited was ignored.
                self.complete_and_schedule_next_heartbeat_expiration(group, member)

    # -- sessions -----------------------------------------------------------------------

    def complete_and_schedule_next_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        member.cancel_heartbeat()
        member.heartbeat_satisfied = False
        if group.is_(GroupState.DEAD) or member.has_satisfied_heartbeat:
            return  # parked in a rebalance: alive until it is answered
        member_id = member.member_id
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self._later(
            timeout, lambda: self._on_expire_heartbeat(group, member_id)
        )

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.DEAD):
            return
        member.heartbeat_timer = None
        if not member.has_satisfied_heartbeat:
            self._info("member_session_expired", group, member=member_id)
            self.remove_member_and_update_group(
                group, member, f"removing member {member_id} on heartbeat expiration"
            )

    def add_pending_member_expiration(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        group.pending_member_timers[member_id] = self._later(
            timeout_ms, lambda: self._on_expire_pending_member(group, member_id)
        )

    def _on_expire_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_member_timers.pop(member_id, None)
        if group.is_pending_member(member_id) and not group.is_(GroupState.DEAD):
            self._info("pending_member_expired", group, member=member_id)
            self.remove_pending_member_and_update_group(group, member_id)

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        # A new member may time out with its JoinGroup parked: answer it so that the
        # client, if still alive, joins again.
        group.maybe_invoke_join_callback(
            member, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id)
        )
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.try_complete_join(group)

    def remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        timer = group.pending_member_timers.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.try_complete_join(group)

    # -- loading ------------------------------------------------------------------------

    def on_group_loaded(self, group: GroupMetadata) -> None:
        if group.size > self._config.group_max_size:
            self.prepare_rebalance(
                group,
                f"freshly-loaded group is over capacity ({self._config.group_max_size}); "
                "rebalancing so that consumers can commit offsets",
            )
        for member in group.members.values():
            self.complete_and_schedule_next_heartbeat_expiration(group, member)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        """The partition moved away or the broker stops: answer everything parked with
        NOT_COORDINATOR, so clients find the new coordinator."""
        previous = group.state
        group.transition_to(GroupState.DEAD)
        for member in list(group.members.values()):
            if previous is GroupState.PREPARING_REBALANCE:
                group.maybe_invoke_join_callback(
                    member, JoinGroupResult(member.member_id, ErrorCode.not_coordinator)
                )
            elif previous in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.not_coordinator))
        group.pending_sync_members.clear()
        group.cancel_timers()
