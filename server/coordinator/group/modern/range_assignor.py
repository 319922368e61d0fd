"""The "range" server-side assignor (Kafka's KIP-848 RangeAssignor): contiguous ranges.

For each topic, its subscribers are ordered — static members first by instance id, then
the others by member id — and the topic's partitions are cut into as many contiguous
ranges, the first ``partitions % subscribers`` of them one partition longer. When every
member subscribes to the same topics and the topics have the same partition count, a
member gets the same partition numbers of every topic (co-partitioning, for joins).
Ordering static members by instance id means a static member that comes back under a
new member id gets its old ranges back while the group is otherwise unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Final

from tiercel.server.coordinator.group.modern.assignment import Assignment
from tiercel.server.coordinator.group.modern.assignor import GroupSpec

RANGE_ASSIGNOR_NAME: Final = "range"


class RangeAssignor:
    """Stateless; any thread."""

    name: Final = RANGE_ASSIGNOR_NAME

    def assign(
        self, group: GroupSpec, partition_counts: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        members = group.members
        order = sorted(
            members,
            key=lambda m: (members[m].instance_id is None, members[m].instance_id or m, m),
        )
        result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in order}
        topics = {t for member in members.values() for t in member.topic_ids}
        for topic_id in topics:
            subscribed = [m for m in order if topic_id in members[m].topic_ids]
            minimum, extra = divmod(partition_counts[topic_id], len(subscribed))
            start = 0
            for i, member_id in enumerate(subscribed):
                count = minimum + (1 if i < extra else 0)
                if count:
                    result[member_id][topic_id] = frozenset(range(start, start + count))
                start += count
        return dict(result)
