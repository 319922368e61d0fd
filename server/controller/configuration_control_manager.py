"""Dynamic configs of topics and brokers (Kafka's ``ConfigurationControlManager``):
IncrementalAlterConfigs and the legacy AlterConfigs written as ConfigRecords, one per
key, a null value deleting the key.

Validation is Kafka's ``validateAlterConfig``: the resource's whole resulting config is
checked (a topic's and a broker's by the validators the node gives the controller: for
topics `log_config_validator`, with the node's defaults and tiering rules), then the
resource must exist
(UNKNOWN_TOPIC_OR_PARTITION for a topic that does not). Each resource succeeds or fails
on its own; a failed one writes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.config.config_def import ConfigError, ConfigType
from tiercel.config.topic_configs import TOPIC_CONFIGS
from tiercel.protocol.errors import InvalidConfigError, InvalidRequestError, KafkaError
from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.controller.controller_result import ControllerResult

__all__ = [
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationControlManager",
    "OpType",
]

UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` ids, as ConfigRecord.ResourceType holds them."""

    TOPIC = 2
    BROKER = 4


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs' ConfigOperation (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True, order=True)
class ConfigResource:
    """A topic by name, or a broker by id ("" is the cluster-wide default)."""

    type: ConfigResourceType
    name: str


BrokerConfigValidator = Callable[[Mapping[str, str]], None]
# A topic's whole new config and its existing one (turning tiering off is judged by both).
TopicConfigValidator = Callable[[Mapping[str, str], Mapping[str, str]], None]
ResourceExists = Callable[[ConfigResource], None]


