"""What a KRaft broker learns from and tells the controller quorum instead of a metadata
store (the KRaft parts of Kafka's BrokerServer).

It learns the metadata by replicating the metadata log as a Raft observer (or voter,
on a combined node): the `MetadataLoader` publishes each image through the
`BrokerMetadataPublisher` to the metadata cache and ReplicaManager. It tells the active
controller, over channels that follow the Raft leader to its endpoint on the controller
listener: registration and heartbeats (`BrokerLifecycleManager`), ISR changes
(AlterPartition), producer id blocks, its own topic creations, the admin requests
clients send it (Envelope), and which log dir holds each of its replicas
(AssignReplicasToDirs through the `AssignmentsManager`, which
`DirectoryAssignmentPublisher` feeds from each metadata delta: KIP-858).

Start-up, as Kafka's BrokerServer.startup: register once the listeners are bound;
wait until the controller says the broker caught up with the metadata log and the
loader has published what it caught up to; then ask to be unfenced and wait for it.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.config.ssl_factory import outgoing_context
from tiercel.protocol.metadata.metadata_version import (
    LATEST_PRODUCTION,
    MINIMUM_VERSION,
)
from tiercel.server.assignments_manager import AssignmentsManager
from tiercel.server.broker_lifecycle_manager import (
    BrokerLifecycleManager,
    LifecycleConfig,
    Registration,
)
from tiercel.server.controller_topic_creator import ControllerTopicCreator
from tiercel.server.coordinator.transaction.rpc_producer_id_manager import RpcProducerIdManager
from tiercel.server.forwarding_manager import ForwardingManager
from tiercel.server.metadata.broker_metadata_publisher import BrokerMetadataPublisher, TopicChanged
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.log_dir_event import LogDirEvent
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.metadata.metadata_loader import MetadataLoader
from tiercel.server.metadata.supported_features import SUPPORTED_FEATURES
from tiercel.server.node_to_controller_channel import (
    ControllerInformation,
    NodeToControllerChannel,
)
from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.replica_manager import ReplicaManager
from tiercel.server.replication.default_alter_partition_manager import (
    DefaultAlterPartitionManager,
)
from tiercel.storage.meta_properties import MetaProperties

__all__ = ["DirectoryAssignmentPublisher", "KRaftBrokerMetadata", "KRaftLogDirEvents"]

# Kafka's security protocol ids (SecurityProtocol.id); only PLAINTEXT until security.
_SECURITY_PROTOCOL_IDS: Final = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# How long the broker's own requests to the controller keep trying (Kafka's
# NodeToControllerChannelManager retry timeouts are the request's, at most this).
_CONTROLLER_RETRY_TIMEOUT_S: Final = 30.0
# How long a client's forwarded request waits for an active controller before the broker
# answers REQUEST_TIMED_OUT (Kafka's BrokerServer builds the "forwarding"
# NodeToControllerChannelManagerImpl with retryTimeoutMs = 60000): long enough for a
# quorum that lost its majority to have a voter restarted.
_FORWARDING_RETRY_TIMEOUT_S: Final = 60.0
# Kafka's BrokerServer gives the directory-assignments channel a minute.
_ASSIGNMENTS_RETRY_TIMEOUT_S: Final = 60.0


class KRaftBrokerMetadata:
    """Event-loop only."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        raft: KafkaRaftClient[Any],
        loader: MetadataLoader,
        meta_properties: Mapping[str, MetaProperties],
    ) -> None:
        """``meta_properties``: each log dir's, as the node read and verified them at
        start-up (every one has a directory.id)."""
        self._config = config
        self._cluster_id = cluster_id
        self._raft = raft
        self.loader = loader
        self.meta_properties = dict(meta_properties)
        # By absolute path, as the LogManager names its dirs and a log its parent dir.
        self.log_dir_ids = {
            os.path.abspath(log_dir): meta.directory_id
            for log_dir, meta in meta_properties.items()
            if meta.directory_id is not None
        }
        self._channels: list[NodeToControllerChannel] = []
        self.lifecycle = BrokerLifecycleManager(
            LifecycleConfig(
                node_id=config.node_id,
                rack=None,
                heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
                session_timeout_ms=config.broker_session_timeout_ms,
                initial_registration_timeout_ms=config.initial_broker_registration_timeout_ms,
            ),
            self._channel("heartbeat"),
        )

    def start_loading(
        self, cache: MetadataCache, on_topic: TopicChanged, replica_manager: ReplicaManager
    ) -> None:
        """Publish the metadata log's images to the broker's cache and its partitions
        (Kafka's BrokerMetadataPublisher), then its replicas' directories
        (`DirectoryAssignmentPublisher`), and replicate the log into the loader."""
        self.loader.install_publisher(BrokerMetadataPublisher(cache, on_topic))
        self.loader.install_publisher(
            DirectoryAssignmentPublisher(self._config.node_id, replica_manager)
        )
        self._raft.register(self.loader)

    def log_dir_events(self) -> KRaftLogDirEvents:
        """Where the broker's LogDirFailureHandler reports a failed log dir."""
        return KRaftLogDirEvents(self.lifecycle, self.log_dir_ids)

    def active_controller(self) -> ControllerInformation | None:
        """The Raft leader's endpoint on the controller listener, from the latest voter
        set: the static voters, or the metadata log's VotersRecord (Kafka's
        RaftControllerNodeProvider asks the Raft client's voterNode)."""
        leader = self._raft.leader_and_epoch.leader_id
        if leader is None:
            return None
        node = self._raft.voters.voter_node(leader, self._config.controller_listener_names[0])
        return None if node is None else ControllerInformation(node.id, node.host, node.port)

    def _channel(self, purpose: str) -> NodeToControllerChannel:
        channel = NodeToControllerChannel(
            self.active_controller,
            f"broker-{self._config.node_id}-{purpose}-channel",
            self._config.controller_quorum_request_timeout_ms / 1000,
            self._config.controller_quorum_retry_backoff_ms / 1000,
            outgoing_context(self._config, self._config.controller_listener_names[0]),
        )
        self._channels.append(channel)
        return channel

    def alter_partition_manager(self, cache: MetadataCache) -> DefaultAlterPartitionManager:
        def topic_id_of(name: str) -> uuid.UUID | None:
            topic = cache.topic(name)
            return None if topic is None else topic.topic_id

        def registered_epoch_of(broker_id: int) -> int:
            return self.loader.image.cluster.broker_epoch(broker_id)

        return DefaultAlterPartitionManager(
            self._config.node_id,
            lambda: self.lifecycle.broker_epoch,
            topic_id_of,
            registered_epoch_of,
            self._channel("alter-partition"),
            _CONTROLLER_RETRY_TIMEOUT_S,
        )

    def producer_id_manager(self) -> RpcProducerIdManager:
        return RpcProducerIdManager(
            self._config.node_id,
            lambda: self.lifecycle.broker_epoch,
            self._channel("producer-ids"),
            _CONTROLLER_RETRY_TIMEOUT_S,
        )

    def topic_creator(self) -> ControllerTopicCreator:
        return ControllerTopicCreator(
            self._channel("topic-creation"),
            int(_CONTROLLER_RETRY_TIMEOUT_S * 1000),
            _CONTROLLER_RETRY_TIMEOUT_S,
        )

    def assignments_manager(self) -> AssignmentsManager:
        """Sends where this broker's replicas are; the image gives the broker epoch and
        what is still a replica here (Kafka's BrokerServer builds it alike)."""
        return AssignmentsManager(
            self._config.node_id,
            self._channel("directory-assignments"),
            lambda: self.loader.image,
            _ASSIGNMENTS_RETRY_TIMEOUT_S,
        )

    def forwarding_manager(self) -> ForwardingManager:
        return ForwardingManager(self._channel("forwarding"), _FORWARDING_RETRY_TIMEOUT_S)

    async def register_and_catch_up(self, advertised: Sequence[Listener]) -> None:
        """Register, wait until caught up and published, ask to be unfenced and wait for
        it (Kafka's BrokerServer.startup waits on the same futures)."""
        protocols = self._config.security_protocol_map
        registration = Registration(
            cluster_id=self._cluster_id,
            listeners=[
                (e.name, e.host, e.port, _SECURITY_PROTOCOL_IDS[protocols.get(e.name, "PLAINTEXT")])
                for e in advertised
            ],
            features=[
                (
                    "metadata.version",
                    MINIMUM_VERSION.feature_level,
                    LATEST_PRODUCTION.feature_level,
                ),
                *((f.name, 0, f.max_level) for f in SUPPORTED_FEATURES),
            ],
            log_dir_ids=tuple(self.log_dir_ids.values()),
        )
        lifecycle = self.lifecycle
        lifecycle.start(lambda: self.loader.last_applied_offset, registration)
        await lifecycle.initial_catch_up
        await self.loader.wait_until_applied(self._raft.high_watermark or 0)
        await lifecycle.set_ready_to_unfence()

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move this broker's leaderships away and wait for its
        answer, at most ``timeout_s`` (then shut down all the same, as Kafka does)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.lifecycle.begin_controlled_shutdown()
        except TimeoutError:
            pass

    async def close(self) -> None:
        await self.lifecycle.close()
        for channel in self._channels:
            channel.close()


