"""FailedPartitions: the followed partitions a replica fetcher gave up on.

Kafka's FailedPartitions (AbstractFetcherManager): a fetcher that meets an unexpected
error while processing one partition's data marks that partition failed
(AbstractFetcherThread.markPartitionFailed) instead of retrying what failed for ever or
taking the other partitions down with it. A failed partition is no longer fetched, so
its replica drops out of the ISR, until the partition is added to a fetcher again: a
new leader or leader epoch, or a restart, whose log recovery rebuilds what the failed
append may have left half done. Event-loop only.
"""

from __future__ import annotations

from collections.abc import Iterable

from tiercel.storage.topic_partition import TopicPartition


class FailedPartitions:
    """Shared by a `ReplicaFetcherManager` and its fetchers."""

    def __init__(self) -> None:
        self._partitions: set[TopicPartition] = set()

    def add(self, tp: TopicPartition) -> None:
        self._partitions.add(tp)

    def remove_all(self, tps: Iterable[TopicPartition]) -> None:
        self._partitions.difference_update(tps)

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def __len__(self) -> int:
        return len(self._partitions)
