"""BrokerConfig: key checking, aliases, listeners, synonym precedence, typed views."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tiercel.config.broker_config import BrokerConfig, ConfigError, Listener
from tiercel.config.kafka_config import BROKER_CONFIGS
from tiercel.config.log_config import topic_defaults
from tiercel.config.ssl_configs import SSL_CONFIGS
from tiercel.config.topic_configs import TOPIC_CONFIGS

HOUR_MS = 3_600_000


def test_defaults() -> None:
    b = BrokerConfig({})
    assert b.explicit == frozenset()
    assert b.node_id == 1
    assert b.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert b.advertised_listeners == b.listeners
    assert b.log_dirs == ["./data"]
    assert b.cluster_id is None and not b.kraft_mode
    assert b.num_partitions == 1 and b.default_replication_factor == 1
    assert b.auto_create_topics_enable is True and b.delete_topic_enable is True
    assert b.message_max_bytes == 1048588
    assert b.socket_request_max_bytes == 104857600
    assert b.queued_max_requests == 500
    assert b.log_retention_check_interval_ms == 300000
    assert b.log_flush_offset_checkpoint_interval_ms == 60000
    assert b.log_flush_start_offset_checkpoint_interval_ms == 60000
    assert b.replica_high_watermark_checkpoint_interval_ms == 5000
    assert b.num_recovery_threads_per_data_dir == 1
    assert b.offsets_topic_replication_factor == 3
    assert b.leader_imbalance_check_interval_seconds == 300


def test_every_key_is_readable_with_get() -> None:
    b = BrokerConfig({})
    for name, defn in BROKER_CONFIGS.items():
        assert b.get(name) == defn.default


def test_values_are_parsed_and_explicit_keys_recorded() -> None:
    b = BrokerConfig(
        {
            "num.partitions": "3",
            "auto.create.topics.enable": "false",
            "log.dirs": "/a, /b",
            "min.insync.replicas": "2",
            "cluster.id": 12345,
        }
    )
    assert b.num_partitions == 3
    assert b.auto_create_topics_enable is False
    assert b.log_dirs == ["/a", "/b"]
    assert b.get("min.insync.replicas") == 2
    assert b.cluster_id == "12345"
    assert b.explicit == {
        "num.partitions",
        "auto.create.topics.enable",
        "log.dirs",
        "min.insync.replicas",
        "cluster.id",
    }


def test_unknown_key_names_the_closest_valid_key() -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"log.retention.hour": 24})
    assert e.value.key == "log.retention.hour"
    assert "log.retention.hours" in str(e.value)
    with pytest.raises(ConfigError, match=r"did you mean log\.retention\.ms"):
        BrokerConfig({"retention.ms": 1})
    with pytest.raises(ConfigError, match=r"^Unknown broker configuration qqq$"):
        BrokerConfig({"qqq": 1})
    with pytest.raises(ConfigError, match=r"did you mean num\.partitions"):
        BrokerConfig({}).get("num.partition")


def test_ill_typed_value_names_key_value_and_type() -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"num.partitions": "three"})
    assert e.value.key == "num.partitions"
    assert "'three'" in str(e.value) and "INT" in str(e.value)
    with pytest.raises(ConfigError, match="must be at least 1"):
        BrokerConfig({"num.partitions": 0})
    with pytest.raises(ConfigError, match="SHORT"):
        BrokerConfig({"offsets.topic.replication.factor": 40000})
    with pytest.raises(ConfigError, match=r"log\.segment\.bytes.*at least 14"):
        BrokerConfig({"log.segment.bytes": 13})


def test_aliases() -> None:
    b = BrokerConfig({"broker.id": "7", "log.dir": "/var/tiercel"})
    assert b.node_id == 7 and b.get("broker.id") == 7
    assert b.log_dirs == ["/var/tiercel"]
    assert b.explicit == {"node.id", "log.dirs"}
    assert BrokerConfig({"broker.id": 2, "node.id": "2"}).node_id == 2
    with pytest.raises(ConfigError, match=r"broker\.id and node\.id are two names") as e:
        BrokerConfig({"broker.id": 2, "node.id": 3})
    assert e.value.key == "node.id"


def test_null_leaves_a_nullable_key_unset_and_is_refused_elsewhere() -> None:
    b = BrokerConfig({"log.retention.ms": None, "advertised.listeners": None})
    assert b.get("log.retention.ms") is None and b.explicit == frozenset()
    with pytest.raises(ConfigError, match=r"num\.partitions needs a value"):
        BrokerConfig({"num.partitions": None})


def test_non_string_key() -> None:
    with pytest.raises(ConfigError, match="must be strings"):
        BrokerConfig({1: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("settings", "expected_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.retention.hours": 24}, 24 * HOUR_MS),
        ({"log.retention.minutes": 30, "log.retention.hours": 24}, 30 * 60_000),
        ({"log.retention.ms": 5000, "log.retention.minutes": 30}, 5000),
        ({"log.retention.ms": 5000, "log.retention.hours": 1}, 5000),
        ({"log.retention.ms": -1}, -1),
        ({"log.retention.ms": -7}, -1),
        ({"log.retention.hours": -1}, -1),
        ({"log.retention.minutes": -1, "log.retention.hours": 5}, -1),
    ],
)
def test_retention_precedence_ms_then_minutes_then_hours(
    settings: dict[str, object], expected_ms: int
) -> None:
    assert topic_defaults(BrokerConfig(settings))["retention.ms"] == expected_ms


@pytest.mark.parametrize(
    ("settings", "segment_ms", "jitter_ms"),
    [
        ({}, 168 * HOUR_MS, 0),
        ({"log.roll.hours": 1}, HOUR_MS, 0),
        ({"log.roll.ms": 1234, "log.roll.hours": 1}, 1234, 0),
        ({"log.roll.jitter.hours": 2}, 168 * HOUR_MS, 2 * HOUR_MS),
        ({"log.roll.jitter.ms": 10, "log.roll.jitter.hours": 2}, 168 * HOUR_MS, 10),
    ],
)
def test_roll_precedence_ms_then_hours(
    settings: dict[str, object], segment_ms: int, jitter_ms: int
) -> None:
    defaults = topic_defaults(BrokerConfig(settings))
    assert defaults["segment.ms"] == segment_ms
    assert defaults["segment.jitter.ms"] == jitter_ms


def test_flush_ms_falls_back_to_the_scheduler_interval() -> None:
    assert topic_defaults(BrokerConfig({"log.flush.scheduler.interval.ms": 900}))["flush.ms"] == 900
    b = BrokerConfig({"log.flush.interval.ms": 50, "log.flush.scheduler.interval.ms": 900})
    assert topic_defaults(b)["flush.ms"] == 50


def test_single_synonyms_supply_topic_defaults() -> None:
    d = topic_defaults(
        BrokerConfig(
            {
                "message.max.bytes": 2000,
                "log.cleanup.policy": "compact",
                "log.cleaner.min.cleanable.ratio": "0.25",
                "log.index.size.max.bytes": 4096,
                "min.insync.replicas": 2,
            }
        )
    )
    assert d["max.message.bytes"] == 2000
    assert d["cleanup.policy"] == ("compact",)
    assert d["min.cleanable.dirty.ratio"] == 0.25
    assert d["segment.index.bytes"] == 4096
    assert d["min.insync.replicas"] == 2


def test_implied_topic_defaults_are_validated_against_the_broker_key() -> None:
    with pytest.raises(ConfigError, match=r"log\.roll\.ms.*segment\.ms.*at least 1") as e:
        BrokerConfig({"log.roll.ms": 0})
    assert e.value.key == "log.roll.ms"
    with pytest.raises(ConfigError, match=r"log\.flush\.interval\.ms") as e:
        BrokerConfig({"log.flush.interval.ms": -5})
    assert e.value.key == "log.flush.interval.ms"
    with pytest.raises(ConfigError, match=r"log\.cleaner\.min\.compaction\.lag\.ms"):
        BrokerConfig(
            {"log.cleaner.min.compaction.lag.ms": 10, "log.cleaner.max.compaction.lag.ms": 5}
        )


@pytest.mark.parametrize(
    ("text", "listener"),
    [
        ("PLAINTEXT://127.0.0.1:9092", Listener("PLAINTEXT", "127.0.0.1", 9092)),
        ("PLAINTEXT://:9092", Listener("PLAINTEXT", "", 9092)),
        ("plaintext://broker-1.example.com:0", Listener("PLAINTEXT", "broker-1.example.com", 0)),
        ("PLAINTEXT://[::1]:9093", Listener("PLAINTEXT", "::1", 9093)),
        (" PLAINTEXT://0.0.0.0:65535 ", Listener("PLAINTEXT", "0.0.0.0", 65535)),
    ],
)
def test_listener_parse_and_str(text: str, listener: Listener) -> None:
    assert Listener.parse(text) == listener
    assert Listener.parse(str(listener)) == listener


@pytest.mark.parametrize(
    "text", ["127.0.0.1:9092", "PLAINTEXT://host", "PLAINTEXT://host:99999", "PLAINTEXT//h:1"]
)
def test_listener_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        Listener.parse(text)


def test_listeners_config() -> None:
    b = BrokerConfig({"listeners": "PLAINTEXT://:9092"})
    assert b.listeners == (Listener("PLAINTEXT", "", 9092),)
    assert b.advertised_listeners == b.listeners
    b = BrokerConfig(
        {
            "listeners": ["PLAINTEXT://0.0.0.0:9092"],
            "advertised.listeners": "PLAINTEXT://broker1:19092",
        }
    )
    assert b.listeners == (Listener("PLAINTEXT", "0.0.0.0", 9092),)
    assert b.advertised_listeners == (Listener("PLAINTEXT", "broker1", 19092),)


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({"listeners": "localhost:9092"}, "listeners", "NAME://host:port"),
        ({"listeners": ""}, "listeners", "at least one"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listeners", "twice"),
        (
            {"listeners": "SSL://:9093"},
            "ssl.keystore.location",
            "SSL listener SSL has no key store",
        ),
        (
            {"listeners": "SASL_SSL://:9093"},
            "ssl.keystore.location",
            "SASL_SSL listener SASL_SSL has no key store",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://:9093"},
            "sasl.enabled.mechanisms",
            r"GSSAPI \(Kerberos\) is not supported by Tiercel",
        ),
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners", "wildcard"),
        ({"advertised.listeners": "OTHER://h:1"}, "advertised.listeners", "does not name"),
        ({"advertised.listeners": "PLAINTEXT://[::]:1"}, "advertised.listeners", "wildcard"),
    ],
)
def test_bad_listeners(settings: dict[str, object], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        BrokerConfig(settings)
    assert e.value.key == key


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("zookeeper.connect", "process.roles"),
        ("zookeeper.session.timeout.ms", "process.roles"),
        ("zookeeper.connection.timeout.ms", "process.roles"),
        ("controlled.shutdown.max.retries", "broker.session.timeout.ms"),
        ("controlled.shutdown.retry.backoff.ms", "broker.session.timeout.ms"),
    ],
)
def test_keys_of_zookeeper_mode_are_refused_with_what_to_set_instead(
    key: str, instead: str
) -> None:
    """ZooKeeper mode is gone (Kafka 4.0): its keys say what replaced them."""
    with pytest.raises(ConfigError, match=f"ZooKeeper mode is gone.*{instead}") as e:
        BrokerConfig({key: "1"})
    assert e.value.key == key


def test_repr_shows_explicit_settings() -> None:
    assert repr(BrokerConfig({"num.partitions": "4"})) == "BrokerConfig(num.partitions=4)"


def test_every_typed_view_reads_a_defined_key_of_its_type() -> None:
    b = BrokerConfig({"cluster.id": "abc"})
    views = [name for name in dir(BrokerConfig) if not name.startswith("_")]
    for name in views:
        getattr(b, name)  # a wrong key name or type raises here
    assert len(views) > 40


def test_named_listeners_map_to_plaintext() -> None:
    config = BrokerConfig(
        {
            "listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://127.0.0.1:9092",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    assert [listener.name for listener in config.listeners] == ["INTERNAL", "EXTERNAL"]
    assert config.inter_broker_listener_name == "INTERNAL"


@pytest.mark.parametrize(
    ("protocol_map", "message"),
    [
        ("PLAINTEXT:PLAINTEXT", "does not name"),
        ("INTERNAL:SSL", "SSL listener INTERNAL has no key store"),
        ("INTERNAL:SASL_SSL", "SASL_SSL listener INTERNAL has no key store"),
        (
            "INTERNAL:TLS",
            "security protocol TLS, but Tiercel supports only PLAINTEXT, SSL, SASL_PLAINTEXT, "
            "SASL_SSL",
        ),
        ("INTERNAL", "expected NAME:PROTOCOL"),
        ("INTERNAL:PLAINTEXT,internal:PLAINTEXT", "twice"),
    ],
)
def test_listener_security_protocol_map_is_checked(protocol_map: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(
            {
                "listeners": "INTERNAL://127.0.0.1:19092",
                "listener.security.protocol.map": protocol_map,
            }
        )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"log.preallocate": "true"}, "log.preallocate=true is not supported by Tiercel"),
    ],
)
def test_unsupported_keys_accept_only_their_default(
    setting: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(setting)
    name = next(iter(setting))
    assert BrokerConfig({name: BROKER_CONFIGS[name].default}).explicit == {name}


def test_every_key_is_read_by_the_broker_or_refused_unless_default() -> None:
    """No setting accepted and silently ignored: each broker key is read by the server or
    storage code (through its typed view or by name), supplies a topic default, or is
    `unsupported`. Listener keys are read by BrokerConfig itself, into `listeners`."""
    root = Path(__file__).resolve().parents[3]
    sources = "\n".join(
        p.read_text(encoding="utf-8")
        for d in ("server", "storage", "tiered")
        for p in (root / d).rglob("*.py")
    )
    read_by_broker_config = {
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        # Read by BrokerConfig to split off the plugin keys.
        "remote.log.storage.manager.impl.prefix",
        "remote.log.metadata.manager.impl.prefix",
        # Parsed by BrokerConfig (quorum_voters, quorum_bootstrap_servers,
        # controller_listener_names), which the KRaft node reads.
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "controller.listener.names",
        # Read by BrokerConfig into each SSL listener's SslConfig and the inter-broker
        # listener name.
        *(d.name for d in SSL_CONFIGS),
        "security.inter.broker.protocol",
        # Read by BrokerConfig into each SASL listener's SaslConfig, and checked against
        # the inter-broker listener's (inter_broker_sasl_login).
        "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol",
    }
    topic_synonyms = {s for d in TOPIC_CONFIGS.values() for s in d.synonyms}
    allowed = topic_synonyms | read_by_broker_config
    for name, defn in BROKER_CONFIGS.items():
        read = re.search(rf"\.{name.replace('.', '_')}\b|\"{re.escape(name)}\"", sources)
        assert read or name in allowed or defn.unsupported, (
            f"{name} is accepted but nothing reads it"
        )


def test_topics_the_broker_creates_itself_fit_within_max_partitions() -> None:
    assert BrokerConfig({}).max_partitions == 10000
    with pytest.raises(ConfigError, match=r"num.partitions \(30\) is greater than max.partitions"):
        BrokerConfig(
            {"max.partitions": 20, "num.partitions": 30, "offsets.topic.num.partitions": 1}
        )
    with pytest.raises(ConfigError, match=r"offsets.topic.num.partitions \(50\) is greater"):
        BrokerConfig({"max.partitions": 20})
