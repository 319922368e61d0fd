"""BrokerConfig: the broker's validated configuration, and Listener, one address it serves.

Raw values come from the YAML file and `--override` strings, keyed by Kafka's property
names; every key and value is checked once, at construction, so that a typo stops the
broker at startup with a message that names the key, rather than being ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Generic, TypeVar, overload

from tiercel.config.config_def import ConfigError
from tiercel.config.config_values import closest, parse_value, render_value
from tiercel.config.kafka_config import BROKER_CONFIGS, canonical_broker_name
from tiercel.config.kraft_validation import (
    QuorumVoter,
    check_kraft,
    parse_bootstrap_servers,
    parse_voters,
)
from tiercel.config.oauthbearer_config import OAUTHBEARER
from tiercel.config.remote_log_manager_configs import local_retention_problem
from tiercel.config.remote_storage_props import RemoteStorageProps, split_remote_storage_props
from tiercel.config.sasl_config import SCRAM_MECHANISMS, SaslConfig, SaslLogin, sasl_config
from tiercel.config.ssl_config import (
    LISTENER_PREFIX,
    SslConfig,
    split_listener_props,
    ssl_config,
)
from tiercel.config.topic_configs import TOPIC_CONFIGS, resolve_topic_default

__all__ = ["BrokerConfig", "ConfigError", "Listener"]

T = TypeVar("T")

# Kafka's listener syntax: NAME://host:port, with IPv6 hosts in brackets.
_LISTENER: Final = re.compile(
    r"([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.%A-Za-z]+\]|[0-9A-Za-z\-._]*):([0-9]+)"
)
# Kafka's SecurityProtocol values, all served.
_SUPPORTED_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS_PROTOCOLS: Final = ("SSL", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener address. `host` is "" for all interfaces; IPv6 hosts have no brackets.

    `name` is upper-case, as Kafka normalises listener names. Immutable; any thread.
    """

    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        """Parse NAME://host:port; ValueError says what is wrong."""
        match = _LISTENER.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not of the form NAME://host:port")
        name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
        if port > 65535:
            raise ValueError(f"port {port} of {text!r} is above 65535")
        return cls(name, host.strip("[]"), port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


class _Key(Generic[T]):
    """A typed read-only attribute of BrokerConfig backed by one config key."""

    def __init__(self, name: str, kind: type[T]) -> None:
        self.name = name
        self.kind = kind

    @overload
    def __get__(self, obj: None, owner: type[BrokerConfig]) -> _Key[T]: ...
    @overload
    def __get__(self, obj: BrokerConfig, owner: type[BrokerConfig]) -> T: ...
    def __get__(self, obj: BrokerConfig | None, owner: type[BrokerConfig]) -> _Key[T] | T:
        if obj is None:
            return self
        value = obj.get(self.name)
        assert isinstance(value, self.kind), (self.name, value)
        return value


class _OptionalKey(Generic[T]):
    """Like _Key, for keys whose default is null."""

    def __init__(self, name: str, kind: type[T]) -> None:
        self.name = name
        self.kind = kind

    @overload
    def __get__(self, obj: None, owner: type[BrokerConfig]) -> _OptionalKey[T]: ...
    @overload
    def __get__(self, obj: BrokerConfig, owner: type[BrokerConfig]) -> T | None: ...
    def __get__(
        self, obj: BrokerConfig | None, owner: type[BrokerConfig]
    ) -> _OptionalKey[T] | T | None:
        if obj is None:
            return self
        value = obj.get(self.name)
        assert value is None or isinstance(value, self.kind), (self.name, value)
        return value


class BrokerConfig:
    """The broker's configuration: every key of BROKER_CONFIGS with a typed value.

    Invariants: every value has passed its key's type and validator; the topic defaults
    the broker keys imply (segment.ms from log.roll.hours, ...) pass the topic keys'
    validators; `explicit` holds the canonical names of the keys the user set (reported
    as STATIC_BROKER_CONFIG by DescribeConfigs); `advertised_listeners` is `listeners`
    unless advertised.listeners is set, and holds no wildcard address.

    Immutable after construction; any thread.
    """

    __slots__ = (
        "_remote_storage_props",
        "_sasl_configs",
        "_ssl_configs",
        "_values",
        "advertised_listeners",
        "explicit",
        "listeners",
        "security_protocol_map",
    )

    def __init__(self, raw: Mapping[str, object]) -> None:
        unprefixed, listener_overrides = split_listener_props(raw)
        broker_keys, self._remote_storage_props = split_remote_storage_props(unprefixed)
        given = _parse_given(broker_keys)
        self.explicit: frozenset[str] = frozenset(given)
        self._values: dict[str, object] = {
            name: given.get(name, defn.default) for name, defn in BROKER_CONFIGS.items()
        }
        self.security_protocol_map = _security_protocol_map(self._values, self.explicit)
        self.listeners: tuple[Listener, ...] = _listeners(
            "listeners", self._values, self.security_protocol_map
        )
        advertised = self._values["advertised.listeners"]
        self.advertised_listeners: tuple[Listener, ...] = (
            self.listeners
            if advertised is None
            else _listeners("advertised.listeners", self._values, self.security_protocol_map)
        )
        check_kraft(self._values, [e.name for e in self.listeners], self.security_protocol_map)
        _check_advertised(self.advertised_listeners)
        _check_inter_broker_listener(
            self._values, self.explicit, self.advertised_listeners, self.security_protocol_map
        )
        self._ssl_configs = _ssl_configs(
            self._values, self.listeners, self.security_protocol_map, listener_overrides
        )
        self._sasl_configs = {
            e.name: sasl_config(e.name, self._values, listener_overrides.get(e.name, {}))
            for e in self.listeners
            if self.security_protocol_map[e.name] in _SASL_PROTOCOLS
        }
        self._check_sasl_between_nodes()
        self._check_scram_needs_kraft()
        _check_failed_authentication_delay(self._values)
        _check_topic_defaults(self._values)
        _check_local_retention(self._values)
        _check_partition_limit(self._values)

    def get(self, name: str) -> object:
        """The typed value of a broker key (or alias); None for an unset nullable key."""
        canonical = canonical_broker_name(name)
        if canonical not in self._values:
            raise _unknown_key(name)
        return self._values[canonical]

    def __repr__(self) -> str:
        settings = ", ".join(
            f"{name}={render_value(BROKER_CONFIGS[name].type, self._values[name])}"
            for name in sorted(self.explicit)
        )
        return f"BrokerConfig({settings})"

    # Typed views of the keys the broker reads.
    node_id = _Key("node.id", int)
    cluster_id = _OptionalKey("cluster.id", str)
    socket_send_buffer_bytes = _Key("socket.send.buffer.bytes", int)
    socket_receive_buffer_bytes = _Key("socket.receive.buffer.bytes", int)
    socket_request_max_bytes = _Key("socket.request.max.bytes", int)
    queued_max_requests = _Key("queued.max.requests", int)
    connections_max_idle_ms = _Key("connections.max.idle.ms", int)
    sasl_server_max_receive_size = _Key("sasl.server.max.receive.size", int)
    connection_failed_authentication_delay_ms = _Key(
        "connection.failed.authentication.delay.ms", int
    )
    message_max_bytes = _Key("message.max.bytes", int)
    num_partitions = _Key("num.partitions", int)
    max_partitions = _Key("max.partitions", int)
    default_replication_factor = _Key("default.replication.factor", int)
    auto_create_topics_enable = _Key("auto.create.topics.enable", bool)
    delete_topic_enable = _Key("delete.topic.enable", bool)
    num_recovery_threads_per_data_dir = _Key("num.recovery.threads.per.data.dir", int)
    log_retention_check_interval_ms = _Key("log.retention.check.interval.ms", int)
    log_flush_scheduler_interval_ms = _Key("log.flush.scheduler.interval.ms", int)
    log_flush_offset_checkpoint_interval_ms = _Key("log.flush.offset.checkpoint.interval.ms", int)
    log_flush_start_offset_checkpoint_interval_ms = _Key(
        "log.flush.start.offset.checkpoint.interval.ms", int
    )
    replica_high_watermark_checkpoint_interval_ms = _Key(
        "replica.high.watermark.checkpoint.interval.ms", int
    )
    log_cleaner_enable = _Key("log.cleaner.enable", bool)
    log_cleaner_threads = _Key("log.cleaner.threads", int)
    log_cleaner_backoff_ms = _Key("log.cleaner.backoff.ms", int)
    log_cleaner_dedupe_buffer_size = _Key("log.cleaner.dedupe.buffer.size", int)
    offsets_topic_num_partitions = _Key("offsets.topic.num.partitions", int)
    offsets_topic_replication_factor = _Key("offsets.topic.replication.factor", int)
    offsets_topic_segment_bytes = _Key("offsets.topic.segment.bytes", int)
    offsets_topic_compression_codec = _Key("offsets.topic.compression.codec", int)
    offsets_load_buffer_size = _Key("offsets.load.buffer.size", int)
    offsets_commit_timeout_ms = _Key("offsets.commit.timeout.ms", int)
    offset_metadata_max_bytes = _Key("offset.metadata.max.bytes", int)
    offsets_retention_minutes = _Key("offsets.retention.minutes", int)
    offsets_retention_check_interval_ms = _Key("offsets.retention.check.interval.ms", int)
    group_initial_rebalance_delay_ms = _Key("group.initial.rebalance.delay.ms", int)
    group_min_session_timeout_ms = _Key("group.min.session.timeout.ms", int)
    group_max_session_timeout_ms = _Key("group.max.session.timeout.ms", int)
    group_max_size = _Key("group.max.size", int)
    group_consumer_heartbeat_interval_ms = _Key("group.consumer.heartbeat.interval.ms", int)
    group_consumer_session_timeout_ms = _Key("group.consumer.session.timeout.ms", int)
    group_consumer_max_size = _Key("group.consumer.max.size", int)
    producer_id_expiration_ms = _Key("producer.id.expiration.ms", int)
    transaction_partition_verification_enable = _Key(
        "transaction.partition.verification.enable", bool
    )
    transactional_id_expiration_ms = _Key("transactional.id.expiration.ms", int)
    transaction_max_timeout_ms = _Key("transaction.max.timeout.ms", int)
    transaction_state_log_num_partitions = _Key("transaction.state.log.num.partitions", int)
    transaction_state_log_replication_factor = _Key("transaction.state.log.replication.factor", int)
    transaction_state_log_min_isr = _Key("transaction.state.log.min.isr", int)
    transaction_state_log_segment_bytes = _Key("transaction.state.log.segment.bytes", int)
    transaction_state_log_load_buffer_size = _Key("transaction.state.log.load.buffer.size", int)
    transaction_abort_timed_out_transaction_cleanup_interval_ms = _Key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", int
    )
    transaction_remove_expired_transaction_cleanup_interval_ms = _Key(
        "transaction.remove.expired.transaction.cleanup.interval.ms", int
    )
    producer_id_expiration_check_interval_ms = _Key("producer.id.expiration.check.interval.ms", int)
    replica_lag_time_max_ms = _Key("replica.lag.time.max.ms", int)
    replica_fetch_max_bytes = _Key("replica.fetch.max.bytes", int)
    replica_fetch_wait_max_ms = _Key("replica.fetch.wait.max.ms", int)
    replica_fetch_min_bytes = _Key("replica.fetch.min.bytes", int)
    replica_fetch_response_max_bytes = _Key("replica.fetch.response.max.bytes", int)
    replica_fetch_backoff_ms = _Key("replica.fetch.backoff.ms", int)
    replica_socket_timeout_ms = _Key("replica.socket.timeout.ms", int)
    replica_socket_receive_buffer_bytes = _Key("replica.socket.receive.buffer.bytes", int)
    controlled_shutdown_enable = _Key("controlled.shutdown.enable", bool)
    auto_leader_rebalance_enable = _Key("auto.leader.rebalance.enable", bool)
    leader_imbalance_check_interval_seconds = _Key("leader.imbalance.check.interval.seconds", int)
    leader_imbalance_per_broker_percentage = _Key("leader.imbalance.per.broker.percentage", int)
    unclean_leader_election_enable = _Key("unclean.leader.election.enable", bool)

    remote_log_storage_system_enable = _Key("remote.log.storage.system.enable", bool)

    controller_quorum_election_timeout_ms = _Key("controller.quorum.election.timeout.ms", int)
    controller_quorum_fetch_timeout_ms = _Key("controller.quorum.fetch.timeout.ms", int)
    controller_quorum_election_backoff_max_ms = _Key(
        "controller.quorum.election.backoff.max.ms", int
    )
    controller_quorum_append_linger_ms = _Key("controller.quorum.append.linger.ms", int)
    controller_quorum_request_timeout_ms = _Key("controller.quorum.request.timeout.ms", int)
    controller_quorum_retry_backoff_ms = _Key("controller.quorum.retry.backoff.ms", int)
    metadata_log_segment_bytes = _Key("metadata.log.segment.bytes", int)
    metadata_log_segment_min_bytes = _Key("metadata.log.segment.min.bytes", int)
    metadata_log_segment_ms = _Key("metadata.log.segment.ms", int)
    metadata_max_retention_bytes = _Key("metadata.max.retention.bytes", int)
    metadata_max_retention_ms = _Key("metadata.max.retention.ms", int)
    metadata_log_max_record_bytes_between_snapshots = _Key(
        "metadata.log.max.record.bytes.between.snapshots", int
    )
    metadata_log_max_snapshot_interval_ms = _Key("metadata.log.max.snapshot.interval.ms", int)
    metadata_max_idle_interval_ms = _Key("metadata.max.idle.interval.ms", int)
    unclean_leader_election_interval_ms = _Key("unclean.leader.election.interval.ms", int)
    broker_heartbeat_interval_ms = _Key("broker.heartbeat.interval.ms", int)
    broker_session_timeout_ms = _Key("broker.session.timeout.ms", int)
    initial_broker_registration_timeout_ms = _Key("initial.broker.registration.timeout.ms", int)

    @property
    def process_roles(self) -> frozenset[str]:
        """The KRaft roles of this node (empty: not a KRaft node)."""
        roles = self._values["process.roles"]
        assert isinstance(roles, tuple)
        return frozenset(roles)

    @property
    def kraft_mode(self) -> bool:
        return bool(self.process_roles)

    @property
    def controller_listener_names(self) -> tuple[str, ...]:
        """controller.listener.names, upper-case as listener names are."""
        names = self._values["controller.listener.names"]
        assert isinstance(names, tuple)
        return tuple(str(name).upper() for name in names)

    @property
    def quorum_voters(self) -> tuple[QuorumVoter, ...]:
        """controller.quorum.voters, parsed (checked at construction)."""
        entries = self._values["controller.quorum.voters"]
        assert isinstance(entries, tuple)
        return parse_voters(entries)

    @property
    def quorum_bootstrap_servers(self) -> tuple[tuple[str, int], ...]:
        """controller.quorum.bootstrap.servers as (host, port), parsed (checked at
        construction)."""
        entries = self._values["controller.quorum.bootstrap.servers"]
        assert isinstance(entries, tuple)
        return parse_bootstrap_servers(entries)

    @property
    def metadata_log_dir(self) -> str:
        """metadata.log.dir, or the first of log.dirs when it is unset (Kafka's
        KafkaConfig.metadataLogDir)."""
        value = self._values["metadata.log.dir"]
        if value is None:
            return self.log_dirs[0]
        assert isinstance(value, str)
        return value

    @property
    def remote_storage_props(self) -> RemoteStorageProps:
        """The keys under the RSM and RLMM prefixes, prefix removed, by plugin."""
        return self._remote_storage_props

    def remote_storage_manager_props(self) -> Mapping[str, str]:
        """What the RemoteStorageManager is configured with: the rsm.config. keys, prefix
        removed (Kafka's RemoteLogManagerConfig.remoteStorageManagerProps)."""
        return self._remote_storage_props.rsm

    def remote_log_metadata_manager_props(self) -> Mapping[str, str]:
        """The rlmm.config. keys, prefix removed (Kafka's remoteLogMetadataManagerProps);
        checked against TopicBasedRemoteLogMetadataManagerConfig at construction."""
        return self._remote_storage_props.rlmm

    @property
    def log_dirs(self) -> list[str]:
        dirs = self._values["log.dirs"]
        assert isinstance(dirs, tuple)
        return list(dirs)

    @property
    def group_consumer_assignors(self) -> tuple[str, ...]:
        assignors = self._values["group.consumer.assignors"]
        assert isinstance(assignors, tuple)
        return assignors

    @property
    def ssl_configs(self) -> Mapping[str, SslConfig]:
        """The SslConfig of every SSL listener this node serves or connects to, by name."""
        return MappingProxyType(self._ssl_configs)

    def ssl_config(self, listener_name: str) -> SslConfig | None:
        """The TLS settings of an SSL listener (None for a PLAINTEXT one). A listener this
        node does not serve (another node's controller listener) gets the broker-wide
        ssl.* keys with its own prefixed ones over them, as Kafka's client channels."""
        return self._ssl_configs.get(listener_name)

    @property
    def sasl_configs(self) -> Mapping[str, SaslConfig]:
        """The SaslConfig of every SASL listener this node serves, by name."""
        return MappingProxyType(self._sasl_configs)

    def sasl_config(self, listener_name: str) -> SaslConfig | None:
        """The SASL settings of a SASL_PLAINTEXT or SASL_SSL listener this node serves
        (None for any other)."""
        return self._sasl_configs.get(listener_name)

    def inter_broker_sasl_login(self) -> SaslLogin | None:
        """What this broker logs in with on a SASL inter-broker listener: the mechanism
        sasl.mechanism.inter.broker.protocol names, with the username and password of
        that mechanism's JAAS config on the listener; None on a PLAINTEXT or SSL one."""
        config = self._sasl_configs.get(self.inter_broker_listener_name)
        if config is None:
            return None
        return config.logins[str(self._values["sasl.mechanism.inter.broker.protocol"])]

    def _check_sasl_between_nodes(self) -> None:
        """Controllers do not speak SASL yet, so their listeners may not be SASL ones; a
        SASL inter-broker listener needs a mechanism brokers log in with (KafkaConfig's
        check that sasl.enabled.mechanisms includes it) and the broker's own login."""
        for name in self.controller_listener_names:
            protocol = self.security_protocol_map.get(name)
            if protocol in _SASL_PROTOCOLS:
                raise ConfigError(
                    f"Controller listener {name} is {protocol}: SASL to controllers is not "
                    "supported yet; map controller listeners to PLAINTEXT or SSL",
                    "controller.listener.names",
                )
        config = self._sasl_configs.get(self.inter_broker_listener_name)
        if config is None:
            return
        mechanism = self._values["sasl.mechanism.inter.broker.protocol"]
        key = "sasl.mechanism.inter.broker.protocol"
        if mechanism not in config.enabled_mechanisms:
            raise ConfigError(
                f"{key} must be included in sasl.enabled.mechanisms when SASL is used for "
                f"inter-broker communication (listener {config.listener_name}: {mechanism} "
                "is not; set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)",
                key,
            )
        if mechanism not in config.logins:
            wanted = (
                'unsecuredLoginStringClaim_sub="..."'
                if mechanism == OAUTHBEARER
                else 'username="..." password="..."'
            )
            raise ConfigError(
                f"The JAAS config of inter-broker listener {config.listener_name} has no "
                f"{wanted} for the broker's own {mechanism} logins",
                f"{LISTENER_PREFIX}{config.listener_name.lower()}."
                f"{str(mechanism).lower()}.sasl.jaas.config",
            )

    def _check_scram_needs_kraft(self) -> None:
        """SCRAM credentials live only in the KRaft metadata log (as in Kafka 4): a node
        without process.roles has none to check a login against."""
        if self.kraft_mode:
            return
        for config in self._sasl_configs.values():
            scram = [m for m in config.enabled_mechanisms if m in SCRAM_MECHANISMS]
            if scram:
                raise ConfigError(
                    f"SASL listener {config.listener_name}: {scram[0]} needs the KRaft "
                    "metadata log, where SCRAM credentials are stored; run this node as a "
                    "KRaft node (process.roles=broker,controller after tiercel storage "
                    "format, --add-scram to create the first users)",
                    "process.roles",
                )

    @property
    def inter_broker_listener_name(self) -> str:
        """inter.broker.listener.name; else the listener named after an explicitly set
        security.inter.broker.protocol (Kafka's ListenerName.forSecurityProtocol); else
        the first listener's name (the first that is not a controller listener, in KRaft
        mode)."""
        value = self._values["inter.broker.listener.name"]
        if value is None and "security.inter.broker.protocol" in self.explicit:
            protocol = self._values["security.inter.broker.protocol"]
            assert isinstance(protocol, str)
            return protocol
        if value is None:
            controllers = self.controller_listener_names
            return next(
                (e.name for e in self.listeners if e.name not in controllers),
                self.listeners[0].name,
            )
        assert isinstance(value, str)
        return value.upper()


