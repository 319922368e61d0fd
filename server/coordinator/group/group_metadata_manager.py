"""GroupMetadataManager: the groups and offsets of the __consumer_offsets partitions this
broker leads, and their persistence (Kafka's classic GroupMetadataManager).

Every change a client must be able to rely on is a record in __consumer_offsets, written
through ReplicaManager with acks=-1 like any produce: an offset commit is answered, and
cached, only once its record is written; a group's generation and assignment likewise.
Deleted and expired offsets and groups become tombstones. When this broker becomes
leader of a partition it reads the partition back (groups of that partition answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile); when it stops leading, the partition's groups
are dropped from memory (their requests get NOT_COORDINATOR).

The partition of a group is ``Utils.abs(groupId.hashCode) % partitions`` exactly as Kafka
computes it (`coordinator_partition`), so clients, tools and Kafka itself agree on where
each group lives.

A group id names one group at a time, of one of two types: a classic group
(`GroupMetadata`) or a KIP-848 consumer group (`ConsumerGroup`, whose own records the
consumer group coordinator writes through `append_group_records`). Both share the
offsets, expiration, deletion and loading done here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.coordinator.coordinator_epochs import CoordinatorEpochs
from tiercel.server.coordinator.coordinator_partition import partition_for
from tiercel.server.coordinator.group.consumer_group_records import encode_consumer_group_key
from tiercel.server.coordinator.group.coordinator_loader import LoadedPartition, load_partition
from tiercel.server.coordinator.group.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from tiercel.server.coordinator.group.group_config import (
    GROUP_METADATA_TOPIC_NAME,
    GroupCoordinatorConfig,
)
from tiercel.server.coordinator.group.group_metadata import (
    Clock,
    GroupMetadata,
    GroupState,
    load_group,
)
from tiercel.server.coordinator.group.member_metadata import MemberMetadata
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.server.coordinator.group.offset_store import OffsetStore
from tiercel.server.coordinator.group.txn_offsets import PendingTxnOffsets
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.replica_manager import ProduceResult, ReplicaManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.group_coordinator")
# How long a failed load of a __consumer_offsets partition waits before it is retried.
LOAD_RETRY_MS: Final = 5000

Group = GroupMetadata | ConsumerGroup
GroupCallback = Callable[[Group], None]
OffsetSelector = Callable[[Group], list[TopicPartition]]

# Kafka's translation of append errors for OffsetCommit (maybeConvertOffsetCommitError)
# and for the group metadata written by SyncGroup (storeGroup's callback).
_COMMIT_ERRORS: Final = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}
_GROUP_ERRORS: Final = {
    **_COMMIT_ERRORS,
    ErrorCode.request_timed_out: ErrorCode.rebalance_in_progress,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


def is_dead(group: Group) -> bool:
    if isinstance(group, ConsumerGroup):
        return group.is_dead
    return group.is_(GroupState.DEAD)


def _kill_if_unused(group: Group) -> None:
    """An Empty group (a consumer group with no write in flight) dies."""
    if isinstance(group, ConsumerGroup):
        if group.is_empty and not group.pending_writes:
            group.kill()
    elif group.is_(GroupState.EMPTY):
        group.transition_to(GroupState.DEAD)


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupMetadataManager:
    """Invariants: ``groups`` holds only groups of owned partitions; a partition is in
    at most one of ``_owned`` and ``_loading``; ``_epochs`` never decreases per
    partition; every group in ``offsets`` is in ``groups``.

    Event-loop only; partition reads are decoded in the executor.
    """

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        scheduler: Scheduler,
        clock: Clock = now_ms,
    ) -> None:
        self.config = config
        self._replica_manager = replica_manager
        self._cache = metadata_cache
        self._scheduler = scheduler
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.txn_offsets = PendingTxnOffsets()
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._epochs = CoordinatorEpochs()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        # Tombstone writes in flight per partition, and a signal when one ends.
        self._tombstones_pending: Counter[int] = Counter()
        self._tombstones_written = asyncio.Event()

    @property
    def metadata_cache(self) -> MetadataCache:
        return self._cache

    @property
    def replica_manager(self) -> ReplicaManager:
        return self._replica_manager

    # -- partitions -------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        """The topic's partition count once it exists (fixed from then on), else the
        configured count it will be created with."""
        topic = self._cache.topic(GROUP_METADATA_TOPIC_NAME)
        if topic is None or not topic.partition_count:
            return self.config.offsets_topic_num_partitions
        return topic.partition_count

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self._owned

    def owns_partition(self, partition: int) -> bool:
        """This broker leads the partition and has loaded its groups."""
        return partition in self._owned

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self._loading

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    def group_not_exists(self, group_id: str) -> bool:
        """This coordinator owns the group's partition and has no live group of that id."""
        group = self.groups.get(group_id)
        return self.is_group_local(group_id) and (group is None or is_dead(group))

    # -- groups -----------------------------------------------------------------------

    def get_group(self, group_id: str) -> GroupMetadata | None:
        """The classic group of that id (None when there is none, or the id names a
        consumer group: to the classic protocol, an unknown group)."""
        group = self.groups.get(group_id)
        return group if isinstance(group, GroupMetadata) else None

    def get_or_maybe_create_group(self, group_id: str, create: bool) -> GroupMetadata | None:
        """The classic group, created Empty if asked and the id is free."""
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = GroupMetadata(group_id, GroupState.EMPTY, self.clock)
        return group if isinstance(group, GroupMetadata) else None

    def add_group(self, group: Group) -> Group:
        """Add ``group`` unless one of that id exists; the group now cached."""
        return self.groups.setdefault(group.group_id, group)

    # -- writes -----------------------------------------------------------------------

    def _offsets_partition(self, group_id: str) -> TopicPartition:
        return TopicPartition(GROUP_METADATA_TOPIC_NAME, self.partition_for(group_id))

    def _is_local_leader(self, tp: TopicPartition) -> bool:
        partition = self._replica_manager.partitions.get(tp)
        return partition is not None and partition.is_leader

    async def _append(self, tp: TopicPartition, records: Sequence[SimpleRecord]) -> ProduceResult:
        batch = build_record_batch(
            records, compression=CompressionType(self.config.offsets_topic_compression_codec)
        )
        results = await self._replica_manager.append_records(
            self.config.offsets_commit_timeout_ms,
            -1,
            {tp: batch},
            internal_topics_allowed=True,
        )
        return results[tp]

    async def store_group(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> ErrorCode:
        """Write the group's generation, leader and members with ``assignment``."""
        tp = self._offsets_partition(group.group_id)
        if not self._is_local_leader(tp):
            return ErrorCode.not_coordinator
        now = self.clock()
        record = SimpleRecord(
            encode_key(GroupMetadataKey(group.group_id)),
            encode_group_metadata_value(_group_metadata_value(group, assignment)),
            timestamp=now,
        )
        result = await self._append(tp, [record])
        if result.error is None:
            return ErrorCode.none
        error = result.error.error_code
        log_event(
            _log,
            logging.WARNING,
            "group_metadata_write_failed",
            group=group.group_id,
            generation=group.generation_id,
            error=error.name,
        )
        return _GROUP_ERRORS.get(error, error)

    async def append_group_records(
        self, group_id: str, records: Sequence[SimpleRecord]
    ) -> ErrorCode | None:
        """Write records of a group (in one batch, so they land together or not at
        all); the append's error code, None once written."""
        tp = self._offsets_partition(group_id)
        # A group of this id may just have been deleted: its tombstones must land first,
        # or a reload would delete the new group.
        while self._tombstones_pending[tp.partition]:
            await self._tombstones_written.wait()
        if not self._is_local_leader(tp):
            return ErrorCode.not_coordinator
        result = await self._append(tp, records)
        return None if result.error is None else result.error.error_code

    async def store_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        """Write commits; those written are cached, unless their partition's offset was
        deleted while they were being written."""
        max_metadata = self.config.offset_metadata_max_bytes
        results = {
            tp: ErrorCode.offset_metadata_too_large
            for tp, offset in offsets.items()
            if len(offset.metadata) > max_metadata
        }
        valid = {tp: offset for tp, offset in offsets.items() if tp not in results}
        if not valid:
            return results
        tp_offsets = self._offsets_partition(group_id)
        if not self._is_local_leader(tp_offsets):
            return {**results, **dict.fromkeys(valid, ErrorCode.not_coordinator)}
        records = [
            SimpleRecord(
                encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
                encode_offset_commit_value(offset.to_value()),
                timestamp=offset.commit_timestamp_ms,
            )
            for tp, offset in valid.items()
        ]
        self.offsets.begin_commit(group_id, valid)
        result = await self._append(tp_offsets, records)
        info = result.info
        written = None
        if info is not None:
            written = {tp: o.at(info.first_offset + i) for i, (tp, o) in enumerate(valid.items())}
        self.offsets.end_commit(group_id, valid, written)
        if result.error is None:
            return {**results, **dict.fromkeys(valid, ErrorCode.none)}
        error = result.error.error_code
        return {**results, **dict.fromkeys(valid, _COMMIT_ERRORS.get(error, error))}

    async def cleanup_group_metadata(
        self, groups: Iterable[Group], selector: OffsetSelector
    ) -> int:
        """Remove the offsets ``selector`` picks from each group (an Empty group left
        without offsets dies and is forgotten) and write their tombstones; the number of
        offsets removed."""
        now = self.clock()
        tombstones: dict[TopicPartition, list[SimpleRecord]] = {}
        removed_count = 0
        for group in list(groups):
            group_id = group.group_id
            removed = selector(group)
            if not self.offsets.has_offsets(group_id):
                _kill_if_unused(group)
            records = [
                SimpleRecord(
                    encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
                    None,
                    timestamp=now,
                )
                for tp in removed
            ]
            if is_dead(group) and self.groups.get(group_id) is group:
                del self.groups[group_id]
                records += _group_tombstones(group, now)
            removed_count += len(removed)
            if records:
                tombstones.setdefault(self._offsets_partition(group_id), []).extend(records)
        self._tombstones_pending.update(tp.partition for tp in tombstones)
        for tp, records in tombstones.items():
            try:
                result = await self._append(tp, records) if self._is_local_leader(tp) else None
            finally:
                self._tombstones_pending[tp.partition] -= 1
                self._tombstones_written.set()
                self._tombstones_written = asyncio.Event()
            if result is not None and result.error is not None:
                # The cache is already clean; the next expiration pass does not retry
                # these, but neither can they resurface before the partition is reloaded.
                log_event(
                    _log,
                    logging.WARNING,
                    "tombstone_write_failed",
                    partition=str(tp),
                    records=len(records),
                    error=result.error.error_code.name,
                )
        return removed_count

    async def cleanup_expired_offsets(self) -> int:
        """One pass of offsets.retention.minutes over every group."""
        now = self.clock()
        retention = self.config.offsets_retention_ms

        def expired(group: Group) -> list[TopicPartition]:
            expiration = group.offset_expiration()
            if expiration is None:
                return []
            tps = self.offsets.expired(group.group_id, now, retention, expiration)
            return self.offsets.remove(group.group_id, tps)

        removed = await self.cleanup_group_metadata(self.groups.values(), expired)
        if removed:
            log_event(_log, logging.INFO, "offsets_expired", offsets=removed)
        return removed

    # -- loading and unloading --------------------------------------------------------

    def schedule_load(self, partition: int, epoch: int, on_loaded: GroupCallback) -> None:
        if not self._epochs.maybe_update(partition, epoch):
            return
        if partition in self._owned:
            return
        running = self._load_tasks.pop(partition, None)
        if running is not None:
            # A newer leader epoch while loading for an older one: start over for it.
            running.cancel()
        self._loading.add(partition)
        self._load_tasks[partition] = self._scheduler.spawn(
            self._load(partition, epoch, on_loaded), f"load {GROUP_METADATA_TOPIC_NAME}-{partition}"
        )

    async def _load(self, partition: int, epoch: int, on_loaded: GroupCallback) -> None:
        started = time.monotonic()
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, partition)

        def still_wanted() -> bool:
            return partition in self._loading and self._epochs.get(partition) == epoch

        loaded = None
        failed = False
        try:
            replica = self._replica_manager.partitions.get(tp)
            if replica is not None:
                loaded = await load_partition(
                    replica.log, self._scheduler, self.config.offsets_load_buffer_size, still_wanted
                )
            if loaded is not None:
                self._install(loaded, on_loaded)
        except Exception as e:
            # Never serve a partition whose groups were not read: its commits would look
            # lost. It stays loading (COORDINATOR_LOAD_IN_PROGRESS) and is retried.
            failed = True
            log_event(
                _log,
                logging.ERROR,
                "group_partition_load_failed",
                partition=str(tp),
                reason=repr(e),
                retry_ms=LOAD_RETRY_MS,
            )
        finally:
            if self._load_tasks.get(partition) is asyncio.current_task():
                del self._load_tasks[partition]
            if failed and still_wanted():
                self._scheduler.call_later(
                    LOAD_RETRY_MS / 1000, lambda: self._retry_load(partition, epoch, on_loaded)
                )
            elif still_wanted():
                self._loading.discard(partition)
                self._owned.add(partition)
                groups = 0 if loaded is None else len(loaded.groups.keys() | loaded.offsets.keys())
                # Most of the 50 partitions hold nothing: only those with groups are news.
                log_event(
                    _log,
                    logging.INFO if groups else logging.DEBUG,
                    "group_partition_loaded",
                    partition=str(tp),
                    epoch=epoch,
                    groups=groups,
                    ms=round((time.monotonic() - started) * 1000, 1),
                )

    def _retry_load(self, partition: int, epoch: int, on_loaded: GroupCallback) -> None:
        if partition in self._loading and self._epochs.get(partition) == epoch:
            self._loading.discard(partition)
            self.schedule_load(partition, epoch, on_loaded)

    def _install(self, loaded: LoadedPartition, on_loaded: GroupCallback) -> None:
        consumer_ids = {g for g, c in loaded.consumer_groups.items() if c.exists(g)}
        txn_ids = {g for groups in loaded.pending_txn_offsets.values() for g in groups}
        group_ids = loaded.groups.keys() | loaded.offsets.keys() | consumer_ids | txn_ids
        self.txn_offsets.load(loaded.pending_txn_offsets)
        for group_id in group_ids:
            group = self._loaded_group(group_id, loaded)
            if group is None:
                # Its membership records are unusable (logged): keep its committed
                # offsets in an Empty group rather than lose them.
                group = GroupMetadata(group_id, GroupState.EMPTY, self.clock)
            if self.add_group(group) is not group:
                continue  # created meanwhile; the cached one stays, as in Kafka
            self.offsets.load(group_id, loaded.offsets.get(group_id, {}))
            on_loaded(group)
        if loaded.skipped:
            log_event(_log, logging.WARNING, "group_records_skipped", records=loaded.skipped)

    def _loaded_group(self, group_id: str, loaded: LoadedPartition) -> Group | None:
        """The group of that id as the partition left it: of the type written last; a
        group with only offsets is an Empty classic one. None: its records do not make
        a consistent group (logged, skipped)."""
        value = loaded.groups.get(group_id)
        consumer = loaded.consumer_groups.get(group_id)
        if (
            consumer is not None
            and consumer.exists(group_id)
            and (value is None or consumer.last_offset > loaded.classic_offsets[group_id])
        ):
            try:
                return consumer.build(group_id)
            except RuntimeError as e:
                log_event(
                    _log, logging.ERROR, "consumer_group_load_failed", group=group_id, reason=str(e)
                )
                return None
        if value is None:
            return GroupMetadata(group_id, GroupState.EMPTY, self.clock)
        return self._group_from_value(group_id, value)

    def _group_from_value(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
        protocol = value.protocol
        members = (
            []
            if protocol is None
            else [_member_from_value(value.protocol_type, protocol, m) for m in value.members]
        )
        return load_group(
            group_id,
            value.generation,
            value.protocol_type,
            protocol,
            value.leader,
            None if value.current_state_timestamp == -1 else value.current_state_timestamp,
            members,
            self.clock,
        )

    def remove_groups_for_partition(
        self, partition: int, epoch: int | None, on_unloaded: GroupCallback
    ) -> None:
        if not self._epochs.maybe_update(partition, epoch):
            return
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        was_ours = partition in self._owned or partition in self._loading
        self._owned.discard(partition)
        self._loading.discard(partition)
        removed = 0
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) == partition:
                on_unloaded(group)
                del self.groups[group.group_id]
                self.offsets.remove_group(group.group_id)
                self.txn_offsets.remove_group(group.group_id)
                removed += 1
        if was_ours:
            log_event(
                _log,
                logging.INFO if removed else logging.DEBUG,
                "group_partition_unloaded",
                partition=f"{GROUP_METADATA_TOPIC_NAME}-{partition}",
                groups=removed,
            )

    def shutdown(self, on_unloaded: GroupCallback) -> None:
        for partition in sorted(self._owned | self._loading):
            self.remove_groups_for_partition(partition, None, on_unloaded)


