"""Reassignments: moving partitions between brokers (KIP-455, Kafka's ZooKeeper flow).

With RS the partition's replicas, ORS the original and TRS the target replicas:

A. while some target replica is not in the ISR: RS = TRS + ORS in the topic znode, with
   adding_replicas = TRS - ORS and removing_replicas = ORS - TRS; the leader epoch is
   bumped so every replica picks up the new replica set. Brokers start the adding
   replicas, which catch up through their fetchers; the leader adds them to the ISR.
B. once TRS ⊆ ISR (seen through a watch on the partition state): leadership moves to the
   first live ISR member of TRS if the leader is not in TRS, the removed replicas leave
   the ISR (one state write, one new leader epoch), then RS = TRS in the topic znode;
   brokers no longer assigned the partition delete their replica.

A new request for a partition under reassignment replaces the old target (replicas added
by the old one and not wanted by the new one are dropped at once); a null target
cancels, which is a reassignment back to ORS. The active controller only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaError,
    NoReassignmentInProgressError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.controller import election
from tiercel.server.controller.controller_context import ControllerContext, TopicContext
from tiercel.server.controller.controller_store import ControllerMovedError, ControllerStore
from tiercel.server.controller.partition_state_machine import PartitionStateMachine
from tiercel.server.controller.replica_assignment import ReplicaAssignment
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.store import BadVersionError, MetadataStoreError, WatchHandle
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.controller")
_MAX_TOPIC_WRITES: Final = 20

Target = tuple[int, ...] | None
WatchState = Callable[[TopicPartition], Awaitable[WatchHandle]]


class Reassignments:
    """Invariants: every partition in `context.being_reassigned` has a watch on its
    state in `_watches` (registered by `watch`) until it completes or its topic goes.
    Event-loop only."""

    def __init__(
        self,
        context: ControllerContext,
        store: ControllerStore,
        states: PartitionStateMachine,
        watch_state: WatchState,
    ) -> None:
        self._context = context
        self._store = store
        self._states = states
        self._watch_state = watch_state
        self._watches: dict[TopicPartition, WatchHandle] = {}

    def close(self) -> None:
        for handle in self._watches.values():
            handle.cancel()
        self._watches.clear()

    def forget_topic(self, topic: str) -> None:
        for tp in [tp for tp in self._watches if tp.topic == topic]:
            self._watches.pop(tp).cancel()

    # -- the API -----------------------------------------------------------------------

    async def alter(
        self,
        targets: Mapping[TopicPartition, Target],
        allow_rf_change: bool,
        deleting: Collection[str],
    ) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments: start, change or cancel (target None) the
        reassignment of each partition; the result is per partition."""
        results: dict[TopicPartition, KafkaError | None] = {}
        for tp, target in targets.items():
            try:
                new = self._build(tp, target, allow_rf_change)
                if tp.topic in deleting or self._context.assignment(tp) is None:
                    raise UnknownTopicOrPartitionError("The partition does not exist.")
                await self.reassign(tp, new)
            except KafkaError as e:
                results[tp] = e
            except ControllerMovedError:
                raise
            except Exception as e:
                log_event(
                    _log, logging.ERROR, "reassignment_failed", partition=str(tp), reason=repr(e)
                )
                results[tp] = UnknownServerError(f"reassignment of {tp} failed: {e}")
            else:
                results[tp] = None
        return results

    def _build(
        self, tp: TopicPartition, target: Target, allow_rf_change: bool
    ) -> ReplicaAssignment:
        current = self._context.assignment(tp) or ReplicaAssignment(())
        if target is not None:
            self._validate(current, target)
            if (
                not allow_rf_change
                and len(target) != len(current.origin_replicas)
                and current.replicas
            ):
                raise InvalidReplicationFactorError(
                    f"The replication factor is changed from {len(current.origin_replicas)} "
                    f"to {len(target)}"
                )
            return current.reassign_to(target)
        if not current.is_being_reassigned:
            raise NoReassignmentInProgressError("No partition reassignment is in progress.")
        return current.reassign_to(current.origin_replicas)

    def _validate(self, current: ReplicaAssignment, target: tuple[int, ...]) -> None:
        if not target:
            raise InvalidReplicaAssignmentError(
                "Empty replica list specified in partition reassignment."
            )
        if len(set(target)) != len(target):
            raise InvalidReplicaAssignmentError(
                f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
            )
        if any(r < 0 for r in target):
            raise InvalidReplicaAssignmentError(
                f"Invalid broker id in replica list: {list(target)}"
            )
        adding = current.reassign_to(target).adding
        live = self._context.live_broker_ids
        if not set(adding) <= live:
            raise InvalidReplicaAssignmentError(
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"{list(adding)}, live broker list: {sorted(live)}"
            )

    def list(
        self, partitions: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the ongoing ones among `partitions` (None: all)."""
        wanted = self._context.being_reassigned if partitions is None else partitions
        result = {}
        for tp in wanted:
            assignment = self._context.assignment(tp)
            if assignment is not None and assignment.is_being_reassigned:
                result[tp] = assignment
        return result

    # -- the state machine -------------------------------------------------------------

    async def reassign(self, tp: TopicPartition, new: ReplicaAssignment) -> None:
        """Kafka's onPartitionReassignment: step A, or B when the target is in the ISR."""
        await self._update_current(tp, new)
        state = await self._store.read_state(tp, new.replicas)
        if state is None:
            log_event(_log, logging.WARNING, "reassignment_without_state", partition=str(tp))
            return
        if new.is_being_reassigned and not set(new.target_replicas) <= set(state.isr):
            await self._store.update_state(
                tp, new.replicas, lambda _, s: election.bump_leader_epoch(s)
            )
            return
        await self._complete(tp, new)

    async def maybe_complete(self, tp: TopicPartition) -> None:
        """The state of a partition under reassignment changed: finish it if it can."""
        assignment = self._context.assignment(tp)
        if assignment is None or not assignment.is_being_reassigned:
            return
        state = await self._store.read_state(tp, assignment.replicas)
        if state is not None and set(assignment.target_replicas) <= set(state.isr):
            await self.reassign(tp, assignment)

    async def resume(self, wanted: Callable[[ReplicaAssignment], bool]) -> None:
        """Restart the reassignments `wanted` selects (after a failover, or when one of
        their target brokers comes back)."""
        for tp in sorted(self._context.being_reassigned):
            assignment = self._context.assignment(tp)
            if assignment is not None and wanted(assignment):
                await self.reassign(tp, assignment)

    async def _update_current(self, tp: TopicPartition, new: ReplicaAssignment) -> None:
        current = self._context.assignment(tp)
        assert current is not None
        if current != new:
            await self._write_assignment(tp, new)
            unneeded = [r for r in current.replicas if r not in new.replicas]
            if unneeded:
                await self._states.remove_from_isr({tp: new.replicas}, unneeded)
            log_event(
                _log,
                logging.INFO,
                "reassignment_updated",
                partition=str(tp),
                replicas=_ids(new.replicas),
                adding=_ids(new.adding),
                removing=_ids(new.removing),
            )
        if new.is_being_reassigned and tp not in self._watches:
            self._watches[tp] = await self._watch_state(tp)

    async def _complete(self, tp: TopicPartition, new: ReplicaAssignment) -> None:
        target = new.target_replicas
        removing = new.removing
        live = self._context.live_broker_ids

        def change(_: TopicPartition, state: PartitionState) -> PartitionState:
            moved = state
            if state.leader not in target or state.leader not in live:
                moved = election.elect_reassigned(state, target, live) or state
            shrunk = election.remove_replicas_from_isr(moved, removing) or moved
            return replace(shrunk, leader_epoch=state.leader_epoch + 1)

        update = await self._store.update_state(tp, new.replicas, change)
        await self._write_assignment(tp, ReplicaAssignment(target))
        handle = self._watches.pop(tp, None)
        if handle is not None:
            handle.cancel()
        state = update.state
        log_event(
            _log,
            logging.INFO,
            "reassignment_completed",
            partition=str(tp),
            replicas=_ids(target),
            leader=-1 if state is None else state.leader,
            leader_epoch=-1 if state is None else state.leader_epoch,
        )

    async def _write_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Write the topic znode with `assignment` for `tp`, re-reading the topic when it
        changed meanwhile (CreatePartitions writes it too)."""
        context = self._context
        for _ in range(_MAX_TOPIC_WRITES):
            topic = context.topics[tp.topic]
            partitions = {**topic.partitions, tp.partition: assignment}
            updated = TopicContext(topic.topic_id, partitions, topic.zk_version)
            try:
                version = await self._store.write_topic(
                    tp.topic, updated.to_znode(), topic.zk_version
                )
            except BadVersionError:
                data, stat = await self._store.store.get(zk.topic_path(tp.topic))
                context.put_topic(
                    tp.topic, TopicContext.from_znode(zk.TopicAssignment.decode(data), stat.version)
                )
                continue
            updated.zk_version = version
            context.put_topic(tp.topic, updated)
            return
        raise MetadataStoreError(f"the assignment of {tp.topic} kept changing under the controller")


def _ids(replicas: tuple[int, ...]) -> str:
    return ",".join(map(str, replicas))
