"""The newest leader epoch a coordinator has applied per partition of its internal topic
(Kafka's GroupMetadataManager and TransactionStateManager each keep one, checked by
maybeUpdateCoordinatorEpoch): leadership changes may be handled out of order, and one
for an epoch older than one already applied is stale and ignored. Event-loop only."""

from __future__ import annotations

__all__ = ["CoordinatorEpochs"]


class CoordinatorEpochs:
    """Invariant: an epoch recorded for a partition never decreases."""

    def __init__(self) -> None:
        self._epochs: dict[int, int] = {}

    def get(self, partition: int) -> int | None:
        return self._epochs.get(partition)

    def maybe_update(self, partition: int, epoch: int | None) -> bool:
        """Record ``epoch`` unless it is older than the one recorded; False when it is
        (a stale leadership change). None (no epoch known) is never stale."""
        if epoch is None:
            return True
        current = self._epochs.get(partition)
        if current is not None and epoch < current:
            return False
        self._epochs[partition] = epoch
        return True
