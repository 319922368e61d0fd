"""Leader elections an admin asks for: ElectLeaders (KIP-460).

Kafka's KafkaController.processReplicaLeaderElection for an admin request: each partition
gets its preferred replica as leader (PREFERRED, when it is not already), or a leader
when it has none alive (UNCLEAN, which may pick an out-of-sync replica). The result per
partition is the new leader or the error Kafka reports for it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from tiercel.protocol.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidTopicError,
    KafkaError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.controller.controller_context import ControllerContext
from tiercel.server.controller.controller_store import ControllerStore
from tiercel.server.controller.partition_state_machine import PartitionStateMachine
from tiercel.storage.topic_partition import TopicPartition

__all__ = ["ElectionType", "elect_leaders"]


class ElectionType(enum.IntEnum):
    """ElectLeaders' election_type."""

    PREFERRED = 0
    UNCLEAN = 1


async def elect_leaders(
    context: ControllerContext,
    store: ControllerStore,
    states: PartitionStateMachine,
    partitions: Collection[TopicPartition],
    election_type: ElectionType,
    deleting: Collection[str],
) -> dict[TopicPartition, int | KafkaError]:
    """Per partition its new leader, or why there is none. Event-loop only, under the
    controller's lock; raises ControllerMovedError when this controller was deposed."""
    results: dict[TopicPartition, int | KafkaError] = {}
    known = {}
    for tp in partitions:
        assignment = context.assignment(tp)
        if assignment is None:
            results[tp] = UnknownTopicOrPartitionError("The partition does not exist.")
        elif tp.topic in deleting:
            results[tp] = InvalidTopicError("The topic is being deleted")
        else:
            known[tp] = assignment.replicas
    current = await store.read_states(known)
    live = context.live_broker_ids
    electable = {}
    for tp, replicas in known.items():
        state = current.get(tp)
        leader = -1 if state is None else state.leader
        if election_type is ElectionType.PREFERRED:
            needed = leader != replicas[0]
        else:
            needed = leader not in live
        if needed:
            electable[tp] = replicas
        else:
            results[tp] = ElectionNotNeededError("Leader election not needed for topic partition.")
    if election_type is ElectionType.PREFERRED:
        updates = await states.elect_preferred(electable)
    else:
        updates = await states.elect_offline(electable, True)
    for tp in electable:
        update = updates.get(tp)
        if update is not None and update.written and update.state is not None:
            results[tp] = update.state.leader
        else:
            results[tp] = _election_failure(tp, election_type)
    return results


def _election_failure(tp: TopicPartition, election_type: ElectionType) -> KafkaError:
    if election_type is ElectionType.PREFERRED:
        return PreferredLeaderNotAvailableError(
            f"Failed to elect leader for partition {tp} under strategy "
            "PreferredReplicaPartitionLeaderElectionStrategy"
        )
    return EligibleLeadersNotAvailableError(
        f"Failed to elect leader for partition {tp} under strategy "
        "OfflinePartitionLeaderElectionStrategy(true)"
    )
