"""ZkAlterPartitionManager: a leader's ISR change, written straight to the partition state.

Kafka's ZooKeeper-mode leaders wrote ``/brokers/topics/<t>/partitions/<p>/state``
themselves (``ReplicationUtils.updateLeaderAndIsr``): same leader, same leader epoch,
the new ISR, the controller epoch of the leadership decision, as a conditional set on
the version the leader last saw, which is the partition epoch. The controller and every
broker learn the change from their watches on that node; no notification is needed.
"""

from __future__ import annotations

from dataclasses import replace

from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.store import BadVersionError, MetadataStore, NoNodeError
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition


class ZkAlterPartitionManager:
    """Implements `server.partition.AlterPartitionManager` on a MetadataStore.

    Event-loop only (the store's contract). Stateless apart from the store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        path = zk.partition_state_path(tp.topic, tp.partition)
        try:
            stat = await self._store.set(
                path,
                zk.encode_partition_state(proposed),
                expected_version=proposed.partition_epoch,
            )
            return replace(proposed, partition_epoch=stat.version)
        except BadVersionError:
            # Someone wrote first (the controller, or our own earlier write that timed
            # out): what is there now decides, as Kafka's checkLeaderAndIsrZkData did.
            try:
                data, stat = await self._store.get(path)
            except NoNodeError:
                return None
            return zk.decode_partition_state(data, proposed.replicas, stat.version)
        except NoNodeError:
            return None