# Kafka 4.0 removed ZooKeeper mode and its keys, and Tiercel with it: a cluster is a
# KRaft cluster. What each removed key's user should set instead.
_REMOVED_WITH_ZOOKEEPER: Final = {
    **dict.fromkeys(
        ("zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms"),
        "a cluster runs KRaft (process.roles, controller.quorum.voters, "
        "controller.listener.names; README: Running a cluster)",
    ),
    **dict.fromkeys(
        ("controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms"),
        "a KRaft broker's controlled shutdown goes through its heartbeats and waits at most "
        "broker.session.timeout.ms",
    ),
}


def _unknown_key(key: str) -> ConfigError:
    instead = _REMOVED_WITH_ZOOKEEPER.get(key)
    if instead is not None:
        return ConfigError(f"{key}: ZooKeeper mode is gone, as in Kafka 4.0; {instead}", key)
    names = [*BROKER_CONFIGS, *(a for d in BROKER_CONFIGS.values() for a in d.aliases)]
    suggestion = closest(key, names)
    hint = f"; did you mean {suggestion}?" if suggestion else ""
    return ConfigError(f"Unknown broker configuration {key}{hint}", key)


def _parse_given(raw: Mapping[str, object]) -> dict[str, object]:
    """Typed values of the keys the user set, by canonical name."""
    given: dict[str, object] = {}
    spelled: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"Configuration keys must be strings, not {key!r}")
        name = canonical_broker_name(key)
        defn = BROKER_CONFIGS.get(name)
        if defn is None:
            raise _unknown_key(key)
        if value is None:
            # A YAML null leaves a key unset, which only a key without default can be.
            if defn.default is None:
                continue
            raise ConfigError(f"Configuration {key} needs a value; it cannot be null", key)
        parsed = parse_value(defn, value, key)
        if name in given and given[name] != parsed:
            raise ConfigError(
                f"{spelled[name]} and {key} are two names for one setting "
                f"but are given different values",
                key,
            )
        given[name] = parsed
        spelled[name] = key
    return given


