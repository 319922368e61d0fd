"""PartitionStateMachine: leadership changes of many partitions at once.

Kafka's ZooKeeper-mode PartitionStateMachine and the ISR side of its ReplicaStateMachine,
driven by the controller's events: first states of new partitions, offline-partition
elections (clean, or unclean where allowed), preferred-replica and controlled-shutdown
elections, and replicas leaving ISRs. Every change is a conditional, epoch-fenced write
of one partition's state through `ControllerStore`, run concurrently across partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.logging_setup import log_event
from tiercel.server.controller import election
from tiercel.server.controller.controller_context import ControllerContext
from tiercel.server.controller.controller_store import (
    ControllerStore,
    StateChange,
    StateUpdate,
    gather_all,
)
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.store import NoNodeError
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.controller")
_UNCLEAN_KEY: Final = "unclean.leader.election.enable"

Replicas = Mapping[TopicPartition, tuple[int, ...]]


class PartitionStateMachine:
    """Invariants: only the active controller uses it, and only with its own context and
    fenced store; partitions with no state node yet are in `context.new_partitions`.
    Event-loop only."""

    def __init__(
        self, config: BrokerConfig, context: ControllerContext, store: ControllerStore
    ) -> None:
        self._config = config
        self._context = context
        self._store = store

    async def initialize(self, partitions: Collection[TopicPartition]) -> None:
        """First states (Kafka's NewPartition → OnlinePartition): leader = the first live
        replica, ISR = the live replicas, epoch 0. Partitions with no live replica wait
        in `new_partitions` for a broker to come back."""
        context = self._context
        live = context.live_broker_ids
        jobs = []
        for tp in partitions:
            assignment = context.assignment(tp)
            if assignment is None:
                context.new_partitions.discard(tp)
                continue
            isr = tuple(r for r in assignment.replicas if r in live)
            if not isr:
                context.new_partitions.add(tp)
                continue
            context.new_partitions.discard(tp)
            state = PartitionState(isr[0], 0, isr, assignment.replicas)
            jobs.append(self._create(tp, state))
        await gather_all(jobs)

    async def _create(self, tp: TopicPartition, state: PartitionState) -> None:
        if await self._store.create_state(tp, state):
            _logged(tp, state, "new_partition")

    async def on_replicas_offline(self, partitions: Replicas, dead: Collection[int]) -> None:
        """Brokers `dead` are gone: partitions whose leader is not live get one from the
        live ISR (or, where allowed, any live replica); the dead replicas leave the ISRs
        (a leader that cannot be replaced leaves the partition leaderless)."""
        live = self._context.live_broker_ids
        unclean = await self._unclean_topics({tp.topic for tp in partitions})

        def change(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            if state.leader not in live:
                elected = election.elect_offline(state, partitions[tp], live, tp.topic in unclean)
                if elected is not None:
                    return elected
            return election.remove_replicas_from_isr(state, sorted(dead))

        await self._apply(partitions, change, "broker_offline")

    async def elect_offline(
        self, partitions: Replicas, allow_unclean: bool
    ) -> dict[TopicPartition, StateUpdate]:
        """Elect leaders for the partitions whose leader is not live; unclean where
        `allow_unclean` or the topic's unclean.leader.election.enable say so."""
        live = self._context.live_broker_ids
        unclean = (
            {tp.topic for tp in partitions}
            if allow_unclean
            else await self._unclean_topics({tp.topic for tp in partitions})
        )

        def change(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            if state.leader in live:
                return None
            return election.elect_offline(state, partitions[tp], live, tp.topic in unclean)

        return await self._apply(partitions, change, "offline_partition_election")

    async def elect_preferred(self, partitions: Replicas) -> dict[TopicPartition, StateUpdate]:
        live = self._context.live_broker_ids

        def change(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            return election.elect_preferred(state, partitions[tp], live)

        return await self._apply(partitions, change, "preferred_replica_election")

    async def shut_down_broker(self, broker: int) -> None:
        """Controlled shutdown: move the broker's leaderships to ISR members that are not
        shutting down, and take it out of the ISRs it follows in (partitions with one
        replica are left alone, as in Kafka)."""
        context = self._context
        partitions = {
            tp: a.replicas
            for tp, a in context.all_partitions()
            if broker in a.replicas and len(a.replicas) > 1
        }
        live_or_shutting_down = context.live_or_shutting_down_ids
        shutting_down = frozenset(context.shutting_down)

        def change(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            if state.leader == broker:
                return election.elect_controlled_shutdown(
                    state, partitions[tp], live_or_shutting_down, shutting_down
                )
            return election.remove_replicas_from_isr(state, (broker,))

        await self._apply(partitions, change, "controlled_shutdown")

    async def remove_from_isr(self, partitions: Replicas, replicas: Collection[int]) -> None:
        def change(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            return election.remove_replicas_from_isr(state, replicas)

        await self._apply(partitions, change, "replica_removed")

    async def _apply(
        self,
        partitions: Replicas,
        change: StateChange,
        reason: str,
    ) -> dict[TopicPartition, StateUpdate]:
        updates = await self._store.update_states(partitions, change)
        for tp, update in updates.items():
            if update.written and update.state is not None:
                _logged(tp, update.state, reason)
        return updates

    async def _unclean_topics(self, topics: Collection[str]) -> set[str]:
        """The topics whose unclean.leader.election.enable (override, else the broker's
        default) is true."""
        enabled = set()
        for topic in topics:
            try:
                data, _ = await self._store.store.get(zk.topic_config_path(topic))
                value = zk.decode_topic_config(data).get(_UNCLEAN_KEY)
            except NoNodeError:
                value = None
            if (
                self._config.unclean_leader_election_enable
                if value is None
                else value.strip().lower() == "true"
            ):
                enabled.add(topic)
        return enabled


def _logged(tp: TopicPartition, state: PartitionState, reason: str) -> None:
    log_event(
        _log,
        logging.INFO,
        "partition_state_changed",
        partition=str(tp),
        reason=reason,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=",".join(map(str, state.isr)),
    )
