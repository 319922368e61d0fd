"""All of the controller's state machines together: where a metadata record is replayed
(Kafka's ``QuorumController.replay``) and how the whole state is written back as records
for a snapshot (the controller's side of Kafka's ``MetadataImage.write``/``ImageWriter``).

Replaying ``records()`` into fresh managers rebuilds the same state; the quorum controller
relies on that to revert to its committed state and to write snapshots.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from tiercel.protocol.errors import UnknownTopicOrPartitionError
from tiercel.protocol.metadata.broker_records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord, ProducerIdsRecord
from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.protocol.metadata.log_control_records import NoOpRecord
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.controller.acl_control_manager import AclControlManager
from tiercel.server.controller.cluster_control_manager import ClusterControlManager
from tiercel.server.controller.configuration_control_manager import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
)
from tiercel.server.controller.controller_exceptions import BrokerIdNotRegisteredError
from tiercel.server.controller.feature_control_manager import FeatureControlManager
from tiercel.server.controller.partition_commands import PartitionCommands
from tiercel.server.controller.producer_id_control_manager import ProducerIdControlManager
from tiercel.server.controller.quorum_controller_config import QuorumControllerConfig
from tiercel.server.controller.replication_control_manager import ReplicationControlManager
from tiercel.server.controller.scram_control_manager import ScramControlManager
from tiercel.server.controller.topic_commands import TopicCommands, TopicDefaults
from tiercel.server.raft.timer import Time

__all__ = ["ControlManagers"]


class ControlManagers:
    """Event-loop only."""

    def __init__(self, config: QuorumControllerConfig, time: Time, rng: random.Random) -> None:
        self.config = config
        self.cluster = ClusterControlManager(config.cluster_id, time, config.session_timeout_ms)
        self.feature = FeatureControlManager(
            self.cluster.brokers_supported, config.supported_features
        )
        self.cluster.set_feature_control(self.feature)
        self.configuration = ConfigurationControlManager(
            config.validate_broker_configs,
            config.validate_topic_configs,
            config.unclean_leader_election_enable,
        )
        self.configuration.existence_checker = self._check_config_resource_exists
        self.replication = ReplicationControlManager(self.cluster, self.feature, self.configuration)
        self.cluster.broker_unclean_shutdown_handler = (
            self.replication.handle_broker_unclean_shutdown
        )
        self.topics = TopicCommands(
            self.replication,
            TopicDefaults(
                config.default_num_partitions,
                config.default_replication_factor,
                config.delete_topic_enable,
                config.max_partitions,
            ),
            rng,
        )
        self.partitions = PartitionCommands(self.replication)
        self.producer_ids = ProducerIdControlManager(self.cluster)
        self.scram = ScramControlManager()
        self.acls = AclControlManager(rng)
        self._replayers: dict[type[MetadataRecord], Callable[[Any, int], None]] = {
            FeatureLevelRecord: lambda r, _: self.feature.replay(r),
            RegisterBrokerRecord: self.cluster.replay_register,
            RegisterControllerRecord: lambda r, _: self.cluster.replay_register_controller(r),
            UnregisterBrokerRecord: lambda r, _: self.cluster.replay_unregister(r),
            FenceBrokerRecord: lambda r, _: self.cluster.replay_fence(r),
            UnfenceBrokerRecord: lambda r, _: self.cluster.replay_unfence(r),
            BrokerRegistrationChangeRecord: lambda r, _: self.cluster.replay_change(r),
            TopicRecord: lambda r, _: self.replication.replay_topic(r),
            PartitionRecord: lambda r, _: self.replication.replay_partition(r),
            PartitionChangeRecord: lambda r, _: self.replication.replay_partition_change(r),
            RemoveTopicRecord: lambda r, _: self.replication.replay_remove_topic(r),
            ConfigRecord: lambda r, _: self.configuration.replay(r),
            ProducerIdsRecord: lambda r, _: self.producer_ids.replay(r),
            NoOpRecord: lambda r, _: None,
            UserScramCredentialRecord: lambda r, _: self.scram.replay(r),
            RemoveUserScramCredentialRecord: lambda r, _: self.scram.replay_remove(r),
            AccessControlEntryRecord: lambda r, _: self.acls.replay(r),
            RemoveAccessControlEntryRecord: lambda r, _: self.acls.replay_remove(r),
        }

    def _check_config_resource_exists(self, resource: ConfigResource) -> None:
        # Kafka's QuorumController.ConfigResourceExistenceChecker.
        if resource.type == ConfigResourceType.TOPIC:
            if resource.name not in self.replication.topics_by_name:
                raise UnknownTopicOrPartitionError(f"The topic '{resource.name}' does not exist.")
        elif resource.name:
            node_id = int(resource.name)
            registered = self.cluster.registration(node_id) is not None
            if not registered and node_id not in self.config.quorum_node_ids:
                raise BrokerIdNotRegisteredError(f"No node with id {node_id} found.")

    def replay(self, record: MetadataRecord, offset: int) -> None:
        """Apply one record written at ``offset``. A record type no manager handles yet
        (quotas, delegation tokens) is refused:
        skipping it would silently lose state."""
        replayer = self._replayers.get(type(record))
        if replayer is None:
            raise RuntimeError(f"The controller cannot replay {type(record).__name__} records")
        replayer(record, offset)

    def replay_all(self, records: Iterable[ApiMessageAndVersion], offset: int) -> None:
        for record in records:
            self.replay(record.message, offset)

    def records(self) -> list[ApiMessageAndVersion]:
        """The whole state as records, in replayable order."""
        return [
            *self.feature.records(),
            *self.cluster.records(),
            *self.replication.records(),
            *self.configuration.records(),
            *self.producer_ids.records(),
            *self.scram.records(),
            *self.acls.records(),
        ]