def _security_protocol_map(
    values: Mapping[str, object], explicit: frozenset[str]
) -> dict[str, str]:
    """listener.security.protocol.map as {listener name: protocol}, both upper-case. A KRaft
    node that leaves the map at its default gets its controller listeners mapped to
    PLAINTEXT (Kafka's KafkaConfig.effectiveListenerSecurityProtocolMap)."""
    key = "listener.security.protocol.map"
    texts = values[key]
    assert isinstance(texts, tuple)
    mapping: dict[str, str] = {}
    for text in texts:
        name, colon, protocol = str(text).partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not colon or not name or not protocol:
            raise ConfigError(
                f"Invalid value {text!r} for configuration {key}: expected NAME:PROTOCOL", key
            )
        if name in mapping:
            raise ConfigError(f"Configuration {key} maps listener {name} twice", key)
        mapping[name] = protocol
    if key not in explicit and values["process.roles"]:
        controllers = values["controller.listener.names"]
        assert isinstance(controllers, tuple)
        for name in controllers:
            mapping.setdefault(str(name).upper(), "PLAINTEXT")
    return mapping


def _listeners(
    key: str, values: Mapping[str, object], protocols: Mapping[str, str]
) -> tuple[Listener, ...]:
    texts = values[key]
    assert isinstance(texts, tuple)
    try:
        listeners = tuple(Listener.parse(text) for text in texts)
    except ValueError as e:
        raise ConfigError(f"Invalid value for configuration {key}: {e}", key) from None
    names = [listener.name for listener in listeners]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"Configuration {key} names listener {name} twice", key)
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(
                f"Configuration {key} has listener {name}, which "
                "listener.security.protocol.map does not name",
                key,
            )
        if protocol not in _SUPPORTED_SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Configuration {key} has listener {name} with security protocol "
                f"{protocol}, but Tiercel supports only "
                f"{', '.join(_SUPPORTED_SECURITY_PROTOCOLS)} listeners",
                key,
            )
    return listeners


