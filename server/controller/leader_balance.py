"""Which partitions the automatic leader rebalance moves back to their preferred replica.

Kafka's checkAndTriggerAutoLeaderRebalance: partitions are grouped by their preferred
replica (the first in the assignment); a broker whose group has more than
`leader.imbalance.per.broker.percentage` percent of its partitions led elsewhere gets all
of those back, where the preferred replica can lead (live and in the ISR).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

from tiercel.server.controller import election
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition


def partitions_to_rebalance(
    assignments: Mapping[TopicPartition, tuple[int, ...]],
    states: Mapping[TopicPartition, PartitionState],
    live: Collection[int],
    imbalance_percentage: int,
) -> dict[TopicPartition, tuple[int, ...]]:
    """The partitions (with their replicas) to hand back to their preferred replica."""
    by_preferred: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp, replicas in assignments.items():
        if replicas:
            by_preferred[replicas[0]].append(tp)
    chosen = {}
    for preferred, partitions in by_preferred.items():
        elsewhere = [tp for tp in partitions if tp in states and states[tp].leader != preferred]
        if len(elsewhere) / len(partitions) <= imbalance_percentage / 100:
            continue
        for tp in elsewhere:
            if election.elect_preferred(states[tp], assignments[tp], live) is not None:
                chosen[tp] = assignments[tp]
    return chosen
