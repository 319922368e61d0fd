"""KRaft keys of BrokerConfig: Kafka 4.0's names and defaults, the parsed quorum, and the
checks Kafka's KafkaConfig.validateValues makes for each process.roles."""

from __future__ import annotations

import pytest

from tiercel.config.broker_config import BrokerConfig, ConfigError
from tiercel.config.kraft_validation import QuorumVoter
from tiercel.server.kafka_raft_server import metadata_log_config, quorum_config

COMBINED = {
    "process.roles": "broker,controller",
    "node.id": 1,
    "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9095,3@[::1]:9097",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
}
CONTROLLER = {
    **COMBINED,
    "process.roles": "controller",
    "listeners": "CONTROLLER://127.0.0.1:9093",
}
BROKER = {
    **COMBINED,
    "process.roles": "broker",
    "node.id": 4,
    "listeners": "PLAINTEXT://127.0.0.1:9092",
}


def test_without_process_roles_a_node_is_not_kraft() -> None:
    b = BrokerConfig({})
    assert not b.kraft_mode and b.process_roles == frozenset()
    assert b.controller_listener_names == () and b.quorum_voters == ()
    assert b.metadata_log_dir == b.log_dirs[0]


def test_a_combined_node_parses_its_quorum_and_maps_the_controller_listener() -> None:
    b = BrokerConfig(COMBINED)
    assert b.kraft_mode and b.process_roles == frozenset({"broker", "controller"})
    assert b.quorum_voters == (
        QuorumVoter(1, "127.0.0.1", 9093),
        QuorumVoter(2, "127.0.0.1", 9095),
        QuorumVoter(3, "::1", 9097),
    )
    assert b.controller_listener_names == ("CONTROLLER",)
    # Left at its default, the protocol map gets the controller listener as PLAINTEXT.
    assert b.security_protocol_map["CONTROLLER"] == "PLAINTEXT"
    # The inter-broker listener is the first one that is not a controller's.
    assert b.inter_broker_listener_name == "PLAINTEXT"
    assert BrokerConfig({**COMBINED, "metadata.log.dir": "/meta"}).metadata_log_dir == "/meta"


def test_a_controller_and_a_broker_alone_are_valid() -> None:
    assert BrokerConfig(CONTROLLER).process_roles == frozenset({"controller"})
    broker = BrokerConfig(BROKER)
    assert broker.process_roles == frozenset({"broker"})
    assert broker.security_protocol_map["CONTROLLER"] == "PLAINTEXT"


def test_a_dynamic_quorum_is_named_by_its_bootstrap_servers() -> None:
    # KIP-853: without static voters any node may be a controller (the metadata log says
    # which are voters) or a broker, and the static voters win when both are set.
    dynamic = {"controller.quorum.voters": "", "controller.quorum.bootstrap.servers": "a:1,[::1]:2"}
    combined = BrokerConfig({**COMBINED, **dynamic, "node.id": 9})
    assert combined.quorum_voters == ()
    assert combined.quorum_bootstrap_servers == (("a", 1), ("::1", 2))
    assert BrokerConfig({**CONTROLLER, **dynamic}).quorum_bootstrap_servers == (
        ("a", 1),
        ("::1", 2),
    )
    assert BrokerConfig({**BROKER, **dynamic, "node.id": 1}).quorum_voters == ()
    both = quorum_config(BrokerConfig({**COMBINED, "controller.quorum.bootstrap.servers": "a:1"}))
    assert set(both.voters) == {1, 2, 3} and [str(b) for b in both.bootstrap_servers] == ["a:1"]
    with pytest.raises(ConfigError, match="must be included in the set of voters"):
        BrokerConfig({**COMBINED, "controller.quorum.bootstrap.servers": "a:1", "node.id": 9})


@pytest.mark.parametrize(
    ("raw", "key", "message"),
    [
        ({**COMBINED, "process.roles": "observer"}, "process.roles", "observer"),
        ({**COMBINED, "process.roles": "broker,broker"}, "process.roles", "twice"),
        ({**COMBINED, "controller.quorum.voters": ""}, "controller.quorum.voters", "parseable"),
        ({**COMBINED, "controller.quorum.voters": "1@host"}, "controller.quorum.voters", "{id}"),
        (
            {**COMBINED, "controller.quorum.voters": "", "controller.quorum.bootstrap.servers": ""},
            "controller.quorum.voters",
            "either controller.quorum.bootstrap.servers must contain the set of bootstrap",
        ),
        (
            {**COMBINED, "controller.quorum.bootstrap.servers": "127.0.0.1"},
            "controller.quorum.bootstrap.servers",
            'Each entry should be in the form "{host}:{port}"',
        ),
        (
            {**COMBINED, "controller.quorum.voters": "1@a:1,1@b:2"},
            "controller.quorum.voters",
            "voter 1 twice",
        ),
        (
            {**BROKER, "controller.listener.names": ""},
            "controller.listener.names",
            "at least one value",
        ),
        ({**COMBINED, "node.id": 9}, "controller.quorum.voters", "must be included"),
        (
            {**COMBINED, "controller.listener.names": "CONTROLLER,OTHER"},
            "controller.listener.names",
            "must only contain values appearing",
        ),
        (
            {**CONTROLLER, "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"},
            "listeners",
            "only contain KRaft controller listeners",
        ),
        ({**BROKER, "node.id": 2}, "controller.quorum.voters", "must not be included"),
        (
            {**BROKER, "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"},
            "controller.listener.names",
            "must not contain a value appearing",
        ),
        (
            {
                **BROKER,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
            },
            "controller.listener.names",
            "not found in listener.security.protocol.map",
        ),
        (
            {**COMBINED, "listeners": "CONTROLLER://127.0.0.1:9093"},
            "listeners",
            "at least one broker listener",
        ),
        ({"controller.listener.names": "CONTROLLER"}, "controller.listener.names", "not running"),
    ],
)
def test_a_kraft_configuration_that_does_not_fit_is_refused(
    raw: dict[str, object], key: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig(raw)
    assert caught.value.key == key
    assert message in str(caught.value)


def test_only_the_internal_key_lowers_the_metadata_segment_floor() -> None:
    # Kafka refuses metadata segments smaller than the largest batch (8 MiB) unless the
    # internal metadata.log.segment.min.bytes, meant for tests, lowers the floor.
    small = {**COMBINED, "metadata.log.segment.bytes": 4096}
    with pytest.raises(ValueError, match="below 8388608: 4096"):
        metadata_log_config(BrokerConfig(small))
    lowered = metadata_log_config(BrokerConfig({**small, "metadata.log.segment.min.bytes": 1024}))
    assert (lowered.log_segment_bytes, lowered.log_segment_min_bytes) == (4096, 1024)
