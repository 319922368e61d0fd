"""What a KRaft broker does with each new metadata image (Kafka's
BrokerMetadataPublisher): the metadata cache gets the live brokers and the topics, and
every topic a record changed — its partitions, its configs, or its deletion — goes to
the same `on_topic` entry point the embedded store's listener uses, which hands it to
ReplicaManager (making, leading, following and dropping replicas) and keeps the topic's
log config.

Alive brokers are the registered, unfenced ones (Kafka's KRaftMetadataCache
getAliveBrokers); those in a controlled shutdown are listed as shutting down, so that
no ISR waits for them (KIP-841). The controller id clients see is one of the alive
brokers, which forwards what only the controller handles. A replica in a directory its
broker no longer lists online (KIP-858) is offline in Metadata answers (Kafka's
KRaftMetadataCache.getOfflineReplicas): every partition's replicas are looked at again
when a registration changed, a changed topic's otherwise.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from tiercel.config.broker_config import Listener
from tiercel.server.metadata.image.broker_registration import BrokerRegistration
from tiercel.server.metadata.image.configurations import ConfigResource, ConfigResourceType
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.topics_image import TopicImage
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.zk_data import BrokerRegistration as CachedBroker
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

__all__ = ["BrokerMetadataPublisher", "topic_metadata"]

TopicChanged = Callable[[str, TopicMetadata | None], Awaitable[None]]


class BrokerMetadataPublisher:
    """Event-loop only; the loader calls it one image at a time."""

    name = "BrokerMetadataPublisher"

    def __init__(self, cache: MetadataCache, on_topic: TopicChanged) -> None:
        self._cache = cache
        self._on_topic = on_topic

    async def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.cluster_delta is not None:
            brokers = image.cluster.brokers
            alive = {i: _cached(b) for i, b in brokers.items() if not b.fenced}
            shutting_down = frozenset(i for i, b in brokers.items() if b.in_controlled_shutdown)
            self._cache.put_brokers(alive, shutting_down)
            if self._cache.controller_id not in alive:
                # Clients send the controller's admin requests to any broker, which
                # forwards them: the "controller" is a random alive broker (Kafka's
                # KRaftMetadataCache.getControllerId, getRandomAliveBrokerId).
                self._cache.set_controller(random.choice(sorted(alive)) if alive else -1)
            self._cache.offline_replicas = {
                tp: replicas
                for topic in image.topics.topics_by_id.values()
                for tp, replicas in _replicas_in_offline_dirs(topic, image).items()
            }
        for name in sorted(_changed_topic_names(delta)):
            topic = image.topics.topics_by_name.get(name)
            if delta.cluster_delta is None:
                self._update_offline_replicas(name, topic, image)
            if topic is None:
                if self._cache.remove_topic(name) is not None:
                    await self._on_topic(name, None)
                continue
            metadata = topic_metadata(topic, image)
            self._cache.put_topic(metadata)
            await self._on_topic(name, metadata)

    def _update_offline_replicas(
        self, name: str, topic: TopicImage | None, image: MetadataImage
    ) -> None:
        offline = self._cache.offline_replicas
        for tp in [tp for tp in offline if tp.topic == name]:  # few: offline ones only
            del offline[tp]
        if topic is not None:
            offline.update(_replicas_in_offline_dirs(topic, image))


def _replicas_in_offline_dirs(
    topic: TopicImage, image: MetadataImage
) -> dict[TopicPartition, frozenset[int]]:
    """The partitions with replicas of registered brokers in directories those brokers
    do not list online (Kafka's isReplicaInOfflineDir); the handler adds the brokers
    that are not alive."""
    brokers = image.cluster.brokers
    offline = {}
    for partition_id, registration in topic.partitions.items():
        replicas = frozenset(
            replica
            for replica, directory in zip(
                registration.replicas, registration.directories, strict=True
            )
            if (broker := brokers.get(replica)) is not None and not broker.has_online_dir(directory)
        )
        if replicas:
            offline[TopicPartition(topic.name, partition_id)] = replicas
    return offline


def topic_metadata(topic: TopicImage, image: MetadataImage) -> TopicMetadata:
    """The image's topic as the broker's cache and ReplicaManager hold topics."""
    resource = ConfigResource(ConfigResourceType.TOPIC, topic.name)
    return TopicMetadata(
        topic.name,
        topic.id,
        {p: registration.replicas for p, registration in topic.partitions.items()},
        {
            p: PartitionState(
                leader=registration.leader,
                leader_epoch=registration.leader_epoch,
                isr=registration.isr,
                replicas=registration.replicas,
                partition_epoch=registration.partition_epoch,
            )
            for p, registration in topic.partitions.items()
        },
        dict(image.configs.config_map_for_resource(resource)),
    )


def _changed_topic_names(delta: MetadataDelta) -> set[str]:
    names: set[str] = set()
    topics = delta.topics_delta
    if topics is not None:
        names.update(d.name for d in topics.changed_topics.values())
        names.update(topics.image.topics_by_id[i].name for i in topics.deleted_topic_ids)
    configs = delta.configs_delta
    if configs is not None:
        names.update(r.name for r in configs.changes if r.type is ConfigResourceType.TOPIC)
    return names


def _cached(broker: BrokerRegistration) -> CachedBroker:
    endpoints = tuple(Listener(e.listener_name, e.host, e.port) for e in broker.listeners.values())
    return CachedBroker(broker.id, endpoints, broker.rack)
