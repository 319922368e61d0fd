"""ConsumerGroupCoordinator: runs the KIP-848 consumer groups of this coordinator.

Every operation on a consumer group — a heartbeat, a leave, a session or rebalance
timeout, a deletion — is computed from the group's state into records
(`HeartbeatPlanner`), written to the group's __consumer_offsets partition in one batch,
and only then applied to the group by replaying those records (`ConsumerGroup.replay`);
the response goes out after that. A failed write changes nothing. Operations on groups
of one partition run one at a time (a lock per partition, as Kafka runs one shard on
one thread), so each starts from the state the previous one left. An operation runs in
a task of its own: a client that disconnects while its heartbeat is being written
cannot leave the log and the memory disagreeing.

Timers: every heartbeat restarts the member's session (``group.consumer.session.timeout.ms``);
a member asked to revoke partitions gets its rebalance timeout to do so. Either expiring
fences the member: its records become tombstones and the group epoch is bumped, so the
others get its partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    ErrorCode,
    GroupIdNotFoundError,
    KafkaError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from tiercel.protocol.record_builder import SimpleRecord
from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    encode_consumer_group_key,
    encode_consumer_group_value,
)
from tiercel.server.coordinator.group.coordinator_records import GroupMetadataKey, encode_key
from tiercel.server.coordinator.group.group_config import GroupCoordinatorConfig
from tiercel.server.coordinator.group.group_metadata import GroupMetadata
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.coordinator.group.modern.assignment import Assignment
from tiercel.server.coordinator.group.modern.assignor import PartitionAssignor
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.modern.heartbeat import GroupChange, HeartbeatPlanner, Record
from tiercel.server.coordinator.group.modern.heartbeat_request import (
    HeartbeatRequest,
    HeartbeatResult,
    validate_request,
)
from tiercel.server.coordinator.group.modern.member import MemberState
from tiercel.server.coordinator.group.modern.range_assignor import (
    RANGE_ASSIGNOR_NAME,
    RangeAssignor,
)
from tiercel.server.coordinator.group.modern.uniform_assignor import (
    UNIFORM_ASSIGNOR_NAME,
    UniformAssignor,
)
from tiercel.storage.scheduler import Scheduler

_log: Final = logging.getLogger("tiercel.group_coordinator")

StatusCheck = Callable[[str], None]

_ASSIGNORS: Final[dict[str, PartitionAssignor]] = {
    UNIFORM_ASSIGNOR_NAME: UniformAssignor(),
    RANGE_ASSIGNOR_NAME: RangeAssignor(),
}
# How Kafka's GroupCoordinatorService reports a failed write of a consumer group.
_WRITE_ERRORS: Final = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    """A ConsumerGroupHeartbeat's answer: an error, or the result. Immutable."""

    error: ErrorCode
    error_message: str | None = None
    result: HeartbeatResult | None = None

    @classmethod
    def failed(cls, error: KafkaError) -> HeartbeatOutcome:
        return cls(error.error_code, error.message)


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    """ConsumerGroupDescribe's view of one group (with ``error``, only the id)."""

    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMember, ...] = ()


def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
    """Kafka's ConsumerGroup.validateOffsetFetch: a fetch naming a member must carry its
    current epoch; one naming nobody (admin clients) is always served."""
    if member_id is None and member_epoch < 0:
        return
    member = group.members.get(member_id or "")
    if member is None:
        raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
    if member_epoch != member.member_epoch:
        raise StaleMemberEpochError(
            f"The received member epoch {member_epoch} does not match the expected member "
            f"epoch {member.member_epoch}."
        )


def _encode(record: Record, now: int) -> SimpleRecord:
    key, value = record
    if isinstance(key, GroupMetadataKey):
        return SimpleRecord(encode_key(key), None, timestamp=now)
    encoded = None if value is None else encode_consumer_group_value(value)
    return SimpleRecord(encode_consumer_group_key(key), encoded, timestamp=now)


