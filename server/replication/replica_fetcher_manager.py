"""ReplicaFetcherManager: which fetcher follows which partition.

Kafka's ReplicaFetcherManager (AbstractFetcherManager) with num.replica.fetchers=1: one
`ReplicaFetcher` per source broker, created when the first partition led by that broker
becomes a follower here and stopped when its last partition goes (Kafka's
shutdownIdleFetcherThreads). A partition whose leader changes moves from the old
leader's fetcher to the new one's. A partition a fetcher marked failed
(`FailedPartitions`) stays out of every fetcher until it is added again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.server.replication.failed_partitions import FailedPartitions
from tiercel.server.replication.fetch_state import InitialFetchState, PartitionFetchState
from tiercel.server.replication.replica_fetcher import ReplicaFetcher
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.replica_fetcher")

# Builds the (not yet started) fetcher for a source broker id, sharing the manager's
# failed partitions.
FetcherFactory = Callable[[int, FailedPartitions], ReplicaFetcher]


class ReplicaFetcherManager:
    """Event-loop only. Invariants: a partition is followed by at most one fetcher, the
    one of the leader it was last added with; no running fetcher is without partitions.
    """

    def __init__(self, make_fetcher: FetcherFactory) -> None:
        self._make_fetcher = make_fetcher
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self.failed_partitions = FailedPartitions()
        self._stopping: set[asyncio.Task[None]] = set()

    def fetcher(self, leader_id: int) -> ReplicaFetcher | None:
        return self._fetchers.get(leader_id)

    def fetch_state(self, tp: TopicPartition) -> tuple[int, PartitionFetchState] | None:
        """(leader id, fetch state) of the fetcher following ``tp``, if one does."""
        for leader_id, fetcher in self._fetchers.items():
            state = fetcher.fetch_state(tp)
            if state is not None:
                return leader_id, state
        return None

    def add_fetcher_for_partitions(
        self, initial: Mapping[TopicPartition, InitialFetchState]
    ) -> None:
        """Follow each partition from its leader, starting over (truncation first); a
        failed one is failed no more (Kafka's addFetcherForPartitions)."""
        self.failed_partitions.remove_all(initial)
        by_leader: dict[int, dict[TopicPartition, InitialFetchState]] = defaultdict(dict)
        for tp, state in initial.items():
            by_leader[state.leader_id][tp] = state
        for leader_id, states in by_leader.items():
            for other_id, other in self._fetchers.items():
                if other_id != leader_id:
                    other.remove_partitions(states)
            fetcher = self._fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self._make_fetcher(leader_id, self.failed_partitions)
                self._fetchers[leader_id] = fetcher
                fetcher.start()
            fetcher.add_partitions(states)
            log_event(
                _log,
                logging.INFO,
                "fetcher_partitions_added",
                leader=leader_id,
                partitions=",".join(
                    f"{tp}@{s.init_offset}/epoch{s.current_leader_epoch}"
                    for tp, s in sorted(states.items())
                ),
            )
        self.shutdown_idle_fetchers()

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> None:
        doomed = list(tps)
        self.failed_partitions.remove_all(doomed)
        for fetcher in self._fetchers.values():
            fetcher.remove_partitions(doomed)
        self.shutdown_idle_fetchers()

    def shutdown_idle_fetchers(self) -> None:
        for leader_id in [i for i, f in self._fetchers.items() if f.partition_count == 0]:
            self._stop(self._fetchers.pop(leader_id))

    def _stop(self, fetcher: ReplicaFetcher) -> None:
        task = fetcher.stop()
        if task is not None and not task.done():
            # Kept until it has finished unwinding, so the loop never drops it pending.
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def stop_all(self) -> None:
        """Stop every fetcher (broker shutdown): no follower appends after this."""
        for fetcher in self._fetchers.values():
            self._stop(fetcher)
        self._fetchers.clear()

    async def shutdown(self) -> None:
        self.stop_all()
        await asyncio.gather(*self._stopping, return_exceptions=True)
