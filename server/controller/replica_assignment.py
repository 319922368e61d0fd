"""ReplicaAssignment: a partition's replicas, with the replicas a reassignment adds and
removes (KIP-455), as the controller keeps it and the topic znode stores it."""

from __future__ import annotations

from dataclasses import dataclass


def _without(replicas: tuple[int, ...], dropped: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(r for r in replicas if r not in dropped)


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment. A value; safe anywhere.

    Invariants: `adding` and `removing` are disjoint subsets of `replicas`; while a
    reassignment runs `replicas` is the target replicas followed by the original ones not
    in the target (so the first replica, the preferred leader, is the target's first).
    """

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return _without(self.replicas, self.adding)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return _without(self.replicas, self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: tuple[int, ...]) -> ReplicaAssignment:
        """The assignment while moving from the original replicas to `target`."""
        origin = self.origin_replicas
        full = tuple(dict.fromkeys((*target, *origin)))
        return ReplicaAssignment(full, _without(full, origin), _without(full, target))
