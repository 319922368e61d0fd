"""The quorum controller (Kafka's ``QuorumController``, KIP-500/KIP-631): the one writer
of the metadata log, on the Raft leader; every other controller replays it as a standby.

Events. Commands, Raft callbacks and periodic tasks run one at a time on one queue
(`ControllerEventQueue`). A write event runs its control manager's command against the
live state; its records are appended with ``schedule_atomic_append`` in the current
epoch and replayed at once, so the next command sees them; the caller's future completes
when Raft commits the batch's last offset (Kafka's ``deferredEventQueue``). A command
without records completes once everything written before it is committed. A read event
runs against the committed state.

State and reverting. Kafka keeps uncommitted changes in timeline data structures and
reverts them to the last committed offset on resignation. Here a standby's live state IS
its committed state; when this controller claims leadership it copies the committed
state (replaying its records into fresh managers) and writes ahead in the copy, while
commits go on being replayed into the committed state. Renouncing drops the copy: the
controller's state is its committed state again, exactly, at the cost of one replay of
the state per leadership change.

Leadership. The Raft client tells its listener it leads only once the listener has
replayed to the start of the epoch (as Kafka's ``claim`` relies on), so the new active
controller writes nothing before it has seen every committed record. On an empty log it
first writes the bootstrap records (metadata.version's FeatureLevelRecord and the rest of
the bootstrap checkpoint; Kafka's ``ActivationRecordsGenerator``). While active it runs
`ControllerPeriodicTasks` (session expiry, NoOpRecords, preferred and unclean
elections); every controller snapshots its committed state after
``metadata.log.max.record.bytes.between.snapshots`` new bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tiercel.protocol.errors import KafkaError, NotControllerError, UnknownServerError
from tiercel.protocol.metadata.broker_records import ControllerEndpoint, RegisterControllerRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.authorizer.acl import AclBindingFilter
from tiercel.server.controller.acl_control_manager import AclDeleteResult
from tiercel.server.controller.broker_registration import BrokerRegistrationRequest
from tiercel.server.controller.configuration_control_manager import ConfigResource, OpType
from tiercel.server.controller.control_managers import ControlManagers
from tiercel.server.controller.controller_event_queue import ControllerEventQueue
from tiercel.server.controller.controller_periodic_tasks import ControllerPeriodicTasks
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    AlterPartitionResult,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsTopic,
    DirectoryAssignment,
    DirectoryAssignmentResult,
    ElectionType,
    OngoingReassignment,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.feature_control_manager import (
    FinalizedControllerFeatures,
    UpgradeType,
)
from tiercel.server.controller.producer_id_control_manager import ProducerIdsBlock
from tiercel.server.controller.quorum_controller_config import QuorumControllerConfig
from tiercel.server.controller.raft_client import BatchReader, RaftClient
from tiercel.server.controller.scram_control_manager import (
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserScramResult,
)
from tiercel.server.metadata.image.acls import StandardAcl
from tiercel.server.metadata.image.broker_registration import VersionRange
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.records_snapshot import SnapshotReader
from tiercel.server.raft.timer import SystemTime, Time

__all__ = ["QuorumController"]

_log = logging.getLogger(__name__)

T = TypeVar("T")
_NOT_ACTIVE = -1


@dataclass(frozen=True, slots=True)
class _Deferred:
    offset: int
    future: asyncio.Future[Any]
    response: Any


class QuorumController:
    """Event-loop only. `start` registers it with the Raft client; the async command
    methods raise NotControllerError on a standby (or when leadership is lost before
    their records commit), and the KafkaError a command refuses with."""

    def __init__(
        self,
        config: QuorumControllerConfig,
        raft: RaftClient,
        bootstrap_records: Sequence[ApiMessageAndVersion],
        time: Time | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._raft = raft
        self._bootstrap_records = tuple(bootstrap_records)
        self._time = time or SystemTime()
        self._rng = rng or random.Random()
        self._queue = ControllerEventQueue(f"quorum-controller-{config.node_id}")
        self._committed = self._new_state()
        self._live = self._committed
        self._claim_epoch = _NOT_ACTIVE
        self._next_write_offset = 0
        self.last_committed_offset = -1
        self.last_committed_epoch = 0
        self._last_committed_timestamp = -1
        self._new_bytes_since_snapshot = 0
        self._last_snapshot_ms = self._time.milliseconds()
        self._snapshot_in_progress = False
        self._deferred: list[_Deferred] = []
        self._pending: set[asyncio.Future[Any]] = set()
        self._periodic: ControllerPeriodicTasks | None = None

    def _new_state(self) -> ControlManagers:
        return ControlManagers(self.config, self._time, self._rng)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self._queue.start()
        self._raft.register(self)

    async def close(self) -> None:
        self._cancel_periodic_tasks()
        await self._queue.close()
        self._fail_all(NotControllerError("The controller is shutting down."))

    @property
    def is_active(self) -> bool:
        return self._claim_epoch != _NOT_ACTIVE

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self._raft.leader_and_epoch

    @property
    def committed_state(self) -> ControlManagers:
        return self._committed

    @property
    def state(self) -> ControlManagers:
        """The live state: the committed one on a standby, plus this controller's
        uncommitted writes on the active one."""
        return self._live

    # -- events ---------------------------------------------------------------------

    def _future(self) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    async def _write(self, name: str, op: Callable[[], ControllerResult[T]]) -> T:
        future = self._future()
        if not self._queue.append(name, lambda: self._run_write(name, op, future)):
            future.set_exception(NotControllerError("The controller is shutting down."))
        result: T = await future
        return result

    async def _read(self, name: str, op: Callable[[ControlManagers], T]) -> T:
        future = self._future()

        def run() -> None:
            if not future.done():
                _complete(future, lambda: op(self._committed))

        if not self._queue.append(name, run):
            future.set_exception(NotControllerError("The controller is shutting down."))
        result: T = await future
        return result

    def _run_write(
        self, name: str, op: Callable[[], ControllerResult[Any]], future: asyncio.Future[Any]
    ) -> None:
        if future.done():
            return
        if not self.is_active:
            future.set_exception(_not_controller(self._raft.leader_and_epoch))
            return
        try:
            result = op()
        except KafkaError as e:
            future.set_exception(e)
            return
        except Exception as e:
            _log.exception("controller write %s failed", name)
            future.set_exception(UnknownServerError(str(e)))
            return
        if not result.records:
            end = self._next_write_offset - 1
        else:
            try:
                end = self._append(result.records)
            except KafkaError as e:
                # Refused before anything was written (RECORD_BATCH_TOO_LARGE): the
                # request fails, the controller stays as it was.
                future.set_exception(e)
                return
            except Exception as e:
                _log.warning("renouncing after failing to append %s: %s", name, e)
                future.set_exception(_not_controller(self._raft.leader_and_epoch))
                self._renounce()
                return
        if end <= self.last_committed_offset:
            future.set_result(result.response)
        else:
            self._deferred.append(_Deferred(end, future, result.response))

    def _append(self, records: Sequence[ApiMessageAndVersion]) -> int:
        """Appends and replays ``records``; the offset of the last one."""
        last = self._raft.schedule_atomic_append(self._claim_epoch, records)
        first = last - len(records) + 1
        if first != self._next_write_offset:
            _log.warning(
                "records written at offset %d, not the expected %d", first, self._next_write_offset
            )
        for i, record in enumerate(records):
            self._live.replay(record.message, first + i)
        self._next_write_offset = last + 1
        return last

    # -- Raft listener ----------------------------------------------------------------

    def handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None:
        if not self._queue.append("handleCommit", lambda: self._handle_commit(reader)):
            reader.close()

    def _handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None:
        try:
            for batch in reader:
                for i, record in enumerate(batch.records):
                    self._committed.replay(record.message, batch.base_offset + i)
                self.last_committed_offset = batch.last_offset
                self.last_committed_epoch = batch.epoch
                self._last_committed_timestamp = batch.append_timestamp
                self._new_bytes_since_snapshot += batch.size_in_bytes
        finally:
            reader.close()
        self._complete_deferred()
        self._maybe_generate_snapshot()

    def handle_load_snapshot(self, reader: SnapshotReader[ApiMessageAndVersion]) -> None:
        if not self._queue.append("handleLoadSnapshot", lambda: self._handle_load_snapshot(reader)):
            reader.close()

    def _handle_load_snapshot(self, reader: SnapshotReader[ApiMessageAndVersion]) -> None:
        if self.is_active:
            self._renounce()
        state = self._new_state()
        snapshot_id = reader.snapshot_id
        try:
            for batch in reader:
                state.replay_all(batch.records, snapshot_id.offset - 1)
        finally:
            reader.close()
        self._committed = self._live = state
        self.last_committed_offset = snapshot_id.offset - 1
        self.last_committed_epoch = snapshot_id.epoch
        self._last_committed_timestamp = reader.last_contained_log_timestamp
        self._new_bytes_since_snapshot = 0

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._queue.append("handleLeaderChange", lambda: self._handle_leader_change(leader))

    def _handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        if self.is_active:
            if leader.is_leader(self.config.node_id):
                self._claim_epoch = leader.epoch
            else:
                self._renounce()
        elif leader.is_leader(self.config.node_id):
            self._claim(leader.epoch)

    def begin_shutdown(self) -> None:
        self._queue.append("beginShutdown", self._begin_shutdown)

    def _begin_shutdown(self) -> None:
        if self.is_active:
            self._renounce()

    # -- claiming and renouncing ----------------------------------------------------

    def _claim(self, epoch: int) -> None:
        _log.info("becoming the active controller at epoch %d", epoch)
        live = self._new_state()
        live.replay_all(self._committed.records(), self.last_committed_offset)
        live.cluster.activate()
        self._live = live
        self._claim_epoch = epoch
        self._next_write_offset = self._raft.log_end_offset
        if not self._committed.feature.has_metadata_version:
            # An empty log: the bootstrap records come first (ActivationRecordsGenerator).
            try:
                self._append(self._bootstrap_records)
            except Exception as e:
                _log.warning("renouncing after failing to write the bootstrap records: %s", e)
                self._renounce()
                return
        self._start_periodic_tasks()

    def _renounce(self) -> None:
        _log.info("renouncing the leadership of epoch %d", self._claim_epoch)
        epoch, self._claim_epoch = self._claim_epoch, _NOT_ACTIVE
        # Raft refuses (ValueError) when it has moved to a later epoch already.
        with contextlib.suppress(ValueError):
            self._raft.resign(epoch)
        self._cancel_periodic_tasks()
        self._live = self._committed
        error = _not_controller(self._raft.leader_and_epoch)
        deferred, self._deferred = self._deferred, []
        for item in deferred:
            if not item.future.done():
                item.future.set_exception(error)

    def _complete_deferred(self) -> None:
        done = 0
        for item in self._deferred:
            if item.offset > self.last_committed_offset:
                break
            if not item.future.done():
                item.future.set_result(item.response)
            done += 1
        del self._deferred[:done]

    def _fail_all(self, error: KafkaError) -> None:
        self._deferred.clear()
        for future in list(self._pending):
            if not future.done():
                future.set_exception(error)

    # -- periodic tasks -------------------------------------------------------------

    def _start_periodic_tasks(self) -> None:
        self._periodic = ControllerPeriodicTasks(
            self.config, self._time, lambda: self._live, self._write
        )

    def _cancel_periodic_tasks(self) -> None:
        if self._periodic is not None:
            self._periodic.cancel()
            self._periodic = None

    # -- snapshots ------------------------------------------------------------------

    def _maybe_generate_snapshot(self) -> None:
        # Kafka's SnapshotGenerator: after metadata.log.max.record.bytes.between.snapshots
        # new bytes, or metadata.log.max.snapshot.interval.ms after the last snapshot if
        # anything is new.
        now = self._time.milliseconds()
        due = self._new_bytes_since_snapshot >= self.config.snapshot_max_new_record_bytes or (
            self._new_bytes_since_snapshot > 0
            and now - self._last_snapshot_ms >= self.config.snapshot_max_interval_ms
        )
        if self._snapshot_in_progress or not due or self.last_committed_offset < 0:
            return
        snapshot_id = OffsetAndEpoch(self.last_committed_offset + 1, self.last_committed_epoch)
        self._new_bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        try:
            writer = self._raft.create_snapshot(snapshot_id, self._last_committed_timestamp)
        except ValueError as e:
            _log.warning("cannot snapshot at %s: %s", snapshot_id, e)
            return
        if writer is None:
            return
        records = self._committed.records()
        self._snapshot_in_progress = True

        async def write() -> None:
            try:
                writer.append(records)
                await writer.freeze()
                _log.info("wrote the controller snapshot %s", snapshot_id)
            except Exception:
                _log.exception("failed to write the controller snapshot %s", snapshot_id)
            finally:
                writer.close()
                self._snapshot_in_progress = False

        asyncio.get_running_loop().create_task(write())

    # -- commands -------------------------------------------------------------------

    async def register_broker(self, request: BrokerRegistrationRequest) -> int:
        """BrokerRegistration: the new (or kept) broker epoch."""
        return await self._write(
            "registerBroker",
            lambda: self._live.cluster.register_broker(
                request,
                self._next_write_offset,
                self._live.feature.finalized_features(self.last_committed_offset),
            ),
        )

    async def process_broker_heartbeat(
        self, request: BrokerHeartbeatRequest
    ) -> BrokerHeartbeatReply:
        def op() -> ControllerResult[BrokerHeartbeatReply]:
            cluster = self._live.cluster
            cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
            offset = cluster.register_broker_record_offset(request.broker_id)
            return self._live.replication.process_broker_heartbeat(request, offset)

        return await self._write("processBrokerHeartbeat", op)

    async def unregister_broker(self, broker_id: int) -> None:
        await self._write(
            "unregisterBroker", lambda: self._live.replication.unregister_broker(broker_id)
        )

    async def register_controller(
        self,
        controller_id: int,
        incarnation_id: uuid.UUID,
        listeners: tuple[ControllerEndpoint, ...],
        features: Mapping[str, VersionRange],
    ) -> None:
        """ControllerRegistration (KIP-919)."""
        await self._write(
            "registerController",
            lambda: self._live.cluster.register_controller(
                controller_id, incarnation_id, listeners, features
            ),
        )

    async def controller_registrations(self) -> dict[int, RegisterControllerRecord]:
        return await self._read(
            "controllerRegistrations", lambda s: dict(s.cluster.controller_registrations)
        )

    async def maybe_fence_stale_broker(self) -> int | None:
        """Fences one broker whose session expired; its id, or None."""
        return await self._write(
            "maybeFenceReplicas", lambda: self._live.replication.maybe_fence_one_stale_broker()
        )

    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool = False
    ) -> list[CreatableTopicResult]:
        return await self._write(
            "createTopics", lambda: self._live.topics.create_topics(topics, validate_only)
        )

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        return await self._write(
            "createPartitions", lambda: self._live.topics.create_partitions(topics, validate_only)
        )

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[KafkaError | None]:
        return await self._write("createAcls", lambda: self._live.acls.create_acls(acls))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        return await self._write("deleteAcls", lambda: self._live.acls.delete_acls(filters))

    async def find_topic_ids(self, names: Sequence[str]) -> dict[str, uuid.UUID | KafkaError]:
        return await self._read("findTopicIds", lambda s: s.topics.find_topic_ids(names))

    async def delete_topics(
        self, topic_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, KafkaError | None]:
        return await self._write("deleteTopics", lambda: self._live.topics.delete_topics(topic_ids))

    async def alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        topics: Sequence[tuple[uuid.UUID, str, Sequence[AlterPartitionData]]],
        request_version: int,
    ) -> list[tuple[uuid.UUID, str, list[AlterPartitionResult]]]:
        return await self._write(
            "alterPartition",
            lambda: self._live.partitions.alter_partition(
                broker_id, broker_epoch, topics, request_version
            ),
        )

    async def assign_replicas_to_dirs(
        self, broker_id: int, broker_epoch: int, directories: Sequence[DirectoryAssignment]
    ) -> DirectoryAssignmentResult:
        return await self._write(
            "assignReplicasToDirs",
            lambda: self._live.partitions.assign_replicas_to_dirs(
                broker_id, broker_epoch, directories
            ),
        )

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[tuple[str, int], KafkaError | None]:
        return await self._write(
            "electLeaders",
            lambda: self._live.replication.elect_leaders(election_type, partitions),
        )

    async def alter_partition_reassignments(
        self, changes: Mapping[str, Mapping[int, tuple[int, ...] | None]]
    ) -> dict[tuple[str, int], KafkaError | None]:
        return await self._write(
            "alterPartitionReassignments",
            lambda: self._live.partitions.alter_partition_reassignments(changes),
        )

    async def list_partition_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None
    ) -> list[OngoingReassignment]:
        return await self._read(
            "listPartitionReassignments",
            lambda s: s.partitions.list_partition_reassignments(topics),
        )

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Mapping[str, tuple[OpType, str | None]]],
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaError | None]:
        return await self._write(
            "incrementalAlterConfigs",
            lambda: _validated(
                self._live.configuration.incremental_alter_configs(changes), validate_only
            ),
        )

    async def legacy_alter_configs(
        self,
        new_configs: Mapping[ConfigResource, Mapping[str, str | None]],
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaError | None]:
        return await self._write(
            "legacyAlterConfigs",
            lambda: _validated(
                self._live.configuration.legacy_alter_configs(new_configs), validate_only
            ),
        )

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        return await self._write(
            "allocateProducerIds",
            lambda: self._live.producer_ids.generate_next_producer_id(broker_id, broker_epoch),
        )

    async def alter_user_scram_credentials(
        self,
        deletions: Sequence[ScramCredentialDeletion],
        upsertions: Sequence[ScramCredentialUpsertion],
    ) -> list[UserScramResult]:
        return await self._write(
            "alterUserScramCredentials",
            lambda: self._live.scram.alter_credentials(
                deletions, upsertions, self._live.feature.metadata_version
            ),
        )

    async def update_features(
        self,
        updates: Mapping[str, int],
        upgrade_types: Mapping[str, UpgradeType],
        validate_only: bool = False,
    ) -> None:
        await self._write(
            "updateFeatures",
            lambda: self._live.feature.update_features(updates, upgrade_types, validate_only),
        )

    async def finalized_features(self) -> FinalizedControllerFeatures:
        return await self._read(
            "finalizedFeatures",
            lambda s: s.feature.finalized_features(self.last_committed_offset),
        )


def _validated(result: ControllerResult[T], validate_only: bool) -> ControllerResult[T]:
    return ControllerResult([], result.response) if validate_only else result


def _complete(future: asyncio.Future[Any], op: Callable[[], Any]) -> None:
    try:
        future.set_result(op())
    except KafkaError as e:
        future.set_exception(e)


def _not_controller(leader: LeaderAndEpoch) -> NotControllerError:
    # Kafka's ControllerExceptions.newWrongControllerException.
    if leader.leader_id is None:
        return NotControllerError("No controller appears to be active.")
    return NotControllerError(f"The active controller appears to be node {leader.leader_id}.")
