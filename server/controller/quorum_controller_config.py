"""The settings of the quorum controller, taken from the node's config by whoever builds
it (Kafka's ``QuorumController.Builder`` and ``QuorumControllerConfig`` fields)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tiercel.config.log_config import validate_topic_overrides
from tiercel.server.controller.feature_control_manager import (
    VersionRange,
    default_feature_map,
)

__all__ = ["QuorumControllerConfig"]


def _accept_any(configs: Mapping[str, str]) -> None:
    """Broker configs are accepted as given unless the node supplies a validator."""


def _topic_keys_only(configs: Mapping[str, str], existing: Mapping[str, str]) -> None:
    """Topic configs are checked key by key unless the node supplies a validator that
    knows its broker defaults too."""
    validate_topic_overrides(configs)


@dataclass(frozen=True, slots=True)
class QuorumControllerConfig:
    """``validate_broker_configs`` raises ConfigError for a BROKER resource's dynamic
    config the node refuses, ``validate_topic_configs`` for a TOPIC's new config given
    its existing one (Kafka's ``ControllerConfigurationValidator``, whose topic check is
    ``LogConfig.validate`` with the controller's own defaults and
    remote.log.storage.system.enable); the others are Kafka's settings of the same
    names."""

    node_id: int
    cluster_id: str
    quorum_node_ids: frozenset[int] = frozenset()
    # broker.session.timeout.ms
    session_timeout_ms: int = 9000
    # num.partitions, default.replication.factor, delete.topic.enable, max.partitions
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True
    max_partitions: int = 10000
    # unclean.leader.election.enable (the broker-wide default)
    unclean_leader_election_enable: bool = False
    # auto.leader.rebalance.enable and leader.imbalance.check.interval.seconds: preferred
    # elections this often (None: never)
    leader_imbalance_check_interval_ms: int | None = 300_000
    # Kafka's QuorumController uncleanLeaderElectionCheckIntervalMs
    unclean_leader_election_check_interval_ms: int = 300_000
    # Kafka's maxElectionsPerImbalance: elections per run of either task
    max_elections_per_imbalance: int = 1000
    # metadata.max.idle.interval.ms: a NoOpRecord this often on the active controller
    max_idle_interval_ms: int = 500
    # metadata.log.max.record.bytes.between.snapshots
    snapshot_max_new_record_bytes: int = 20 * 1024 * 1024
    # metadata.log.max.snapshot.interval.ms
    snapshot_max_interval_ms: int = 60 * 60 * 1000
    supported_features: Mapping[str, VersionRange] = field(default_factory=default_feature_map)
    validate_broker_configs: Callable[[Mapping[str, str]], None] = _accept_any
    validate_topic_configs: Callable[[Mapping[str, str], Mapping[str, str]], None] = (
        _topic_keys_only
    )
