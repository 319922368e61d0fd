"""MetadataLoader and BrokerMetadataPublisher: committed metadata batches replayed into
images published in order once caught up with the high watermark, metadata
transactions held back until they end (and dropped when aborted), a snapshot load that
removes what it does not hold, and what the broker's cache and ReplicaManager entry
point receive: alive (unfenced) brokers, topics with their partition states and
configs, deleted topics."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace

from tiercel.protocol.metadata.broker_records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.protocol.metadata.log_control_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.metadata.broker_metadata_publisher import BrokerMetadataPublisher
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.partition_registration import UNASSIGNED_DIRECTORY
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_loader import MetadataLoader
from tiercel.server.partition import PartitionState
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raft_client_listener import MemoryBatchReader
from tiercel.storage.topic_partition import TopicPartition

TOPIC_ID = uuid.UUID(int=11)
OTHER_ID = uuid.UUID(int=12)
DIR_A = uuid.UUID("a0000000-0000-4000-8000-00000000000a")
DIR_B = uuid.UUID("b0000000-0000-4000-8000-00000000000b")


def register(broker_id: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=100 + broker_id),
        broker_epoch=10 + broker_id,
        end_points=(
            BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + broker_id, security_protocol=0),
        ),
        features=(),
        rack=None,
    )


def partition(topic_id: uuid.UUID, index: int, leader: int) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=(1, 2),
        isr=(1, 2),
        removing_replicas=(),
        adding_replicas=(),
        leader=leader,
        leader_epoch=3,
        partition_epoch=5,
    )


class Recorder:
    """A publisher keeping what it got."""

    name = "recorder"

    def __init__(self) -> None:
        self.offsets: list[int] = []

    async def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.offsets.append(image.provenance.last_contained_offset)


class Batches:
    """Batches at consecutive offsets, one record each unless grouped."""

    def __init__(self) -> None:
        self.next_offset = 0

    def reader(self, *groups: Sequence[MetadataRecord]) -> MemoryBatchReader[ApiMessageAndVersion]:
        batches = []
        for records in groups:
            base = self.next_offset
            self.next_offset += len(records)
            batches.append(
                Batch(
                    base,
                    epoch=1,
                    append_timestamp=1000 + base,
                    size_in_bytes=100,
                    last_offset=self.next_offset - 1,
                    records=[ApiMessageAndVersion(r, 0) for r in records],
                )
            )
        return MemoryBatchReader(batches, lambda _: None)


async def settle(loader: MetadataLoader, offset: int) -> None:
    async with asyncio.timeout(5):
        while loader.last_applied_offset < offset:
            await asyncio.sleep(0.001)


async def test_publishes_once_caught_up_and_holds_back_transactions() -> None:
    high_watermark: list[int | None] = [None]
    loader = MetadataLoader(1, lambda: high_watermark[0])
    recorder = Recorder()
    loader.install_publisher(recorder)
    batches = Batches()
    loader.handle_commit(batches.reader([register(1)], [register(2)]))
    assert loader.image.is_empty()  # the high watermark is not known yet
    high_watermark[0] = 4
    loader.handle_commit(batches.reader([TopicRecord(name="t", topic_id=TOPIC_ID)]))
    assert loader.image.is_empty()  # offset 2 of a high watermark of 4: catching up
    loader.handle_commit(batches.reader([partition(TOPIC_ID, 0, 1)]))
    await settle(loader, 3)
    assert recorder.offsets == [3]
    assert set(loader.image.cluster.brokers) == {1, 2}
    # A transaction: nothing of it shows until it ends; an aborted one never does.
    loader.handle_commit(batches.reader([BeginTransactionRecord(), partition(TOPIC_ID, 1, 2)]))
    assert loader.image.provenance.last_contained_offset == 3
    loader.handle_commit(batches.reader([EndTransactionRecord()]))
    loader.handle_commit(
        batches.reader([BeginTransactionRecord(), TopicRecord(name="u", topic_id=OTHER_ID)])
    )
    loader.handle_commit(batches.reader([AbortTransactionRecord()]))
    await settle(loader, 9)
    assert set(loader.image.topics.topics_by_id[TOPIC_ID].partitions) == {0, 1}
    assert "u" not in loader.image.topics.topics_by_name
    assert recorder.offsets == [3, 6, 9]
    await loader.close()


async def test_the_broker_publisher_feeds_the_cache_and_replica_manager() -> None:
    cache = MetadataCache(1, "cluster")
    topics: list[tuple[str, TopicMetadata | None]] = []

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        topics.append((name, topic))

    loader = MetadataLoader(1, lambda: 0)
    loader.install_publisher(BrokerMetadataPublisher(cache, on_topic))
    batches = Batches()
    loader.handle_commit(
        batches.reader(
            [register(1), register(2), UnfenceBrokerRecord(id=1, epoch=11)],
            [TopicRecord(name="t", topic_id=TOPIC_ID), partition(TOPIC_ID, 0, 2)],
            [ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="5")],
        )
    )
    await settle(loader, 5)
    assert sorted(cache.brokers) == [1]  # broker 2 is still fenced
    assert cache.broker_endpoint(1, "PLAINTEXT") == ("h", 9001)
    [(name, topic)] = topics
    assert name == "t" and topic is not None and cache.topic("t") is topic
    assert topic.topic_id == TOPIC_ID and topic.replicas == {0: (1, 2)}
    assert topic.states[0] == PartitionState(2, 3, (1, 2), (1, 2), partition_epoch=5)
    assert topic.config_overrides == {"retention.ms": "5"}
    # A config change alone is a change of the topic; deletion removes it.
    loader.handle_commit(
        batches.reader(
            [ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="6")]
        )
    )
    loader.handle_commit(batches.reader([RemoveTopicRecord(topic_id=TOPIC_ID)]))
    await settle(loader, 7)
    assert [t.config_overrides if t else None for _, t in topics] == [
        {"retention.ms": "5"},
        {"retention.ms": "6"},
        None,
    ]
    assert cache.topic("t") is None
    await loader.close()


async def test_a_replica_in_a_directory_its_broker_no_longer_lists_is_offline() -> None:
    """KIP-858, as Kafka's KRaftMetadataCache.getOfflineReplicas: broker 2 lists dirs a
    and b online; when a fails, its replica of t-0 there is offline, and so is that of
    t-1 once the controller places it in a."""
    cache = MetadataCache(1, "cluster")

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        pass

    loader = MetadataLoader(1, lambda: 0)
    loader.install_publisher(BrokerMetadataPublisher(cache, on_topic))
    batches = Batches()
    in_dir = {
        p: replace(partition(TOPIC_ID, p, 2), directories=(UNASSIGNED_DIRECTORY, d))
        for p, d in ((0, DIR_A), (1, DIR_B))
    }
    loader.handle_commit(
        batches.reader(
            [register(1), replace(register(2), log_dirs=(DIR_A, DIR_B))],
            [TopicRecord(name="t", topic_id=TOPIC_ID), in_dir[0], in_dir[1]],
        )
    )
    await settle(loader, 4)
    assert cache.offline_replicas == {}
    a_failed = BrokerRegistrationChangeRecord(
        broker_id=2, broker_epoch=12, fenced=0, in_controlled_shutdown=0, log_dirs=(DIR_B,)
    )
    loader.handle_commit(batches.reader([a_failed]))
    await settle(loader, 5)
    assert cache.offline_replicas == {TopicPartition("t", 0): {2}}
    placed_in_a = PartitionChangeRecord(
        partition_id=1, topic_id=TOPIC_ID, directories=(UNASSIGNED_DIRECTORY, DIR_A)
    )
    loader.handle_commit(batches.reader([placed_in_a]))
    await settle(loader, 6)
    assert cache.offline_replicas == {TopicPartition("t", 0): {2}, TopicPartition("t", 1): {2}}
    loader.handle_commit(batches.reader([RemoveTopicRecord(topic_id=TOPIC_ID)]))
    await settle(loader, 7)
    assert cache.offline_replicas == {}
    await loader.close()


class SnapshotOf:
    """A snapshot's records, as the Raft client's SnapshotReader hands them over."""

    def __init__(self, end_offset: int, records: Sequence[MetadataRecord]) -> None:
        self.snapshot_id = OffsetAndEpoch(end_offset, 2)
        self.last_contained_log_timestamp = 5000
        self._batch = Batch(
            0, 2, 5000, 100, len(records) - 1, [ApiMessageAndVersion(r, 0) for r in records]
        )
        self.closed = False

    def __iter__(self) -> Iterator[Batch[ApiMessageAndVersion]]:
        return iter([self._batch])

    def close(self) -> None:
        self.closed = True


async def test_a_snapshot_replaces_the_image() -> None:
    cache = MetadataCache(1, "cluster")
    deleted: list[str] = []

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        if topic is None:
            deleted.append(name)

    loader = MetadataLoader(1, lambda: 0)
    loader.install_publisher(BrokerMetadataPublisher(cache, on_topic))
    batches = Batches()
    loader.handle_commit(
        batches.reader(
            [TopicRecord(name="t", topic_id=TOPIC_ID), partition(TOPIC_ID, 0, 1)],
            [TopicRecord(name="u", topic_id=OTHER_ID), partition(OTHER_ID, 0, 1)],
        )
    )
    await settle(loader, 3)
    snapshot = SnapshotOf(
        100, [TopicRecord(name="u", topic_id=OTHER_ID), partition(OTHER_ID, 0, 2)]
    )
    loader.handle_load_snapshot(snapshot)
    await settle(loader, 99)
    assert snapshot.closed
    assert deleted == ["t"] and cache.topic("t") is None
    u = cache.topic("u")
    assert u is not None and u.states[0].leader == 2
    provenance = loader.image.provenance
    assert (provenance.last_contained_offset, provenance.last_contained_epoch) == (99, 2)
    await loader.close()