class DirectoryAssignmentPublisher:
    """After `BrokerMetadataPublisher` has made the replicas of an image: the
    directories the delta set or changed for this broker's replicas go to
    ReplicaManager, which queues an assignment for each log found elsewhere (Kafka's
    ReplicaManager.applyDelta does it last, from metadata.version 3.7-IV2, the first
    with directory assignment). Event-loop only."""

    name = "DirectoryAssignmentPublisher"

    def __init__(self, node_id: int, replica_manager: ReplicaManager) -> None:
        self._node_id = node_id
        self._replica_manager = replica_manager

    async def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        topics = delta.topics_delta
        version = image.features.metadata_version
        if topics is None or version is None or not version.is_directory_assignment_supported():
            return
        changes = topics.local_changes(self._node_id)
        self._replica_manager.maybe_update_topic_assignments(changes.directory_ids)


class KRaftLogDirEvents:
    """A failed log dir reported in the broker's heartbeats (KIP-858), which carry
    every failed dir until the broker stops: nothing is lost with a session."""

    def __init__(self, lifecycle: BrokerLifecycleManager, dir_ids: Mapping[str, uuid.UUID]) -> None:
        self._lifecycle = lifecycle
        self._dir_ids = dir_ids

    async def publish(self, event: LogDirEvent) -> None:
        directory_id = self._dir_ids.get(event.log_dir)
        if directory_id is not None:
            self._lifecycle.propagate_directory_failure(directory_id)