def _check_advertised(advertised: tuple[Listener, ...]) -> None:
    for listener in advertised:
        # Clients cannot connect to the wildcard address (Kafka rejects it too).
        if listener.host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"advertised.listeners cannot use the wildcard address in {listener}; "
                f"set advertised.listeners to an address clients can reach",
                "advertised.listeners",
            )


def _check_inter_broker_listener(
    values: Mapping[str, object],
    explicit: frozenset[str],
    advertised: tuple[Listener, ...],
    protocols: Mapping[str, str],
) -> None:
    """Kafka's KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol and its check that
    the inter-broker listener is advertised."""
    name = values["inter.broker.listener.name"]
    if name is not None and "security.inter.broker.protocol" in explicit:
        raise ConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol "
            "should be set.",
            "security.inter.broker.protocol",
        )
    if name is None and "security.inter.broker.protocol" in explicit:
        name = values["security.inter.broker.protocol"]
    if isinstance(name, str) and name.upper() not in protocols:
        raise ConfigError(
            f"Listener with name {name.upper()} defined in inter.broker.listener.name not "
            "found in listener.security.protocol.map.",
            "inter.broker.listener.name",
        )
    # Other brokers find this one on that listener among its advertised ones (as Kafka).
    if isinstance(name, str) and name.upper() not in {e.name for e in advertised}:
        raise ConfigError(
            f"inter.broker.listener.name {name} must be one of the advertised listeners "
            f"({', '.join(e.name for e in advertised)})",
            "inter.broker.listener.name",
        )