def _member_from_value(
    protocol_type: str, protocol: str, value: MemberMetadataValue
) -> MemberMetadata:
    return MemberMetadata(
        value.member_id,
        value.group_instance_id,
        value.client_id,
        value.client_host,
        value.rebalance_timeout,
        value.session_timeout,
        protocol_type,
        ((protocol, value.subscription),),
        value.assignment,
    )


def _group_metadata_value(
    group: GroupMetadata, assignment: Mapping[str, bytes]
) -> GroupMetadataValue:
    protocol = group.protocol_name
    members = []
    for member_id, member in group.members.items():
        if protocol is None:
            raise RuntimeError(f"group {group.group_id} has members but no protocol")
        members.append(
            MemberMetadataValue(
                member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                member.session_timeout_ms,
                member.metadata(protocol),
                assignment[member_id],
            )
        )
    return GroupMetadataValue(
        group.protocol_type or "",
        group.generation_id,
        protocol,
        group.leader_id,
        group.current_state_timestamp_or_default,
        tuple(members),
    )


def _group_tombstones(group: Group, now: int) -> list[SimpleRecord]:
    """The records that delete a group's own state (not its offsets)."""
    if isinstance(group, ConsumerGroup):
        keys = [encode_consumer_group_key(key) for key in group.tombstone_keys()]
    elif group.generation_id > 0:
        keys = [encode_key(GroupMetadataKey(group.group_id))]
    else:
        keys = []  # a group that only stored offsets never wrote its metadata
    return [SimpleRecord(key, None, timestamp=now) for key in keys]
