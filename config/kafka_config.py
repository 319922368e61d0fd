"""The broker's config registry: every broker key, as Kafka's `KafkaConfig.configDef`
gathers the keys of `ServerConfigs`, `KRaftConfigs`, `SocketServerConfigs`,
`ServerLogConfigs`, ..., `RemoteLogManagerConfig`

Defaults and checks are Kafka 3.9's (the last release with ZooKeeper), except where
Tiercel must differ to run as a single node out of the box (node.id, listeners, log.dirs);
cluster.id is Tiercel's own key (Kafka keeps the id only in meta.properties), and
listeners and log.dirs are LISTs as in Kafka 4. `BROKER_CONFIGS` lists the keys in the
order the example file shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tiercel.config.authorizer_configs import AUTHORIZER_CONFIGS
from tiercel.config.cleaner_configs import CLEANER_CONFIGS
from tiercel.config.config_def import ConfigDef
from tiercel.config.group_coordinator_configs import GROUP_COORDINATOR_CONFIGS
from tiercel.config.kraft_configs import KRAFT_CONFIGS
from tiercel.config.remote_log_manager_configs import REMOTE_LOG_MANAGER_CONFIGS
from tiercel.config.replication_configs import REPLICATION_CONFIGS
from tiercel.config.sasl_configs import SASL_CONFIGS
from tiercel.config.server_configs import SERVER_CONFIGS
from tiercel.config.server_log_configs import SERVER_LOG_CONFIGS
from tiercel.config.socket_server_configs import SOCKET_SERVER_CONFIGS
from tiercel.config.ssl_configs import SSL_CONFIGS
from tiercel.config.transaction_configs import TRANSACTION_CONFIGS

__all__ = ["BROKER_CONFIGS", "broker_synonyms", "canonical_broker_name"]

BROKER_CONFIGS: Final[Mapping[str, ConfigDef]] = {
    d.name: d
    for group in (
        SERVER_CONFIGS,
        KRAFT_CONFIGS,
        SOCKET_SERVER_CONFIGS,
        SSL_CONFIGS,
        SASL_CONFIGS,
        AUTHORIZER_CONFIGS,
        SERVER_LOG_CONFIGS,
        CLEANER_CONFIGS,
        REPLICATION_CONFIGS,
        GROUP_COORDINATOR_CONFIGS,
        TRANSACTION_CONFIGS,
        REMOTE_LOG_MANAGER_CONFIGS,
    )
    for d in group
}

_BROKER_ALIASES: Final = {a: d.name for d in BROKER_CONFIGS.values() for a in d.aliases}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: any member of a group describes the
# whole group. log.flush.scheduler.interval.ms alone is not a member: it is only the
# fallback of log.flush.interval.ms.
_SYNONYM_GROUPS: Final = {
    name: group
    for group in (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    )
    for name in group
} | {"log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")}


def canonical_broker_name(name: str) -> str:
    """The key an alias stands for (broker.id -> node.id); other names unchanged."""
    return _BROKER_ALIASES.get(name, name)


def broker_synonyms(name: str) -> tuple[str, ...]:
    """Broker keys that together decide `name`'s value, highest precedence first."""
    return _SYNONYM_GROUPS.get(name, (name,))