def _ssl_configs(
    values: Mapping[str, object],
    listeners: tuple[Listener, ...],
    protocols: Mapping[str, str],
    overrides: Mapping[str, Mapping[str, object]],
) -> dict[str, SslConfig]:
    """The SslConfig of every SSL listener this node serves or connects to (its
    listeners, and the controller listeners of the other voters); those it serves must
    have a key store (a server cannot do TLS without its certificate)."""
    for name in overrides:
        if name not in protocols:
            raise ConfigError(
                f"Configuration {LISTENER_PREFIX}{name.lower()}.*: no listener {name} in "
                "listener.security.protocol.map",
                f"{LISTENER_PREFIX}{name.lower()}",
            )
    controllers = values["controller.listener.names"]
    assert isinstance(controllers, tuple)
    used = {e.name for e in listeners} | {str(name).upper() for name in controllers}
    configs = {
        name: ssl_config(name, values, overrides.get(name, {}))
        for name in used
        if protocols.get(name) in _TLS_PROTOCOLS
    }
    for listener in listeners:
        config = configs.get(listener.name)
        if config is not None and not config.has_keystore:
            raise ConfigError(
                f"{protocols[listener.name]} listener {listener.name} has no key store: set "
                "ssl.keystore.location (or ssl.keystore.key and "
                "ssl.keystore.certificate.chain), or "
                f"{LISTENER_PREFIX}{listener.name.lower()}.ssl.keystore.location",
                "ssl.keystore.location",
            )
    return configs