class ConsumerGroupCoordinator:
    """Invariants: a group's records are replayed only once written, in the order
    written; the group of a partition is changed by one operation at a time.

    Event-loop only.
    """

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        scheduler: Scheduler,
        validate_group_status: StatusCheck,
        on_classic_replaced: Callable[[GroupMetadata], None],
    ) -> None:
        self._config = config
        self._manager = manager
        self._scheduler = scheduler
        self._validate_group_status = validate_group_status
        self._on_classic_replaced = on_classic_replaced
        self.assignors = {name: _ASSIGNORS[name] for name in config.consumer_group_assignors}
        self._planner = HeartbeatPlanner(
            manager.metadata_cache,
            self.assignors,
            config.consumer_group_heartbeat_interval_ms,
            config.consumer_group_max_size,
        )
        self._locks: dict[int, asyncio.Lock] = {}

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._locks.setdefault(self._manager.partition_for(group_id), asyncio.Lock())

    def _run(self, operation: Coroutine[Any, Any, Any], name: str) -> asyncio.Future[Any]:
        """Run ``operation`` to its end even if the request waiting for it is cancelled."""
        return asyncio.shield(self._scheduler.spawn(operation, name))

    # -- heartbeat ----------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatOutcome:
        try:
            validate_request(request, self.assignors)
            self._validate_group_status(request.group_id)
        except KafkaError as e:
            return HeartbeatOutcome.failed(e)
        outcome: HeartbeatOutcome = await self._run(
            self._heartbeat(request), f"consumer-group-heartbeat {request.group_id}"
        )
        return outcome

    async def _heartbeat(self, request: HeartbeatRequest) -> HeartbeatOutcome:
        async with self._lock(request.group_id):
            try:
                # The partition may have moved while this waited for the lock.
                self._validate_group_status(request.group_id)
                existing = self._manager.groups.get(request.group_id)
                now = self._manager.clock()
                if request.is_leave:
                    change = self._planner.leave(existing, request)
                else:
                    change = self._planner.heartbeat(existing, request, now)
            except KafkaError as e:
                return HeartbeatOutcome.failed(e)
            error = await self._apply(change, now)
        if error is not None:
            return HeartbeatOutcome(error)
        return HeartbeatOutcome(ErrorCode.none, None, change.result)

    async def _apply(self, change: GroupChange, now: int) -> ErrorCode | None:
        """Write the change's records, then replay them and set its timers; the error
        to answer with when the write failed (nothing changed then)."""
        group = change.group
        group_id = group.group_id
        if change.created:
            # Visible at once, so that a classic JoinGroup of the same id meanwhile
            # does not create a second group.
            self._manager.groups[group_id] = group
        if change.records:
            group.pending_writes += 1
            try:
                error = await self._manager.append_group_records(
                    group_id, [_encode(record, now) for record in change.records]
                )
            finally:
                group.pending_writes -= 1
            if error is not None:
                self._undo_create(change)
                log_event(
                    _log,
                    logging.WARNING,
                    "consumer_group_write_failed",
                    group=group_id,
                    error=error.name,
                )
                return _WRITE_ERRORS.get(error, error)
        if group.is_dead or self._manager.groups.get(group_id) is not group:
            return ErrorCode.not_coordinator  # unloaded while the records were written
        if change.replaced_classic is not None:
            self._on_classic_replaced(change.replaced_classic)
        epoch = group.group_epoch
        for key, value in change.records:
            if not isinstance(key, GroupMetadataKey):
                group.replay(key, value)
        self._after_replay(change, epoch)
        return None

    def _undo_create(self, change: GroupChange) -> None:
        group = change.group
        if not change.created or self._manager.groups.get(group.group_id) is not group:
            return
        if change.replaced_classic is not None:
            self._manager.groups[group.group_id] = change.replaced_classic
        else:
            del self._manager.groups[group.group_id]

    def _after_replay(self, change: GroupChange, previous_epoch: int) -> None:
        group = change.group
        if group.is_dead:
            if self._manager.groups.get(group.group_id) is group:
                del self._manager.groups[group.group_id]
            return
        for member_id in change.stopped:
            self._cancel_timers(group, member_id)
        member = change.member
        if member is not None:
            self._schedule_session(group, member.member_id)
            key = ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id)
            if any(k == key for k, _ in change.records):
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(
                        group, member.member_id, member.member_epoch, member.rebalance_timeout_ms
                    )
                else:
                    _cancel(group.rebalance_timers, member.member_id)
        if group.group_epoch != previous_epoch:
            log_event(
                _log,
                logging.INFO,
                "consumer_group_epoch_bumped",
                group=group.group_id,
                epoch=group.group_epoch,
                members=len(group.members),
                state=group.state_name,
            )

    # -- timers -------------------------------------------------------------------------

    def _schedule(
        self,
        timers: dict[str, asyncio.TimerHandle],
        member_id: str,
        delay_ms: int,
        expire: Callable[[asyncio.TimerHandle], Coroutine[Any, Any, None]],
        name: str,
    ) -> None:
        _cancel(timers, member_id)

        def fire() -> None:
            if timers.get(member_id) is handle:
                self._scheduler.spawn(expire(handle), name)

        handle = self._scheduler.call_later(max(delay_ms, 0) / 1000, fire)
        timers[member_id] = handle

    def _schedule_session(self, group: ConsumerGroup, member_id: str) -> None:
        timers = group.session_timers

        async def expire(handle: asyncio.TimerHandle) -> None:
            await self._fence_on_timeout(group, member_id, timers, handle, None, "session_expired")

        self._schedule(
            timers,
            member_id,
            self._config.consumer_group_session_timeout_ms,
            expire,
            f"consumer-group-session {group.group_id}",
        )

    def _schedule_rebalance_timeout(
        self, group: ConsumerGroup, member_id: str, epoch: int, timeout_ms: int
    ) -> None:
        timers = group.rebalance_timers

        async def expire(handle: asyncio.TimerHandle) -> None:
            await self._fence_on_timeout(
                group, member_id, timers, handle, epoch, "revocation_timed_out"
            )

        self._schedule(
            timers, member_id, timeout_ms, expire, f"consumer-group-rebalance {group.group_id}"
        )

    @staticmethod
    def _cancel_timers(group: ConsumerGroup, member_id: str) -> None:
        _cancel(group.session_timers, member_id)
        _cancel(group.rebalance_timers, member_id)

    async def _fence_on_timeout(
        self,
        group: ConsumerGroup,
        member_id: str,
        timers: dict[str, asyncio.TimerHandle],
        handle: asyncio.TimerHandle,
        epoch: int | None,
        reason: str,
    ) -> None:
        """Fence a member whose timer expired, unless a heartbeat restarted the timer
        (or the member moved on from ``epoch``) while this waited for the lock."""
        async with self._lock(group.group_id):
            if timers.get(member_id) is not handle:
                return
            del timers[member_id]
            if group.is_dead or self._manager.groups.get(group.group_id) is not group:
                return
            member = group.members.get(member_id)
            if member is None or (epoch is not None and member.member_epoch != epoch):
                return
            log_event(
                _log,
                logging.INFO,
                "consumer_group_member_fenced",
                group=group.group_id,
                member=member_id,
                epoch=member.member_epoch,
                reason=reason,
            )
            change = GroupChange(group, self._planner.fence(group, member), stopped=[member_id])
            await self._apply(change, self._manager.clock())

    # -- loading, administration ---------------------------------------------------------

    def on_group_loaded(self, group: ConsumerGroup) -> None:
        """Loaded members have their session (and pending revocation) timers again."""
        for member in group.members.values():
            self._schedule_session(group, member.member_id)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(
                    group, member.member_id, member.member_epoch, member.rebalance_timeout_ms
                )

    @staticmethod
    def on_group_unloaded(group: ConsumerGroup) -> None:
        group.kill()

    async def delete_empty_group(self, group: ConsumerGroup) -> ErrorCode | None:
        """Delete an Empty consumer group (its offsets stay) so that a classic group can
        take its id; NON_EMPTY_GROUP when a member joined meanwhile."""

        async def delete() -> ErrorCode | None:
            async with self._lock(group.group_id):
                if self._manager.groups.get(group.group_id) is not group or group.is_dead:
                    return None
                if not group.is_empty or group.pending_writes:
                    return ErrorCode.non_empty_group
                records: list[Record] = [(key, None) for key in group.tombstone_keys()]
                return await self._apply(GroupChange(group, records), self._manager.clock())

        error: ErrorCode | None = await self._run(
            delete(), f"consumer-group-delete {group.group_id}"
        )
        return error

    def describe(self, group_ids: Sequence[str]) -> list[DescribedConsumerGroup]:
        return [self._describe(group_id) for group_id in group_ids]

    def _describe(self, group_id: str) -> DescribedConsumerGroup:
        try:
            self._validate_group_status(group_id)
            group = self._manager.groups.get(group_id)
            if group is None or (isinstance(group, ConsumerGroup) and group.is_dead):
                raise GroupIdNotFoundError(f"Group {group_id} not found.")
            if not isinstance(group, ConsumerGroup):
                raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
        except KafkaError as e:
            return DescribedConsumerGroup(group_id, e.error_code, e.message)
        members = tuple(
            DescribedMember(
                member.member_id,
                member.instance_id,
                member.rack_id,
                member.member_epoch,
                member.client_id,
                member.client_host,
                tuple(sorted(member.subscribed_topic_names)),
                member.subscribed_topic_regex,
                member.assigned_partitions,
                group.target_assignment_for(member.member_id, None),
            )
            for member in group.members.values()
        )
        return DescribedConsumerGroup(
            group_id,
            state=group.state_name,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_server_assignor() or next(iter(self.assignors)),
            members=members,
        )


def _cancel(timers: dict[str, asyncio.TimerHandle], member_id: str) -> None:
    handle = timers.pop(member_id, None)
    if handle is not None:
        handle.cancel()