class ConfigurationControlManager:
    """Event-loop only. ``validate_broker_configs`` and ``validate_topic_configs`` raise
    ConfigError for a broker or topic resource's config they refuse;
    ``existence_checker`` raises the KafkaError for a resource that does not exist."""

    def __init__(
        self,
        validate_broker_configs: BrokerConfigValidator,
        validate_topic_configs: TopicConfigValidator,
        default_unclean_leader_election: bool,
    ) -> None:
        self._validate_broker_configs = validate_broker_configs
        self._validate_topic_configs = validate_topic_configs
        self._default_unclean = default_unclean_leader_election
        self.existence_checker: ResourceExists = lambda resource: None
        self._configs: dict[ConfigResource, dict[str, str]] = {}

    def configs(self, resource: ConfigResource) -> Mapping[str, str]:
        return self._configs.get(resource, {})

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Mapping[str, tuple[OpType, str | None]]],
        newly_created: bool = False,
    ) -> ControllerResult[dict[ConfigResource, KafkaError | None]]:
        """Kafka's ``incrementalAlterConfigs``: per resource, None or its error."""
        records: list[ApiMessageAndVersion] = []
        results: dict[ConfigResource, KafkaError | None] = {}
        for resource, ops in changes.items():
            try:
                new_records = self._incremental_records(resource, ops)
                self._validate(
                    resource, new_records, replace_all=False, newly_created=newly_created
                )
            except KafkaError as e:
                results[resource] = e
                continue
            records += new_records
            results[resource] = None
        return ControllerResult(records, results)

    def _incremental_records(
        self, resource: ConfigResource, ops: Mapping[str, tuple[OpType, str | None]]
    ) -> list[ApiMessageAndVersion]:
        current = self._configs.get(resource, {})
        records = []
        for key, (op, value) in ops.items():
            old = current.get(key)
            new: str | None
            if op == OpType.SET:
                new = value
            elif op == OpType.DELETE:
                new = None
            else:
                new = _append_or_subtract(resource, key, op, old, value)
            # Broker configs are written even unchanged, so brokers reload (KAFKA-14136).
            if new != old or resource.type == ConfigResourceType.BROKER:
                records.append(_config_record(resource, key, new))
        return records

    def legacy_alter_configs(
        self, new_configs: Mapping[ConfigResource, Mapping[str, str | None]]
    ) -> ControllerResult[dict[ConfigResource, KafkaError | None]]:
        """Kafka's ``legacyAlterConfigs``: the given keys become the resource's whole
        dynamic config; keys not given are deleted."""
        records: list[ApiMessageAndVersion] = []
        results: dict[ConfigResource, KafkaError | None] = {}
        for resource, wanted in new_configs.items():
            current = self._configs.get(resource, {})
            new_records = [
                _config_record(resource, k, v)
                for k, v in wanted.items()
                if current.get(k) != v or resource.type == ConfigResourceType.BROKER
            ]
            new_records += [_config_record(resource, k, None) for k in current if k not in wanted]
            try:
                self._validate(resource, new_records, replace_all=True, newly_created=False)
            except KafkaError as e:
                results[resource] = e
                continue
            records += new_records
            results[resource] = None
        return ControllerResult(records, results)

    def _validate(
        self,
        resource: ConfigResource,
        records: list[ApiMessageAndVersion],
        replace_all: bool,
        newly_created: bool,
    ) -> None:
        existing = self._configs.get(resource, {})
        merged = {} if replace_all else dict(existing)
        for item in records:
            record = item.message
            assert isinstance(record, ConfigRecord)
            if record.value is None:
                merged.pop(record.name, None)
            else:
                merged[record.name] = record.value
        try:
            if resource.type == ConfigResourceType.TOPIC:
                self._validate_topic_configs(merged, existing)
            else:
                _check_broker_name(resource.name)
                self._validate_broker_configs(merged)
        except ConfigError as e:
            raise InvalidConfigError(e.message) from None
        if not newly_created:
            self.existence_checker(resource)

    def unclean_leader_election_enabled_for_topic(self, topic: str) -> bool:
        """The topic's override, else the cluster-wide broker default, else the static
        broker config (Kafka's ``uncleanLeaderElectionEnabledForTopic``)."""
        for resource in (
            ConfigResource(ConfigResourceType.TOPIC, topic),
            ConfigResource(ConfigResourceType.BROKER, ""),
        ):
            value = self._configs.get(resource, {}).get(UNCLEAN_LEADER_ELECTION_ENABLE)
            if value is not None:
                return value.lower() == "true"
        return self._default_unclean

    def delete_topic_configs(self, topic: str) -> None:
        """A removed topic's configs go with it (Kafka's ``deleteTopicConfigs``, called
        when RemoveTopicRecord is replayed)."""
        self._configs.pop(ConfigResource(ConfigResourceType.TOPIC, topic), None)

    def replay(self, record: ConfigRecord) -> None:
        resource = ConfigResource(ConfigResourceType(record.resource_type), record.resource_name)
        configs = self._configs.setdefault(resource, {})
        if record.value is None:
            configs.pop(record.name, None)
            if not configs:
                del self._configs[resource]
        else:
            configs[record.name] = record.value

    def records(self) -> Iterator[ApiMessageAndVersion]:
        for resource in sorted(self._configs):
            for key, value in sorted(self._configs[resource].items()):
                yield _config_record(resource, key, value)


def _config_record(resource: ConfigResource, key: str, value: str | None) -> ApiMessageAndVersion:
    record = ConfigRecord(
        resource_type=int(resource.type), resource_name=resource.name, name=key, value=value
    )
    return ApiMessageAndVersion(record, 0)


def _append_or_subtract(
    resource: ConfigResource, key: str, op: OpType, old: str | None, value: str | None
) -> str:
    defn = TOPIC_CONFIGS.get(key) if resource.type == ConfigResourceType.TOPIC else None
    if defn is None or defn.type != ConfigType.LIST:
        raise InvalidConfigError(f"Can't {op.name} to key {key} because its type is not LIST.")
    parts = [p for p in (old or "").split(",") if p]
    for item in (value or "").split(","):
        if op == OpType.APPEND and item not in parts:
            parts.append(item)
        elif op == OpType.SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


def _check_broker_name(name: str) -> None:
    # Kafka's ControllerConfigurationValidator: "" or a broker id.
    if name and not name.lstrip("-").isdigit():
        raise InvalidRequestError(f"Invalid broker name {name}")