def _check_failed_authentication_delay(values: Mapping[str, object]) -> None:
    """KafkaConfig.validateValues' bound on the failed-authentication delay."""
    delay, idle = (
        values["connection.failed.authentication.delay.ms"],
        values["connections.max.idle.ms"],
    )
    assert isinstance(delay, int) and isinstance(idle, int)
    if idle >= 0 and delay >= idle:
        raise ConfigError(
            f"connection.failed.authentication.delay.ms={delay} should always be less than "
            f"connections.max.idle.ms={idle} to prevent failed authentication responses from "
            "timing out",
            "connection.failed.authentication.delay.ms",
        )


def _check_topic_defaults(values: Mapping[str, object]) -> None:
    """The topic defaults the broker keys imply must be valid topic values (Kafka checks
    them when it builds the default LogConfig at startup)."""
    for topic_name, defn in TOPIC_CONFIGS.items():
        value = resolve_topic_default(topic_name, values)
        if defn.validator is None:
            continue
        try:
            defn.validator(value)
        except ValueError as e:
            source = next(s for s in defn.synonyms if values[s] is not None)
            raise ConfigError(
                f"Invalid value {render_value(BROKER_CONFIGS[source].type, values[source])} "
                f"for configuration {source}: as the default of topic config "
                f"{topic_name} the value {e}",
                source,
            ) from None
    min_lag = values["log.cleaner.min.compaction.lag.ms"]
    max_lag = values["log.cleaner.max.compaction.lag.ms"]
    assert isinstance(min_lag, int) and isinstance(max_lag, int)
    if min_lag > max_lag:
        raise ConfigError(
            f"log.cleaner.min.compaction.lag.ms ({min_lag}) is greater than "
            f"log.cleaner.max.compaction.lag.ms ({max_lag})",
            "log.cleaner.min.compaction.lag.ms",
        )


def _check_local_retention(values: Mapping[str, object]) -> None:
    """With tiering on, the broker's local retention defaults may not exceed its total
    retention ones (Kafka's LogConfig.validateBrokerLogConfigValues at LogManager start)."""
    if not values["remote.log.storage.system.enable"]:
        return
    for local_key, topic_key, total_key in (
        ("log.local.retention.ms", "retention.ms", "log.retention.ms"),
        ("log.local.retention.bytes", "retention.bytes", "log.retention.bytes"),
    ):
        local, total = values[local_key], resolve_topic_default(topic_key, values)
        assert isinstance(local, int) and isinstance(total, int)
        message = local_retention_problem(local, total, total_key)
        if message is not None:
            raise ConfigError(
                f"Invalid value {local} for configuration {local_key}: {message}", local_key
            )


def _check_partition_limit(values: Mapping[str, object]) -> None:
    """Topics the broker creates by itself must fit within max.partitions."""
    limit = values["max.partitions"]
    for key in ("num.partitions", "offsets.topic.num.partitions"):
        count = values[key]
        assert isinstance(count, int) and isinstance(limit, int)
        if count > limit:
            raise ConfigError(f"{key} ({count}) is greater than max.partitions ({limit})", key)
