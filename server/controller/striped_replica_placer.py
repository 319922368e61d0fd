"""Where new partitions' replicas go (Kafka's ``StripedReplicaPlacer``): spread across
racks first, then across brokers, on unfenced brokers before fenced ones, and never with
a fenced leader.

Racks are taken round-robin from a random starting rack, the start moving on by one rack
per partition (the "striped" pattern); within a rack the brokers are taken round-robin
too, unfenced ones first, from a random starting broker. Kafka's placer walks the same
striping with per-rack iterators; this one lays each partition's candidates out as that
walk would and takes the first ``replication_factor`` of them, the leader being the first
unfenced one. Brokers in controlled shutdown are not offered (Kafka's usable brokers).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest

from tiercel.protocol.errors import InvalidReplicationFactorError

__all__ = ["StripedReplicaPlacer", "UsableBroker"]


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """Kafka's ``UsableBroker``."""

    id: int
    rack: str | None
    fenced: bool


class StripedReplicaPlacer:
    """Pure but for its random source; event-loop only."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def place(
        self, num_partitions: int, replication_factor: int, brokers: Sequence[UsableBroker]
    ) -> list[tuple[int, ...]]:
        """One replica list per partition; InvalidReplicationFactorError as Kafka's."""
        if replication_factor <= 0:
            raise InvalidReplicationFactorError(
                f"Invalid replication factor {replication_factor}: the replication factor "
                "must be positive."
            )
        if not any(not b.fenced for b in brokers):
            raise InvalidReplicationFactorError("All brokers are currently fenced.")
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"The target replication factor of {replication_factor} cannot be reached "
                f"because only {len(brokers)} broker(s) are registered."
            )
        racks: dict[str, list[UsableBroker]] = {}
        for broker in sorted(brokers, key=lambda b: b.id):
            racks.setdefault(broker.rack or "", []).append(broker)
        rack_lists = [
            ([b.id for b in members if not b.fenced], [b.id for b in members if b.fenced])
            for _, members in sorted(racks.items())
        ]
        fenced = {b.id for b in brokers if b.fenced}
        rack_offset = self._rng.randrange(len(rack_lists))
        broker_offsets = [self._rng.randrange(1 << 16) for _ in rack_lists]
        placements = []
        for partition in range(num_partitions):
            start = (rack_offset + partition) % len(rack_lists)
            ordered = rack_lists[start:] + rack_lists[:start]
            offsets = broker_offsets[start:] + broker_offsets[:start]
            turn = partition // len(rack_lists)
            rotated = [
                _rotate(unfenced_ids, offset + turn) + _rotate(fenced_ids, offset + turn)
                for (unfenced_ids, fenced_ids), offset in zip(ordered, offsets, strict=True)
            ]
            candidates = [b for row in zip_longest(*rotated) for b in row if b is not None]
            leader = next(b for b in candidates if b not in fenced)
            followers = [b for b in candidates if b != leader][: replication_factor - 1]
            placements.append((leader, *followers))
        return placements


def _rotate(ids: list[int], by: int) -> list[int]:
    if not ids:
        return ids
    by %= len(ids)
    return ids[by:] + ids[:by]
