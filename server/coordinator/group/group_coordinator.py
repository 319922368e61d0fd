"""GroupCoordinator: the group coordinator, the one object handlers call.

It checks that a request reached the right coordinator (the leader of the group's
__consumer_offsets partition, loaded), then hands classic membership requests to
`GroupJoin` and `GroupMembership`, KIP-848 consumer group requests
(ConsumerGroupHeartbeat, ConsumerGroupDescribe) to `ConsumerGroupCoordinator`, and
serves offsets and the admin APIs (ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete) of both group types itself. A group id names one group of one type at a
time: a consumer-group member may take over an Empty classic group (its offsets stay),
a classic member an Empty consumer group; a non-empty group of the other type is
GROUP_ID_NOT_FOUND to ConsumerGroupHeartbeat and INCONSISTENT_GROUP_PROTOCOL to
JoinGroup (Kafka 4 would also let classic members join a consumer group; Tiercel does
not mix them). It follows the leadership of __consumer_offsets
through ReplicaManager's leadership listeners, loading a partition's groups when this
broker becomes its leader and dropping them when it stops, and expires the offsets of
groups past ``offsets.retention.minutes`` every ``offsets.retention.check.interval.ms``.
The classic protocol's coordinator never assigns partitions: group leaders do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    IllegalGenerationError,
    InvalidGroupIdError,
    KafkaError,
    NotCoordinatorError,
)
from tiercel.server.coordinator.group.group_config import (
    GROUP_METADATA_TOPIC_NAME,
    GroupCoordinatorConfig,
)
from tiercel.server.coordinator.group.group_join import GroupJoin, JoinGroupParams
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.group_metadata_manager import (
    Group,
    GroupMetadataManager,
    is_dead,
)
from tiercel.server.coordinator.group.group_results import (
    DEAD_GROUP_SUMMARY,
    EMPTY_GROUP_SUMMARY,
    GroupOverview,
    GroupSummary,
    JoinGroupResult,
    LeaveMemberResult,
    SyncGroupResult,
)
from tiercel.server.coordinator.group.membership import (
    GroupMembership,
    LeavingMember,
    ParkedRequests,
)
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.modern.consumer_group_coordinator import (
    ConsumerGroupCoordinator,
    DescribedConsumerGroup,
    HeartbeatOutcome,
    validate_offset_fetch,
)
from tiercel.server.coordinator.group.modern.heartbeat_request import HeartbeatRequest
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.server.coordinator.group.offset_commit_validation import (
    validate_classic_commit,
    validate_consumer_group_commit,
    validate_transactional_consumer_group_commit,
)
from tiercel.server.coordinator.group.rebalance import Rebalancer
from tiercel.server.coordinator.group.txn_offsets import (
    append_txn_offsets,
    groups_of,
    offsets_partition,
)
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.group_coordinator")
# OffsetCommit from this version on answers GROUP_ID_NOT_FOUND for an unknown group
# with a generation, where older versions get ILLEGAL_GENERATION (Kafka 4).
_GROUP_ID_NOT_FOUND_COMMIT_VERSION: Final = 9


class GroupCoordinator:
    """Invariants: requests are served only while active (between `startup` and
    `shutdown`) and only for groups whose partition the manager owns and has loaded.

    Event-loop only.
    """

    def __init__(
        self, config: GroupCoordinatorConfig, manager: GroupMetadataManager, scheduler: Scheduler
    ) -> None:
        self.config = config
        self.manager = manager
        self._scheduler = scheduler
        self.rebalancer = Rebalancer(config, manager, scheduler.spawn)
        self._parked = ParkedRequests()
        self._join = GroupJoin(
            config, manager, self.rebalancer, self.validate_group_status, self._parked
        )
        self._membership = GroupMembership(
            manager, self.rebalancer, self.validate_group_status, self._parked
        )
        self.consumer = ConsumerGroupCoordinator(
            config,
            manager,
            scheduler,
            self.validate_group_status,
            self.rebalancer.on_group_unloaded,
        )
        self._active = False
        self._expiration: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------

    def startup(self) -> None:
        self._active = True
        self._expiration = self._scheduler.spawn(
            self._expire_offsets_periodically(), "delete-expired-group-metadata"
        )

    async def shutdown(self) -> None:
        """Stop serving: everything parked is answered (NOT_COORDINATOR) so that the
        broker's connections can drain."""
        self._active = False
        if self._expiration is not None:
            self._expiration.cancel()
            await asyncio.gather(self._expiration, return_exceptions=True)
        self.manager.shutdown(self._on_group_unloaded)
        self._parked.release_all()

    async def _expire_offsets_periodically(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.manager.cleanup_expired_offsets()
            except Exception as e:
                log_event(_log, logging.ERROR, "offset_expiration_failed", reason=repr(e))

    def on_leadership_change(self, tp: TopicPartition, leader_epoch: int | None) -> None:
        """ReplicaManager's listener: load the groups of a __consumer_offsets partition
        this broker now leads, drop those of one it no longer leads."""
        if tp.topic != GROUP_METADATA_TOPIC_NAME:
            return
        if leader_epoch is None:
            self.manager.remove_groups_for_partition(tp.partition, None, self._on_group_unloaded)
        else:
            self.manager.schedule_load(tp.partition, leader_epoch, self._on_group_loaded)

    def _on_group_loaded(self, group: Group) -> None:
        if isinstance(group, ConsumerGroup):
            self.consumer.on_group_loaded(group)
        else:
            self.rebalancer.on_group_loaded(group)

    def _on_group_unloaded(self, group: Group) -> None:
        self.manager.txn_offsets.remove_group(group.group_id)
        if isinstance(group, ConsumerGroup):
            self.consumer.on_group_unloaded(group)
        else:
            self.rebalancer.on_group_unloaded(group)

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    def validate_group_status(self, group_id: str, allow_empty_group_id: bool = False) -> None:
        """The group id is valid, this broker coordinates it and has loaded it. Offset
        commits and fetches, DescribeGroups and DeleteGroups accept the empty id, for
        compatibility; group management needs a real one."""
        if not group_id and not allow_empty_group_id:
            raise InvalidGroupIdError(f"invalid group id {group_id!r}")
        if not self._active:
            raise CoordinatorNotAvailableError("the group coordinator is not active")
        if self.manager.is_group_loading(group_id):
            raise CoordinatorLoadInProgressError(f"group {group_id} is being loaded")
        if not self.manager.is_group_local(group_id):
            raise NotCoordinatorError(f"this broker is not the coordinator of {group_id}")

    # -- membership -------------------------------------------------------------------

    async def join_group(self, params: JoinGroupParams) -> JoinGroupResult:
        existing = self.manager.groups.get(params.group_id)
        if isinstance(existing, ConsumerGroup) and not existing.is_dead:
            # Kafka 4 converts an Empty consumer group to a classic one when a classic
            # member joins; members of a live consumer group keep it.
            if not existing.is_empty or existing.pending_writes:
                return JoinGroupResult(params.member_id, ErrorCode.inconsistent_group_protocol)
            error = await self.consumer.delete_empty_group(existing)
            if error is not None:
                return JoinGroupResult(params.member_id, error)
        return await self._join.join_group(params)

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
        return await self._membership.sync_group(
            group_id,
            generation_id,
            member_id,
            protocol_type,
            protocol_name,
            group_instance_id,
            assignments,
        )

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        return self._membership.heartbeat(group_id, member_id, group_instance_id, generation_id)

    def leave_group(
        self, group_id: str, members: Sequence[LeavingMember]
    ) -> tuple[ErrorCode, list[LeaveMemberResult]]:
        return self._membership.leave_group(group_id, members)

    # -- consumer groups (KIP-848) -----------------------------------------------------

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatOutcome:
        return await self.consumer.heartbeat(request)

    def consumer_group_describe(self, group_ids: Sequence[str]) -> list[DescribedConsumerGroup]:
        return self.consumer.describe(group_ids)

    # -- offsets ----------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        api_version: int,
    ) -> dict[TopicPartition, ErrorCode]:
        try:
            self.validate_group_status(group_id, allow_empty_group_id=True)
            existing = self.manager.groups.get(group_id)
            if isinstance(existing, ConsumerGroup):
                # A consumer group's members commit with their member epoch.
                validate_consumer_group_commit(
                    existing, member_id, group_instance_id, generation_id, False, api_version
                )
                return await self.manager.store_offsets(group_id, offsets)
            group = existing
            if group is None:
                if generation_id >= 0:
                    # A group member from a generation this coordinator never saw.
                    if api_version >= _GROUP_ID_NOT_FOUND_COMMIT_VERSION:
                        return dict.fromkeys(offsets, ErrorCode.group_id_not_found)
                    raise IllegalGenerationError(f"group {group_id} has no generation")
                group = self._create_simple_group(group_id)
            validate_classic_commit(group, member_id, group_instance_id, generation_id, False)
        except KafkaError as e:
            return dict.fromkeys(offsets, e.error_code)
        if not group.is_(GroupState.EMPTY):
            # A commit proves the member alive, even while the group prepares a
            # rebalance (the heartbeat response tells it to rejoin).
            self.rebalancer.complete_and_schedule_next_heartbeat_expiration(
                group, group.get(member_id)
            )
        return await self.manager.store_offsets(group_id, offsets)

    async def commit_transactional_offsets(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: write the commits as the producer's transactional records;
        they become the group's offsets when its transaction commits (`txn_offsets`),
        after the transaction coordinator confirmed the offsets partition is in the
        transaction (KIP-890 part 1). A group member (KIP-447: v3+ carry the member)
        must be current, as Kafka 4's
        OffsetMetadataManager.validateTransactionalOffsetCommit checks: in a classic
        group its generation, in a KIP-848 consumer group its member epoch (a stale one
        is ILLEGAL_GENERATION). Unlike OffsetCommit, the group id must not be empty
        (Kafka's GroupCoordinatorService answers INVALID_GROUP_ID)."""
        try:
            self.validate_group_status(group_id)
            existing = self.manager.groups.get(group_id)
            if isinstance(existing, ConsumerGroup):
                validate_transactional_consumer_group_commit(
                    existing, member_id, group_instance_id, generation_id
                )
            elif existing is not None:
                validate_classic_commit(existing, member_id, group_instance_id, generation_id, True)
            elif generation_id >= 0:
                # A member of a generation this coordinator never saw; every
                # TxnOffsetCommit version gets ILLEGAL_GENERATION for it in Kafka 4.
                raise IllegalGenerationError(f"group {group_id} has no generation")
            else:
                self._create_simple_group(group_id)
        except KafkaError as e:
            return dict.fromkeys(offsets, e.error_code)
        max_metadata = self.config.offset_metadata_max_bytes
        results = {
            tp: ErrorCode.offset_metadata_too_large
            for tp, offset in offsets.items()
            if len(offset.metadata) > max_metadata
        }
        valid = {tp: offset for tp, offset in offsets.items() if tp not in results}
        if valid:
            error = await append_txn_offsets(
                self.manager.replica_manager,
                self.manager.txn_offsets,
                self.config.offsets_commit_timeout_ms,
                offsets_partition(self.partition_for, group_id),
                transactional_id,
                group_id,
                producer_id,
                producer_epoch,
                valid,
            )
            results.update(dict.fromkeys(valid, error))
        return results

    def can_complete_transaction(self, offsets_partition: int) -> bool:
        """Whether a COMMIT/ABORT marker may be written to this __consumer_offsets
        partition now: only once its groups are loaded here. A marker written while the
        partition loads may land after the load's last read, so the load would install
        the producer's offsets as pending while `on_transaction_completed` found nothing
        to complete yet: committed offsets stuck pending (OffsetFetch require_stable
        answering UNSTABLE_OFFSET_COMMIT) until that producer's next marker. Kafka 4's
        KafkaApis.handleWriteTxnMarkersRequest hands these markers to the group
        coordinator (completeTransaction), which refuses them until loaded; the refusal
        goes back as NOT_LEADER_OR_FOLLOWER, which the transaction coordinator retries."""
        return self._active and self.manager.owns_partition(offsets_partition)

    def on_transaction_completed(
        self, producer_id: int, offsets_partitions: Iterable[int], committed: bool
    ) -> None:
        """A COMMIT/ABORT marker of the producer is written to these __consumer_offsets
        partitions (Kafka's onTransactionCompleted, called by WriteTxnMarkers)."""
        moved = self.manager.txn_offsets.complete(
            producer_id,
            committed,
            groups_of(offsets_partitions, self.partition_for),
            self.manager.offsets,
        )
        if moved:
            log_event(
                _log, logging.DEBUG, "txn_offsets_committed", producer_id=producer_id, offsets=moved
            )

    def _create_simple_group(self, group_id: str) -> GroupMetadata:
        """Offsets without group management: a "simple" group, Empty forever (Kafka's
        getOrMaybeCreateClassicGroup for a commit without a generation)."""
        log_event(_log, logging.INFO, "simple_group_created", group=group_id)
        group = GroupMetadata(group_id, GroupState.EMPTY, self.manager.clock)
        self.manager.add_group(group)
        return group

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """The committed offsets of ``partitions`` (None: every partition with one),
        whatever the group's state: groups may use Kafka only to store offsets. With no
        transactional commits, no offset is ever unstable (require_stable). A member of
        a consumer group (OffsetFetch v9+) must give its current member epoch."""
        try:
            self.validate_group_status(group_id, allow_empty_group_id=True)
            group = self.manager.groups.get(group_id)
            if isinstance(group, ConsumerGroup) and not group.is_dead:
                validate_offset_fetch(group, member_id, member_epoch)
        except KafkaError as e:
            return e.error_code, {}
        if group is None or is_dead(group):
            return ErrorCode.none, dict.fromkeys(partitions or ())
        offsets = self.manager.offsets.all(group_id)
        wanted = list(offsets) if partitions is None else partitions
        return ErrorCode.none, {tp: offsets.get(tp) for tp in wanted}

    # -- administration ---------------------------------------------------------------

    def list_groups(
        self, states: Collection[str], types: Collection[str]
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        """States and types compare case-insensitively; an empty filter lets all pass."""
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        error = (
            ErrorCode.coordinator_load_in_progress if self.manager.is_loading else ErrorCode.none
        )
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        groups = [
            group.overview()
            for group in self.manager.groups.values()
            if (not wanted_states or group.is_in_states(wanted_states))
            and (not wanted_types or group.group_type.value in wanted_types)
        ]
        return error, groups

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        try:
            self.validate_group_status(group_id, allow_empty_group_id=True)
        except KafkaError as e:
            return e.error_code, EMPTY_GROUP_SUMMARY
        # DescribeGroups describes classic groups: a consumer group is Dead to it, as
        # in Kafka 4 (ConsumerGroupDescribe describes those).
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.none, DEAD_GROUP_SUMMARY
        return ErrorCode.none, group.summary()

    def _missing_group_error(self, group_id: str) -> ErrorCode:
        if self.manager.group_not_exists(group_id):
            return ErrorCode.group_id_not_found
        return ErrorCode.not_coordinator

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Only Empty groups can be deleted; their offsets become tombstones."""
        errors: dict[str, ErrorCode] = {}
        eligible: list[Group] = []
        for group_id in dict.fromkeys(group_ids):
            try:
                self.validate_group_status(group_id, allow_empty_group_id=True)
            except KafkaError as e:
                errors[group_id] = e.error_code
                continue
            group = self.manager.groups.get(group_id)
            if group is None or is_dead(group):
                errors[group_id] = self._missing_group_error(group_id)
            elif isinstance(group, ConsumerGroup):
                # A member joining right now (its records being written) makes it live.
                if group.is_empty and not group.pending_writes:
                    group.kill()
                    eligible.append(group)
                else:
                    errors[group_id] = ErrorCode.non_empty_group
            elif group.is_(GroupState.EMPTY):
                group.transition_to(GroupState.DEAD)
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.non_empty_group
        if eligible:
            removed = await self.manager.cleanup_group_metadata(
                eligible, lambda g: self.manager.offsets.remove_group(g.group_id)
            )
            errors.update(dict.fromkeys((g.group_id for g in eligible), ErrorCode.none))
            log_event(
                _log,
                logging.INFO,
                "groups_deleted",
                groups=[g.group_id for g in eligible],
                offsets=removed,
            )
        return errors

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: any offset of an Empty classic group; of a consumer group (KIP-848,
        or classic with the consumer protocol) only those of topics no member
        subscribes to."""
        try:
            self.validate_group_status(group_id)
        except KafkaError as e:
            return e.error_code, {}
        group = self.manager.groups.get(group_id)
        if group is None or is_dead(group):
            return self._missing_group_error(group_id), {}
        errors: dict[TopicPartition, ErrorCode] = {}
        if isinstance(group, GroupMetadata) and group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif isinstance(group, ConsumerGroup) or group.is_consumer_group:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp.topic)]
            errors = {
                tp: ErrorCode.group_subscribed_to_topic
                for tp in partitions
                if group.is_subscribed_to_topic(tp.topic)
            }
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            removed = await self.manager.cleanup_group_metadata(
                [group], lambda g: self.manager.offsets.remove(g.group_id, eligible)
            )
            errors.update(dict.fromkeys(eligible, ErrorCode.none))
            log_event(_log, logging.INFO, "offsets_deleted", group=group_id, offsets=removed)
        return ErrorCode.none, errors
